"""ClusterState: capacity and free resources per node as numpy arrays, and Txn, the all-or-nothing allocation.

Everything here is vectorised over nodes; the scheduler is the only writer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trimtab.model import Node, Resources

_BIG = np.iinfo(np.int64).max


@dataclass(frozen=True, slots=True)
class Allocation:
    """Where a gang runs: `counts[i]` tasks of `task` on node index `nodes[i]` (nodes ascending, counts > 0)."""

    nodes: np.ndarray
    counts: np.ndarray
    task: Resources

    @property
    def tasks(self) -> int:
        return int(self.counts.sum())

    @property
    def gpus(self) -> int:
        return self.tasks * self.task.gpus


class ClusterState:
    """Capacity, free resources, GPU models, racks and health of every node, one numpy array per quantity.

    Node i is `nodes[i]`. `free_*` never go below zero and never above `cap_*`: `allocate` and `release` check."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        if not nodes:
            raise ValueError("a cluster needs at least one node")
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})[:3]
            raise ValueError(f"duplicate node names: {', '.join(dup)}")
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self.index: dict[str, int] = {n: i for i, n in enumerate(names)}
        self.cap_gpus = np.array([n.capacity.gpus for n in nodes], dtype=np.int64)
        self.cap_cpu_milli = np.array([n.capacity.cpu_milli for n in nodes], dtype=np.int64)
        self.cap_mem_mib = np.array([n.capacity.mem_mib for n in nodes], dtype=np.int64)
        self.free_gpus = self.cap_gpus.copy()
        self.free_cpu_milli = self.cap_cpu_milli.copy()
        self.free_mem_mib = self.cap_mem_mib.copy()
        self.healthy = np.ones(len(nodes), dtype=bool)
        self.free_gpus_total = int(self.cap_gpus.sum())  # free GPUs on healthy nodes, kept in step by _apply
        self.gpu_models: tuple[str, ...] = tuple(sorted({n.gpu_model for n in nodes}))
        self.model_idx = np.array([self.gpu_models.index(n.gpu_model) for n in nodes], dtype=np.int64)
        self.racks: tuple[str, ...] = tuple(dict.fromkeys(n.rack for n in nodes))
        self.rack_idx = np.array([self.racks.index(n.rack) for n in nodes], dtype=np.int64)
        self._label_masks: dict[tuple[str, str], np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def total_gpus(self) -> int:
        return int(self.cap_gpus.sum())

    @property
    def allocated_gpus(self) -> int:
        return int((self.cap_gpus - self.free_gpus).sum())

    def fit_counts(self, task: Resources) -> np.ndarray:
        """How many tasks of `task` each node can take now (0 on unhealthy nodes)."""
        counts = np.full(len(self.nodes), _BIG, dtype=np.int64)
        for need, free in (
            (task.gpus, self.free_gpus),
            (task.cpu_milli, self.free_cpu_milli),
            (task.mem_mib, self.free_mem_mib),
        ):
            if need:
                np.minimum(counts, free // need, out=counts)
        if counts[0] == _BIG and not (task.gpus or task.cpu_milli or task.mem_mib):
            counts[:] = _BIG  # an empty request fits anywhere, any number of times
        counts[~self.healthy] = 0
        return counts

    def label_mask(self, key: str, value: str) -> np.ndarray:
        """Nodes whose label `key` equals `value` (cached: labels never change)."""
        mask = self._label_masks.get((key, value))
        if mask is None:
            mask = np.array([n.labels.get(key) == value for n in self.nodes], dtype=bool)
            self._label_masks[(key, value)] = mask
        return mask

    def model_mask(self, models: Sequence[str]) -> np.ndarray:
        """Nodes whose GPU model is one of `models`."""
        wanted = [i for i, m in enumerate(self.gpu_models) if m in models]
        return np.isin(self.model_idx, wanted)

    def allocate(self, alloc: Allocation) -> None:
        self._apply(alloc, -1)

    def release(self, alloc: Allocation) -> None:
        self._apply(alloc, +1)

    def _apply(self, alloc: Allocation, sign: int) -> None:
        nodes, counts, task = alloc.nodes, alloc.counts, alloc.task
        for need, free, cap in (
            (task.gpus, self.free_gpus, self.cap_gpus),
            (task.cpu_milli, self.free_cpu_milli, self.cap_cpu_milli),
            (task.mem_mib, self.free_mem_mib, self.cap_mem_mib),
        ):
            if not need:
                continue
            after = free[nodes] + sign * need * counts
            bad = (after < 0) | (after > cap[nodes])
            if bad.any():
                name = self.nodes[int(nodes[np.argmax(bad)])].name
                verb = "over-allocate" if sign < 0 else "release more than allocated on"
                raise ValueError(f"allocation would {verb} node {name}")
            free[nodes] = after
        if task.gpus:
            self.free_gpus_total += sign * task.gpus * int(counts[self.healthy[nodes]].sum())

    def set_health(self, node: int, healthy: bool) -> None:
        """Mark a node up or down; a down node's free GPUs are out of reach until it is up again."""
        if bool(self.healthy[node]) == healthy:
            return
        self.healthy[node] = healthy
        self.free_gpus_total += int(self.free_gpus[node]) * (1 if healthy else -1)

    def txn(self) -> Txn:
        return Txn(self)


class Txn:
    """Tentative allocations and releases on a ClusterState, applied at once and undone by `discard`.

    Use as a context manager: leaving the block without `commit()` discards, so a gang is never left half-placed."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self._log: list[tuple[int, Allocation]] = []
        self._open = True

    def allocate(self, alloc: Allocation) -> None:
        self._check_open()
        self._state.allocate(alloc)
        self._log.append((-1, alloc))

    def release(self, alloc: Allocation) -> None:
        self._check_open()
        self._state.release(alloc)
        self._log.append((+1, alloc))

    def commit(self) -> None:
        self._check_open()
        self._open = False
        self._log.clear()

    def discard(self) -> None:
        if not self._open:
            return
        for sign, alloc in reversed(self._log):
            self._state._apply(alloc, -sign)
        self._log.clear()
        self._open = False

    def _check_open(self) -> None:
        if not self._open:
            raise RuntimeError("transaction already committed or discarded")

    def __enter__(self) -> Txn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()
