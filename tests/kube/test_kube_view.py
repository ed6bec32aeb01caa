"""The cluster view kept between cycles (trimtab.kube.view) books what a fresh build books: after any sequence of
snapshots, its ClusterState equals one built from the last snapshot alone."""

from __future__ import annotations

import random

import numpy as np

from trimtab.cluster import Allocation, ClusterState
from trimtab.kube.view import ClusterView
from trimtab.model import Job, Node, Resources

NODES = [Node(f"n{i}", Resources(gpus=4, cpu_milli=8000, mem_mib=32768)) for i in range(3)]
ARRAYS = ("free_gpus", "free_cpu_milli", "free_mem_mib", "gpu_free_milli", "free_gpu_milli", "tasks_running")


def fresh(holding: list[tuple[Job, str, float]]) -> tuple[ClusterState, list[str]]:
    """The cluster a cycle built from one snapshot before the view was kept, and the jobs it adopted."""
    state, adopted = ClusterState(NODES), []
    for job, node, _ in holding:
        try:
            state.allocate(Allocation(np.array([state.index[node]]), np.ones(1, dtype=np.int64), job.task))
            adopted.append(job.id)
        except ValueError:
            continue
    return state, adopted


def test_the_view_equals_a_fresh_build_after_every_snapshot() -> None:
    rng = random.Random(7)
    view = ClusterView()
    pods = [(Job(f"bound:{i}", 0.0, 1, Resources(gpus=rng.choice((1, 2)), cpu_milli=rng.choice((500, 3000)))),
             f"n{rng.randrange(3)}", float(i)) for i in range(40)]
    holding: list[tuple[Job, str, float]] = []
    for _ in range(60):
        if holding and rng.random() < 0.4:
            holding.pop(rng.randrange(len(holding)))  # a pod ends
        else:
            holding.insert(rng.randrange(len(holding) + 1), rng.choice(pods))  # bound, somewhere in pod order
            holding = list({job.id: (job, node, s) for job, node, s in holding}.values())
        booked = view.update(NODES, holding)
        state, adopted = fresh(holding)
        assert [job.id for job, _, _ in booked] == adopted
        copy = view.copy()
        for name in ARRAYS:
            assert np.array_equal(getattr(copy, name), getattr(state, name)), name
        assert copy.free_gpus_total == state.free_gpus_total


def test_a_copy_is_the_cycles_own() -> None:
    view = ClusterView()
    view.update(NODES, [(Job("bound:a", 0.0, 1, Resources(gpus=4)), "n0", 0.0)])
    copy = view.copy()
    copy.allocate(Allocation(np.array([1]), np.ones(1, dtype=np.int64), Resources(gpus=4)))
    assert view.copy().free_gpus.tolist() == [0, 4, 4]


def test_a_node_that_stops_being_ready_stays_down_without_a_rebuild() -> None:
    """A node whose heartbeats lag for a moment costs no rebuild: it stays in the state, down (nothing fits on it),
    its pods unbooked; back Ready, only its own pods are booked again. A node gone from the cluster rebuilds."""
    view = ClusterView()
    a, b = (Job(f"bound:{x}", 0.0, 1, Resources(gpus=1)) for x in "ab")
    names = [n.name for n in NODES]
    view.update(NODES, [(a, "n0", 0.0), (b, "n1", 0.0)], names)
    state = view._state
    view.update([NODES[0], NODES[2]], [(a, "n0", 0.0)], names)  # n1 NotReady
    assert view._state is state
    down = view.copy()
    assert down.healthy.tolist() == [True, False, True] and down.free_gpus.tolist() == [3, 4, 4]
    assert down.fit_counts(Resources(gpus=1)).tolist() == [3, 0, 4]
    assert down.free_gpus_total == 7
    view.update(NODES, [(a, "n0", 0.0), (b, "n1", 0.0)], names)  # back
    assert view._state is state and view.copy().free_gpus.tolist() == [3, 3, 4]
    assert view.copy().healthy.all() and view.copy().free_gpus_total == 10
    view.update([NODES[0], NODES[2]], [(a, "n0", 0.0)], ["n0", "n2"])  # n1 deleted
    assert view._state is not state and [n.name for n in view._state.nodes] == ["n0", "n2"]
