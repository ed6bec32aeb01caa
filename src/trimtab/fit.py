"""Fit counts kept between changes (`ClusterState.fit_counts`): how many tasks of a request each node takes now, per
request, recounted only on the nodes changed since the last answer, which the ChangeLog names.

A cycle asks the fit of the same few requests again and again while each placement changes one or two nodes; a full
count reads every node's CPU, memory and GPUs (three integer divisions over the cluster, or the per-GPU share
matrix), so at thousands of nodes recounting the changed nodes on Python scalars is the cheaper answer."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from trimtab.mig import slice_starts

if TYPE_CHECKING:
    from trimtab.cluster import ClusterState
    from trimtab.model import Resources

BIG = np.iinfo(np.int64).max  # the fit of a request that asks for nothing
GPU_MILLI = 1000  # thousandths of one GPU: a whole GPU
_REQUESTS_KEPT = 64  # requests whose fit is kept: memory stays bounded on any trace (openb: 151, 64 cover 97%)
_SHARE_SIZES_KEPT = 64  # share sizes whose per-node fit is kept (`_share_fit`)
_LOG_MAX = 1 << 16  # changed nodes remembered: a reader further behind counts everything again
_FEW = 64  # changed nodes up to which a kept fit is recounted node by node


class ChangeLog:
    """The nodes whose free resources, holds or health changed, in order of change. A reader keeps `end` from its
    last look and asks `since(end)` next time: the nodes changed in between (repeats possible), or None when the log
    no longer reaches back that far (the reader then reads every node). ClusterState and Txn are the writers."""

    def __init__(self) -> None:
        self.nodes: list[int] = []
        self.base = 0  # entries dropped from the front

    @property
    def end(self) -> int:
        return self.base + len(self.nodes)

    def add(self, nodes: list[int]) -> None:
        self.nodes.extend(nodes)
        if len(self.nodes) > _LOG_MAX:
            self.base += len(self.nodes)
            self.nodes = []

    def since(self, end: int) -> list[int] | None:
        return None if end < self.base else self.nodes[end - self.base:]


class FitBook:
    """The fit counts of the requests asked for lately (`counts`), each with the log position it is current at."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self.log = ChangeLog()
        self._kept: dict[tuple[int, int, int, int, str], tuple[np.ndarray, list[int]]] = {}
        self._share_fits: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # see `_share_fit`

    def counts(self, task: Resources) -> np.ndarray:
        """How many tasks of `task` each node takes now (see ClusterState.fit_counts); the caller owns the copy."""
        key = (task.cpu_milli, task.mem_mib, task.gpus, task.gpu_milli, task.mig)
        kept, end = self._kept.get(key), self.log.end
        if kept is None:
            if len(self._kept) >= _REQUESTS_KEPT:
                del self._kept[next(iter(self._kept))]  # the request kept longest
            kept = self._kept[key] = (self._count(task), [end])
        elif kept[1][0] != end:
            changed = self.log.since(kept[1][0])
            if changed is None or len(changed) > _FEW:
                kept[0][:] = self._count(task)
            else:
                self._recount(kept[0], set(changed), task)
            kept[1][0] = end
        return kept[0].copy()

    def _count(self, task: Resources) -> np.ndarray:
        """Every node's fit, on arrays."""
        state = self._state
        bounds = [free // need for need, free in ((task.cpu_milli, state.free_cpu_milli),
                                                  (task.mem_mib, state.free_mem_mib)) if need]
        if task.gpus:
            bounds.append(state.free_gpus // task.gpus)
        elif task.gpu_milli:
            bounds.append(self._share_fit(task.gpu_milli))
        elif task.mig:
            bounds.append(self._mig_fit(task.mig))
        if len(bounds) > 1:
            counts = np.minimum(bounds[0], bounds[1])
            for bound in bounds[2:]:
                np.minimum(counts, bound, out=counts)
        else:  # copied: the share bound is kept
            counts = bounds[0].copy() if bounds else np.full(len(state), BIG, dtype=np.int64)
        counts[~state.healthy] = 0
        return counts

    def _recount(self, counts: np.ndarray, nodes: set[int], task: Resources) -> None:
        """`_count` on the given nodes only, on Python scalars; the same integers."""
        state = self._state
        cpu, mem, gpus, milli = task.cpu_milli, task.mem_mib, task.gpus, task.gpu_milli
        for node in nodes:
            fit = BIG
            if cpu:
                fit = state.free_cpu_milli.item(node) // cpu
            if mem:
                fit = min(fit, state.free_mem_mib.item(node) // mem)
            if gpus:
                fit = min(fit, state.free_gpus.item(node) // gpus)
            elif milli:
                fit = min(fit, sum(free // milli for free in state.gpu_free_milli[node].tolist()))
            elif task.mig:
                fit = min(fit, self._mig_node(node, task.mig))
            counts[node] = fit if state.healthy.item(node) else 0

    def _share_fit(self, milli: int) -> np.ndarray:
        """Per node, how many shares of `milli` its GPUs take (the sum over GPUs of free // milli): kept per share
        size with the node versions it was counted at, and recounted only on the nodes changed since (the share
        matrix is the widest array a fit reads; a request not kept may still share its size). Read-only for the
        caller."""
        state = self._state
        kept = self._share_fits.get(milli)
        if kept is None:
            if len(self._share_fits) >= _SHARE_SIZES_KEPT:
                del self._share_fits[next(iter(self._share_fits))]  # the size kept longest
            kept = self._share_fits[milli] = ((state.gpu_free_milli // milli).sum(axis=1), state.version.copy())
            return kept[0]
        fits, versions = kept
        stale = np.flatnonzero(versions != state.version)
        if stale.size:
            fits[stale] = (state.gpu_free_milli[stale] // milli).sum(axis=1)
            versions[stale] = state.version[stale]
        return fits

    def _mig_fit(self, profile_name: str) -> np.ndarray:
        fit = np.zeros(len(self._state), dtype=np.int64)
        for node in np.flatnonzero(self._state.mig_capable).tolist():
            fit[node] = self._mig_node(node, profile_name)
        return fit

    def _mig_node(self, node: int, profile_name: str) -> int:
        """Slices of `profile_name` that fit on `node` without overlap (0 on a node without MIG or the profile)."""
        state = self._state
        geometry = state.mig_geometry[node]
        profile = geometry.get(profile_name) if geometry else None
        if profile is None:
            return 0
        return sum(len(slice_starts(int(state.mig_busy[node, gpu]), bool(state.gpu_free_milli[node, gpu] != GPU_MILLI),
                                    state.mig_carved.get((node, gpu), {}), geometry, profile, many=True))
                   for gpu in range(int(state.cap_gpus[node])))
