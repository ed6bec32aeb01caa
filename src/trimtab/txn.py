"""Txn: tentative changes to a ClusterState (allocations, releases, holds of idle GPUs), kept or undone at once."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from trimtab.cluster import Allocation, ClusterState


class Txn:
    """Tentative changes to a ClusterState, applied at once and undone by `discard`: allocations and releases (kept
    by `commit`), and holds of idle GPUs (which end with the transaction, committed or not).

    Use as a context manager: leaving the block without `commit()` discards, so a gang is never left half-placed."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self._log: list[tuple[int, Allocation]] = []
        self._held: list[np.ndarray] = []
        self._open = True

    def allocate(self, alloc: Allocation) -> None:
        self._check_open()
        self._state.allocate(alloc)
        self._log.append((-1, alloc))

    def release(self, alloc: Allocation) -> None:
        self._check_open()
        self._state.release(alloc)
        self._log.append((+1, alloc))

    def hold_gpus(self, gpus: np.ndarray) -> None:
        """Keep `gpus[i]` idle GPUs of node i (reserved for other jobs) out of reach of `fit_counts` until the end:
        only `free_gpus` changes (no GPU is chosen; shares, the free total, versions stay; the held nodes are logged
        as changed for the kept fits). `gpus` must not change."""
        self._check_open()
        self._state.free_gpus -= gpus
        self._state.fits.log.add(gpus.nonzero()[0].tolist())
        self._held.append(gpus)

    def commit(self) -> None:
        self._check_open()
        self._log.clear()  # the changes stay
        self._end()

    def discard(self) -> None:
        if not self._open:
            return
        for sign, alloc in reversed(self._log):
            (self._state.release if sign < 0 else self._state.allocate)(alloc)  # undo: the opposite change
        self._log.clear()
        self._end()

    def _end(self) -> None:
        for gpus in self._held:  # holds end with the transaction, committed or not
            self._state.free_gpus += gpus
            self._state.fits.log.add(gpus.nonzero()[0].tolist())
        self._held.clear()
        self._open = False

    def _check_open(self) -> None:
        if not self._open:
            raise RuntimeError("transaction already committed or discarded")

    def __enter__(self) -> Txn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()
