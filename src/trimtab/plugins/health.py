"""Plugins that keep work off unreliable nodes: history (a score from nodes' failure record and observed speeds)
and drain (no new work on nodes that fail far more often than the others). Both read `ctx.observations`."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from trimtab.model import Job
from trimtab.policy import CycleContext, Plugin


class History(Plugin):
    """Score: prefers nodes with a clean recent record and, per job type, nodes where that type ran fast before.
    score = 100 x (w x exp(-f / max(mean f, 1)) + (1 - w) x observed speed / best observed speed), where f is a
    node's decayed failure count (compared with the cluster's mean, so a storm everywhere does not mask the bad
    nodes) and w = `record_weight`
    (nodes never seen with this job type count as the mean of those seen; with none seen, only the record)."""

    def __init__(self, record_weight: float = 0.7) -> None:
        if not 0 <= record_weight <= 1:
            raise ValueError("history record_weight must be in [0, 1]")
        self.record_weight = float(record_weight)

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        n = len(ctx.cluster)
        observed = ctx.observations
        recent = observed.recent_failures(ctx.now_s, n)
        clean = np.exp(-recent / max(float(recent.mean()), 1.0))
        row = observed.speeds.get(job.job_type)
        if row is None or np.isnan(row).all():
            return 100.0 * clean
        best = np.nanmax(row)
        speed = np.where(np.isnan(row), np.nanmean(row), row) / best
        w = self.record_weight
        return 100.0 * (w * clean + (1.0 - w) * speed)


class Drain(Plugin):
    """Filter (and drain): keeps new work off nodes that fail far more often than the others (they are drained:
    running jobs finish, nothing new starts) until their record decays. A node is drained when its decayed failure
    count is at least `threshold` and at least `ratio` times the cluster's mean; at most `max_share` of the nodes,
    the worst records first, are drained at once (so a cluster-wide storm never drains the cluster). With
    `threshold` 1.5 and the observations' time constant tau, a second failure within 0.7 tau can drain a node."""

    filter_reason: ClassVar[str] = "are drained (too many recent failures)"

    def __init__(self, threshold: float = 1.5, ratio: float = 3.0, max_share: float = 0.1) -> None:
        if threshold <= 0 or ratio < 1 or not 0 <= max_share <= 1:
            raise ValueError("drain: threshold must be > 0, ratio >= 1, max_share in [0, 1]")
        self.threshold = float(threshold)
        self.ratio = float(ratio)
        self.max_share = float(max_share)
        self._mask: tuple[float, int, np.ndarray] | None = None

    def filter(self, job: Job, ctx: CycleContext) -> np.ndarray:
        return ~self.drain(ctx)

    def drain(self, ctx: CycleContext) -> np.ndarray:
        """Nodes to drain now (True). The Scheduler takes them out of service for new work before each cycle, so
        the free-GPU counts that preemption relies on leave them out; `filter` says the same for safety."""
        observed = ctx.observations
        if self._mask is not None and self._mask[:2] == (ctx.now_s, observed.failures_seen):
            return self._mask[2]
        n = len(ctx.cluster)
        recent = observed.recent_failures(ctx.now_s, n)
        drained = (recent >= self.threshold) & (recent >= self.ratio * recent.mean())
        limit = math.ceil(self.max_share * n)
        if drained.sum() > limit:
            worst = np.argsort(-np.where(drained, recent, -1.0), kind="stable")[:limit]
            drained[:] = False
            drained[worst] = True
        self._mask = (ctx.now_s, observed.failures_seen, drained)
        return drained


PLUGINS = {"history": History, "drain": Drain}
