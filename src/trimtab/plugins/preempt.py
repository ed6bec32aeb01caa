"""Preempt plugins: which running jobs to stop so that a waiting job can start.

lower-order (victims ordered after the job in the queue order: LAS, SRTF) and lower-priority."""

from __future__ import annotations

from trimtab.framework import CycleContext, Plugin
from trimtab.model import Job


def _fewest_victims(job: Job, ctx: CycleContext, candidates: list[str]) -> list[str] | None:
    """From candidates ranked worst first, take victims until the job's GPUs are free, then give back any victim
    (best ranked first) that turns out not to be needed. Returns None when even all candidates are not enough."""
    need = job.gpus - ctx.cluster.free_gpus_total
    chosen: list[str] = []
    freed = 0
    for jid in candidates:
        if freed >= need:
            break
        chosen.append(jid)
        freed += ctx.running[jid].alloc.gpus
    if freed < need:
        return None
    for jid in list(reversed(chosen)):
        gpus = ctx.running[jid].alloc.gpus
        if freed - gpus >= need:
            chosen.remove(jid)
            freed -= gpus
    return chosen


class LowerOrder(Plugin):
    """Victims are running jobs ordered strictly after the job by the first `key_depth` parts of the profile's
    order key (worst first). With `[las, fifo]` and depth 1, a job preempts only jobs in a lower LAS queue, never
    one of its own queue (as in Tiresias). A job that started less than `min_runtime_s` ago is spared, so a job is
    not stopped before it got anything done."""

    def __init__(self, min_runtime_s: float = 0.0, key_depth: int = 1) -> None:
        if key_depth < 1:
            raise ValueError("key_depth must be >= 1")
        self.min_runtime_s = float(min_runtime_s)
        self.key_depth = key_depth
        self._worst: tuple[object, ...] | None = None

    def open(self, ctx: CycleContext) -> None:
        self._worst = None  # the worst running key prefix, computed on the first call of the cycle

    def preempt(self, job: Job, ctx: CycleContext) -> list[str] | None:
        depth = self.key_depth
        key = ctx.order_key(job)[:depth]
        if self._worst is None:
            self._worst = max((k[:depth] for k in ctx.running_keys.values()), default=())
        if not key < self._worst:
            return None
        ranked = sorted(
            (k, ctx.running[jid].start_s, jid)
            for jid, k in ctx.running_keys.items()
            if k[:depth] > key and ctx.now_s - ctx.running[jid].start_s >= self.min_runtime_s
        )
        return _fewest_victims(job, ctx, [jid for _, _, jid in reversed(ranked)])


class LowerPriority(Plugin):
    """Victims are running jobs of strictly lower priority, lowest first, then most recently started first."""

    def __init__(self, min_runtime_s: float = 0.0) -> None:
        self.min_runtime_s = float(min_runtime_s)

    def preempt(self, job: Job, ctx: CycleContext) -> list[str] | None:
        ranked = sorted(
            (run.job.priority, -run.start_s, jid)
            for jid, run in ctx.running.items()
            if run.job.priority < job.priority and ctx.now_s - run.start_s >= self.min_runtime_s
        )
        return _fewest_victims(job, ctx, [jid for _, _, jid in ranked])


PLUGINS = {"lower-order": LowerOrder, "lower-priority": LowerPriority}
