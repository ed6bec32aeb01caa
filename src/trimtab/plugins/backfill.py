"""Backfill plugins: what a job that cannot start holds back from the jobs after it.

strict: nothing after a blocked job may start (head-of-line FIFO, as in Tiresias's simulator).
reserve: a blocked large (or long-waiting) job reserves GPUs at its earliest possible start; EASY backfill."""

from __future__ import annotations

import math

import numpy as np

from trimtab.model import Job
from trimtab.policy import CycleContext, Decision, Plugin, Reservation


class Strict(Plugin):
    """The first job that cannot start blocks every job ordered after it."""

    def backfill(self, job: Job, ctx: CycleContext) -> Reservation | None:
        return Reservation(job.id, None, None, ctx.now_s)


class Reserve(Plugin):
    """EASY backfill. The first blocked job (in queue order) asking for at least `min_gpus` GPUs, or one that has
    waited `max_wait_s` (aging: nothing waits forever), gets a reservation at its earliest possible start, computed
    from the running jobs' expected ends (start + reference time left). It holds the GPUs that are free now on the
    nodes it will use; the framework keeps them from later jobs, except jobs expected to end before the
    reservation starts, which cannot delay it. One reservation at a time.

    `gang_timeout_s`: a gang that has held a reservation this long without starting lets it go for as long again
    (others run meanwhile), then may reserve anew; the cycle is woken when either turn comes. Jobs of unknown
    duration never make a reservation computable, so then none is made."""

    def __init__(self, min_gpus: int = 8, max_wait_s: float | None = 6 * 3600.0,
                 gang_timeout_s: float | None = None) -> None:
        self.min_gpus = int(min_gpus)
        self.max_wait_s = max_wait_s
        self.gang_timeout_s = gang_timeout_s
        self._since: dict[str, float] = {}  # job -> when it first held its current reservation
        self._made = False
        self._turn_s = math.inf  # when the earliest gang seen this cycle lets its reservation go or may take one

    def open(self, ctx: CycleContext) -> None:
        self._made, self._turn_s = False, math.inf

    def close(self, ctx: CycleContext, decision: Decision) -> float | None:
        return self._turn_s if math.isfinite(self._turn_s) else None

    def backfill(self, job: Job, ctx: CycleContext) -> Reservation | None:
        if self._made:
            return None
        aged = self.max_wait_s is not None and ctx.now_s - job.submit_s >= self.max_wait_s
        if job.gpus < self.min_gpus and not aged:
            return None
        if self.gang_timeout_s is not None:
            since = self._since.setdefault(job.id, ctx.now_s)
            held = ctx.now_s - since
            if held >= 2 * self.gang_timeout_s:
                self._since[job.id] = since = ctx.now_s
                held = 0.0
            if held >= self.gang_timeout_s:
                self._turn_s = min(self._turn_s, since + 2 * self.gang_timeout_s)
                return None  # timed out: released for a while
            self._turn_s = min(self._turn_s, since + self.gang_timeout_s)
        plan = self._earliest(job, ctx)
        if plan is None:
            return None
        start_s, nodes, gpus = plan
        self._made = True
        return Reservation(job.id, nodes, gpus, start_s)

    def _earliest(self, job: Job, ctx: CycleContext) -> tuple[float, np.ndarray, np.ndarray] | None:
        cl = ctx.cluster
        per_task = max(job.task.gpus, 1)
        allowed = cl.healthy if ctx.node_mask is None else cl.healthy & ctx.node_mask(job)
        free_now = np.where(allowed, cl.free_gpus, 0)
        free = free_now.copy()
        ends = sorted((ctx.now_s + ctx.remaining_s(run.job), jid) for jid, run in ctx.running.items())
        start_s = ctx.now_s
        for end_s, jid in [(ctx.now_s, ""), *ends]:
            if jid:
                run = ctx.running[jid]
                free[run.alloc.nodes] += run.alloc.counts * run.alloc.task.gpus
                free[~allowed] = 0
                start_s = end_s
            if int((free // per_task).sum()) >= job.tasks:
                break
        else:
            return None
        if not math.isfinite(start_s):
            return None
        order = np.argsort(-(free // per_task), kind="stable")
        need = job.tasks
        use = np.zeros(len(cl), dtype=np.int64)
        for i in order:
            if need <= 0:
                break
            take = min(int(free[i] // per_task), need)
            use[i] = take * per_task
            need -= take
        nodes = np.flatnonzero(use > 0)
        held = np.minimum(use[nodes], free_now[nodes])
        return start_s, nodes, held


PLUGINS = {"strict": Strict, "reserve": Reserve}
