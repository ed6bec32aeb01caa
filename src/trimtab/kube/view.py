"""The cluster as the live scheduler last saw it, kept between cycles: a ClusterState over the Ready nodes with the
pods that hold capacity booked on it, updated from one snapshot to the next by what changed.

Owns ClusterView. Booking thousands of bound pods afresh every cycle cost more than the rest of a cycle at the
scale of the issue (1,000 nodes, 10,000 pods); the view books only the pods new since the last cycle. It gives the
same ClusterState a fresh build would: a node whose pods did not only grow (one left, or one read differently) is
booked again, its pods in snapshot order, as a fresh build books them. One difference: a node that stops being
Ready stays in the state, down (nothing is placed on it; `trimtab why` counts it among the nodes "down or
drained", as kube-scheduler counts a NotReady node among all nodes), until the next rebuild, so a node whose
heartbeats lag for a moment (KWOK's or a kubelet's, on a loaded control plane) does not cost a rebuild of the whole
state."""

from __future__ import annotations

import copy
from collections.abc import Collection, Sequence

import numpy as np

from trimtab.cluster import Allocation, ClusterState
from trimtab.model import Job, Node, Resources

Booking = tuple[str, Resources, Allocation | None]  # (holding job id, its task, its allocation; None: did not fit)


class ClusterView:
    """`update(nodes, holding)` once a cycle, from the cycle's snapshot; `copy()` then gives the cycle's Scheduler
    its own ClusterState (the cycle books its starts and preemptions on it, not on the view)."""

    def __init__(self) -> None:
        self._nodes: list[Node] = []  # the state's nodes: the Ready ones at its build, in their order
        self._by_name: dict[str, Node] = {}
        self._state: ClusterState | None = None
        self._booked: dict[int, list[Booking]] = {}  # node index -> its bookings, in booking order

    def update(self, nodes: list[Node], holding: Sequence[tuple[Job, str, float]],
               present: Collection[str] = ()) -> list[tuple[Job, Allocation, float]]:
        """Book `holding` (the snapshot's (one-pod Job, node name, start) in snapshot order) on the Ready `nodes`.
        Returns (job, allocation, start) for each pod booked, in snapshot order; a pod beyond what trimtab models
        on its node (another scheduler's overcommit) is left out, as a fresh build leaves it out. `nodes` must not
        be empty. `present`: the names of every Node of the cluster, Ready or not; a node of the state not Ready
        now but present stays in it, down; the state is built afresh, over `nodes`, when one of them is new or read
        differently, or a node of the state has left the cluster."""
        known, ready = self._by_name, {node.name for node in nodes}
        if self._state is None or any((old := known.get(node.name)) is not node and old != node for node in nodes) \
                or any(name not in ready and name not in present for name in known):
            self._nodes, self._state, self._booked = list(nodes), ClusterState(nodes), {}
            self._by_name = {node.name: node for node in nodes}
        state = self._state
        for i, node in enumerate(self._nodes):
            state.set_health(i, node.name in ready)
        wanted: dict[int, list[Job]] = {}
        for job, node, _ in holding:
            wanted.setdefault(state.index[node], []).append(job)
        for node in [n for n in self._booked if n not in wanted]:
            self._unbook(node)
        allocs: dict[str, Allocation | None] = {}
        for node, jobs in wanted.items():
            booked = self._booked.get(node, [])
            if len(booked) > len(jobs) or any(b[0] != job.id or b[1] != job.task
                                              for b, job in zip(booked, jobs[:len(booked)], strict=True)):
                self._unbook(node)  # not a mere growth: this node is booked again from scratch
                booked = []
            booked += [(job.id, job.task, self._book(node, job)) for job in jobs[len(booked):]]
            self._booked[node] = booked
            allocs.update((job_id, alloc) for job_id, _, alloc in booked)
        return [(job, alloc, start_s) for job, _, start_s in holding if (alloc := allocs[job.id]) is not None]

    def copy(self) -> ClusterState:
        """A ClusterState of its own, equal to the view's (the nodes themselves are shared: they do not change)."""
        assert self._state is not None, "update() first"
        return copy.deepcopy(self._state, {id(self._state.nodes): self._state.nodes})

    def _book(self, node: int, job: Job) -> Allocation | None:
        assert self._state is not None
        alloc = Allocation(np.array([node]), np.ones(1, dtype=np.int64), job.task)
        try:
            self._state.allocate(alloc)
        except ValueError:
            return None
        return alloc

    def _unbook(self, node: int) -> None:
        """Release every booking of `node`, newest first."""
        assert self._state is not None
        for _, _, alloc in reversed(self._booked.pop(node, [])):
            if alloc is not None:
                self._state.release(alloc)
