"""GPU sharing: per-GPU accounting of milli-GPU shares, never more than 1000 milli on one GPU, whole GPUs only from
idle GPUs, and allocations that can be released exactly."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trimtab.cluster import GPU_MILLI, Allocation, ClusterState
from trimtab.model import Node, Resources


def one(node: int, task: Resources, count: int = 1, gpu_idx=None) -> Allocation:
    idx = None if gpu_idx is None else np.array(gpu_idx)
    return Allocation(np.array([node]), np.array([count]), task, gpu_idx=idx)


def test_a_node_with_eight_gpus_each_sixty_percent_used_has_no_free_gpu():
    """8 GPUs x 600 milli used is 3200 free milli but 0 free GPUs; a 500-milli share no longer fits."""
    state = ClusterState([Node("a", Resources(8, 64_000, 1 << 20))])
    for gpu in range(8):
        state.allocate(one(0, Resources(gpu_milli=600), gpu_idx=[gpu]))
    assert state.free_gpus.tolist() == [0]
    assert state.free_gpu_milli.tolist() == [3200]
    assert state.free_gpus_total == 0
    assert state.fit_counts(Resources(gpus=1)).tolist() == [0]
    assert state.fit_counts(Resources(gpu_milli=500)).tolist() == [0]
    assert state.fit_counts(Resources(gpu_milli=400)).tolist() == [8]
    assert state.allocated_gpu_milli == 4800


def test_shares_go_to_the_fullest_gpu_they_fit_and_release_exactly():
    state = ClusterState([Node("a", Resources(2, 8_000, 1024))])
    first = one(0, Resources(gpu_milli=700))
    state.allocate(first)
    second = one(0, Resources(gpu_milli=300))
    state.allocate(second)
    assert first.gpu_idx.tolist() == [0] and second.gpu_idx.tolist() == [0]  # filled GPU 0 exactly
    assert state.gpu_free_milli[0].tolist() == [0, 1000]
    whole = one(0, Resources(gpus=1))
    state.allocate(whole)
    assert whole.gpu_idx.tolist() == [1]
    state.release(first)
    assert state.gpu_free_milli[0].tolist() == [700, 0]
    with pytest.raises(ValueError, match="over-allocate node a"):
        state.allocate(one(0, Resources(gpu_milli=800)))
    assert state.gpu_free_milli[0].tolist() == [700, 0], "a refused allocation changes nothing"


def test_a_share_named_on_a_busy_gpu_is_refused():
    state = ClusterState([Node("a", Resources(1, 8_000, 1024))])
    state.allocate(one(0, Resources(gpu_milli=600), gpu_idx=[0]))
    with pytest.raises(ValueError, match="GPU 0"):
        state.allocate(one(0, Resources(gpu_milli=500), gpu_idx=[0]))


def test_a_share_is_released_only_through_the_allocation_that_placed_it():
    state = ClusterState([Node("a", Resources(1, 8_000, 1024))])
    state.allocate(one(0, Resources(gpu_milli=600)))
    with pytest.raises(ValueError, match="released through the allocation"):
        state.release(one(0, Resources(gpu_milli=600)))


def test_txn_discard_restores_shares():
    state = ClusterState([Node("a", Resources(2, 8_000, 1024))])
    with state.txn() as txn:
        txn.allocate(one(0, Resources(gpu_milli=250), count=3))
        assert state.free_gpu_milli.tolist() == [1250]
    assert state.gpu_free_milli[0].tolist() == [1000, 1000]
    assert state.free_gpus.tolist() == [2] and state.free_gpus_total == 2


def test_resources_validate_one_kind_of_gpu_request():
    assert Resources(gpus=1) == Resources(1, 0, 0)
    assert Resources(2, 4_000, 512).gpu_milli_total == 2000
    assert Resources(gpu_milli=460).gpu_milli_total == 460
    for bad in (dict(gpu_milli=1000), dict(gpus=1, gpu_milli=10), dict(gpu_milli=5, mig="1g.5gb"),
                dict(mig="big"), dict(gpu_milli=-1)):
        with pytest.raises(ValueError):
            Resources(**bad)


requests = st.one_of(st.builds(lambda m, c: Resources(gpu_milli=m, cpu_milli=c), st.integers(1, 999),
                               st.integers(0, 4_000)),
                     st.builds(lambda g, c: Resources(gpus=g, cpu_milli=c), st.integers(1, 4), st.integers(0, 4_000)))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 2), requests, st.integers(1, 3)), max_size=40))
def test_no_gpu_ever_holds_more_than_1000_milli(steps):
    """Any sequence of allocations (refused or not) and releases keeps every GPU within 0..1000 milli, the idle
    count equal to the GPUs with nothing on them, a share's fit equal to what the rows hold, and releasing
    everything restores the empty cluster."""
    nodes = [Node(f"n{i}", Resources(g, 16_000, 1 << 16)) for i, g in enumerate((8, 2, 4))]
    state = ClusterState(nodes)
    held: list[Allocation] = []
    for release, node, task, count in steps:
        if release and held:
            state.release(held.pop(node % len(held)))
        else:
            fits = state.fit_counts(task)[node] >= count
            try:
                alloc = one(node, task, count)
                state.allocate(alloc)
                held.append(alloc)
                assert fits, "fit_counts said it would not fit"
            except ValueError:
                assert not fits, "fit_counts said it would fit"
        rows = state.gpu_free_milli
        assert ((rows >= 0) & (rows <= GPU_MILLI)).all()
        assert (rows[~state.gpu_exists] == 0).all()
        idle = ((rows == GPU_MILLI) & state.gpu_exists).sum(axis=1)
        assert state.free_gpus.tolist() == idle.tolist()
        assert state.free_gpu_milli.tolist() == rows.sum(axis=1).tolist()
        assert state.free_gpus_total == int(idle.sum())
        for share in (250, 700):  # the fit of a share, kept per size across changes, is the rows' count
            assert state.fit_counts(Resources(gpu_milli=share)).tolist() == (rows // share).sum(axis=1).tolist()
    for alloc in reversed(held):
        state.release(alloc)
    assert state.free_gpus.tolist() == [8, 2, 4]
    assert state.free_cpu_milli.tolist() == [16_000] * 3
    assert state.tasks_running.tolist() == [0, 0, 0]
