"""Plugins against a changing world: history, drain, topology, locality, prefetch, heterogeneity, score-pack.

They read `Signals`, what the world observed about its nodes (failures, speeds, cached data, GPU speeds); a
world that observes nothing leaves every score neutral."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from trimtab.cluster import Allocation, ClusterState
from trimtab.model import Job
from trimtab.plugins.place import Pack
from trimtab.policy import CycleContext, Decision, Plugin
from trimtab.profile import PluginFactory


@dataclass
class Signals:
    """What the world tells dynamics plugins about its nodes. The world writes; plugins only read, except that
    `prefetch` plugins append to `prefetch_requests`, which the world drains after each cycle.

    failures: an exponentially decayed count of each node's failures (time constant `failure_tau_s`), so a
    failure a `failure_tau_s` ago counts 1/e. speeds: per job type, the last observed speed (reference seconds per
    wall second) on each node, NaN where never seen. cached: dataset -> bool mask over nodes (None: no data model).
    gpu_speeds: relative speed of a job on each GPU model of the cluster, in `ClusterState.gpu_models` order
    (None: no throughput table)."""

    failure_tau_s: float = 7 * 86400.0
    cached: Callable[[str], np.ndarray] | None = None
    gpu_speeds: Callable[[Job], np.ndarray] | None = None
    prefetch_requests: list[tuple[Job, np.ndarray]] = field(default_factory=list)
    _decayed: np.ndarray = field(default_factory=lambda: np.zeros(0))
    _since_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    speeds: dict[str, np.ndarray] = field(default_factory=dict)
    failures_seen: int = 0

    def size(self, nodes: int) -> None:
        if self._decayed.size != nodes:
            self._decayed = np.zeros(nodes)
            self._since_s = np.zeros(nodes)

    def node_failed(self, node: int, now_s: float) -> None:
        self._decayed[node] = self._decayed[node] * math.exp(-(now_s - self._since_s[node]) / self.failure_tau_s) + 1
        self._since_s[node] = now_s
        self.failures_seen += 1

    def recent_failures(self, now_s: float, nodes: int) -> np.ndarray:
        """Decayed failure count of every node at `now_s`."""
        self.size(nodes)
        return self._decayed * np.exp(-(now_s - self._since_s) / self.failure_tau_s)

    def observed_speed(self, job_type: str, nodes: np.ndarray, speed: float, total_nodes: int) -> None:
        row = self.speeds.get(job_type)
        if row is None:
            row = self.speeds[job_type] = np.full(total_nodes, np.nan)
        row[nodes] = speed


def _signals(given: Signals | None) -> Signals:
    return given if given is not None else Signals()


class History(Plugin):
    """Score: prefers nodes with a clean recent record and, per job type, nodes where that type ran fast before.
    score = 100 x (w x exp(-f / max(mean f, 1)) + (1 - w) x observed speed / best observed speed), where f is a
    node's decayed failure count (compared with the cluster's mean, so a storm everywhere does not mask the bad
    nodes) and w = `record_weight`
    (nodes never seen with this job type count as the mean of those seen; with none seen, only the record)."""

    def __init__(self, record_weight: float = 0.7, signals: Signals | None = None) -> None:
        if not 0 <= record_weight <= 1:
            raise ValueError("history record_weight must be in [0, 1]")
        self.record_weight = float(record_weight)
        self.signals = _signals(signals)

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        n = len(ctx.cluster)
        recent = self.signals.recent_failures(ctx.now_s, n)
        clean = np.exp(-recent / max(float(recent.mean()), 1.0))
        row = self.signals.speeds.get(job.job_type)
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
    `threshold` 1.5 and the signals' time constant tau, a second failure within 0.7 tau can drain a node."""

    def __init__(self, threshold: float = 1.5, ratio: float = 3.0, max_share: float = 0.1,
                 signals: Signals | None = None) -> None:
        if threshold <= 0 or ratio < 1 or not 0 <= max_share <= 1:
            raise ValueError("drain: threshold must be > 0, ratio >= 1, max_share in [0, 1]")
        self.threshold = float(threshold)
        self.ratio = float(ratio)
        self.max_share = float(max_share)
        self.signals = _signals(signals)
        self._mask: tuple[float, int, np.ndarray] | None = None

    def filter(self, job: Job, ctx: CycleContext) -> np.ndarray:
        return ~self.drain_mask(ctx)

    def drain_mask(self, ctx: CycleContext) -> np.ndarray:
        """Nodes to drain now (True). The Scheduler takes them out of service for new work before each cycle, so
        the free-GPU counts that preemption relies on leave them out; `filter` says the same for safety."""
        if self._mask is not None and self._mask[:2] == (ctx.now_s, self.signals.failures_seen):
            return self._mask[2]
        n = len(ctx.cluster)
        recent = self.signals.recent_failures(ctx.now_s, n)
        drained = (recent >= self.threshold) & (recent >= self.ratio * recent.mean())
        limit = math.ceil(self.max_share * n)
        if drained.sum() > limit:
            worst = np.argsort(-np.where(drained, recent, -1.0), kind="stable")[:limit]
            drained[:] = False
            drained[worst] = True
        self._mask = (ctx.now_s, self.signals.failures_seen, drained)
        return drained


def _rack_fit(cluster: ClusterState, fit: np.ndarray, tasks: int) -> np.ndarray:
    return np.bincount(cluster.rack_idx, weights=np.minimum(fit, tasks), minlength=len(cluster.racks))


class Topology(Plugin):
    """Packs a gang at the tightest level that is free: one node, else one rack, else the fewest racks.

    As a scorer: a node scores by how well its rack fits the gang (racks that hold it whole score 50..100, the
    tightest fit highest; others by the share they hold, below 50). As a place plugin: one node if one holds the
    gang (best fit, as `pack`); else the rack that holds it whole on the fewest nodes, then with the fewest tasks
    to spare; else the fewest racks, fullest first; `pack` then chooses nodes inside them."""

    def __init__(self) -> None:
        self._pack = Pack()

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        cluster = ctx.cluster
        rack = _rack_fit(cluster, cluster.fit_counts(job.task), job.tasks)
        spare = rack - job.tasks
        whole = spare >= 0
        scale = max(float(rack.max()), 1.0)
        rack_score = np.where(whole, 100.0 - 50.0 * spare / scale, 50.0 * rack / max(job.tasks, 1))
        return rack_score[cluster.rack_idx]

    def place(self, job: Job, ctx: CycleContext, fit: np.ndarray, score: np.ndarray) -> Allocation | None:
        tasks = job.tasks
        if int(np.minimum(fit, tasks).max(initial=0)) >= tasks:
            return self._pack.place(job, ctx, fit, score)
        cluster = ctx.cluster
        rack = _rack_fit(cluster, fit, tasks)
        whole = np.flatnonzero(rack >= tasks)
        if whole.size:  # racks are few: a loop over them, not over nodes
            capped = np.minimum(fit, tasks)
            best = min((int(np.searchsorted(np.cumsum(-np.sort(-capped[cluster.rack_idx == r])), tasks)),
                        int(rack[r]), int(r)) for r in whole)
            chosen = np.array([best[2]])
        else:
            order = np.lexsort((np.arange(rack.size), -rack))
            k = int(np.searchsorted(np.cumsum(rack[order]), tasks)) + 1
            chosen = order[:k]
        return self._pack.place(job, ctx, np.where(np.isin(cluster.rack_idx, chosen), fit, 0), score)


class Prefetch(Plugin):
    """At the end of a cycle, asks the world to load the datasets of the first `jobs` waiting jobs onto the nodes
    they are likely to get, counting GPUs free now or freed within `horizon_s` (running jobs' remaining reference
    time): the node that will hold the whole gang with the least to spare (where `pack` puts it), else the nodes
    that will hold most of it; nodes that already hold the dataset are skipped."""

    def __init__(self, jobs: int = 4, horizon_s: float = 1800.0, signals: Signals | None = None) -> None:
        self.jobs = int(jobs)
        self.horizon_s = float(horizon_s)
        self.signals = _signals(signals)
        self._asked: set[str] = set()

    def close(self, ctx: CycleContext, decision: Decision) -> float | None:
        cached = self.signals.cached
        if cached is None or not decision.waiting or self.jobs <= 0:
            return None
        cluster = ctx.cluster
        soon: np.ndarray | None = None
        asked = 0
        for job in ctx.pending:  # queue order
            if asked >= self.jobs:
                break
            if job.id not in decision.waiting or job.id in self._asked or not job.dataset or not job.task.gpus:
                continue
            if soon is None:
                soon = cluster.free_gpus.astype(float).copy()
                for run in ctx.running.values():
                    if ctx.remaining_s(run.job) <= self.horizon_s:
                        soon[run.alloc.nodes] += run.alloc.counts * run.alloc.task.gpus
                soon[~cluster.healthy] = -1.0
            per_node = np.maximum(np.minimum(soon // job.task.gpus, job.tasks), 0)
            # nodes that will hold the whole gang, tightest first (where `pack` will put it), then the largest
            whole = per_node >= job.tasks
            order = np.lexsort((np.arange(len(cluster)), np.where(whole, soon, np.inf), -per_node))
            need = int(np.searchsorted(np.cumsum(per_node[order]), job.tasks)) + 1
            targets = order[:need]
            targets = targets[(per_node[targets] > 0) & ~cached(job.dataset)[targets]]
            self._asked.add(job.id)
            asked += 1
            if targets.size:
                self.signals.prefetch_requests.append((job, targets))
        return None


class Locality(Prefetch):
    """Score: 100 on nodes whose cache holds the job's dataset (or is loading it), 0 elsewhere. It also prefetches
    as `prefetch` does for the first `jobs` waiting jobs (0: no prefetching)."""

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        if self.signals.cached is None or not job.dataset:
            return np.zeros(len(ctx.cluster))
        return 100.0 * self.signals.cached(job.dataset)


class Heterogeneity(Plugin):
    """Score: places a job where its speed-up is largest (Gavel's idea as a placement score). With s_m the job's
    speed on GPU model m and c_m the mean speed on m of the job types running or waiting, a node of model m scores
    100 x (w x s_m / max s + (1 - w) x (s_m / c_m) / max(s / c)): its own speed, and its comparative advantage
    there (jobs that gain little from fast GPUs leave them to jobs that gain much). The default `speed_weight` 0
    ranks by comparative advantage alone (measured best on Gavel's 96-job trace; docs/strategies.md)."""

    def __init__(self, speed_weight: float = 0.0, signals: Signals | None = None) -> None:
        self.speed_weight = float(speed_weight)
        self.signals = _signals(signals)
        self._mean: np.ndarray | None = None

    def open(self, ctx: CycleContext) -> None:
        self._mean = None

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        speeds_of = self.signals.gpu_speeds
        if speeds_of is None:
            return np.zeros(len(ctx.cluster))
        if self._mean is None:
            seen: dict[tuple[str, int], np.ndarray] = {}
            for other in [r.job for r in ctx.running.values()] + list(ctx.pending[:200]):
                key = (other.job_type, other.tasks)
                if key not in seen:
                    seen[key] = speeds_of(other)
            self._mean = np.mean(list(seen.values()), axis=0) if seen else np.ones(len(ctx.cluster.gpu_models))
        s = speeds_of(job)
        rel = s / self._mean
        w = self.speed_weight
        by_model = 100.0 * (w * s / s.max() + (1.0 - w) * rel / rel.max())
        return by_model[ctx.cluster.model_idx]


class ScorePack(Plugin):
    """Place: the highest-scored nodes that hold the gang, packed. If single nodes hold the whole gang, only those
    scoring within `tolerance` of the best of them are kept (a gang is never spread to follow a score); else the
    lowest score threshold at which the nodes scoring >= threshold - `tolerance` hold the gang is taken. `pack`
    then places among the nodes kept (so the score decides where and packing decides how, unlike `pack` alone,
    where the score only breaks ties). With `pack_slack_gpus` set, single nodes are first limited to those with at
    most that many free GPUs more than the best-fitting one (packing first, the score inside that slack)."""

    def __init__(self, tolerance: float = 10.0, pack_slack_gpus: int | None = None) -> None:
        self.tolerance = float(tolerance)
        self.pack_slack_gpus = pack_slack_gpus
        self._pack = Pack()

    def place(self, job: Job, ctx: CycleContext, fit: np.ndarray, score: np.ndarray) -> Allocation | None:
        whole = fit >= job.tasks
        if whole.any() and self.pack_slack_gpus is not None:
            free = ctx.cluster.free_gpus
            whole &= free <= free[whole].min() + self.pack_slack_gpus
        if whole.any():
            best = score[whole].max()
            return self._pack.place(job, ctx, np.where(whole & (score >= best - self.tolerance), fit, 0), score)
        cand = np.flatnonzero(fit > 0)
        if cand.size == 0:
            return None
        order = cand[np.argsort(-score[cand], kind="stable")]
        csum = np.cumsum(np.minimum(fit[order], job.tasks))
        k = int(np.searchsorted(csum, job.tasks))
        if k >= order.size:
            return None
        threshold = score[order[k]] - self.tolerance
        return self._pack.place(job, ctx, np.where(score >= threshold, fit, 0), score)


def plugins(signals: Signals | None = None) -> dict[str, PluginFactory]:
    """The factories of this module, bound to `signals` (a world passes its own; None: neutral)."""

    def bind(cls: type[Plugin]) -> PluginFactory:
        def factory(**kwargs: object) -> Plugin:
            return cls(signals=signals, **kwargs)  # type: ignore[call-arg]
        return factory

    return {
        "history": bind(History), "drain": bind(Drain), "locality": bind(Locality), "prefetch": bind(Prefetch),
        "heterogeneity": bind(Heterogeneity), "topology": Topology, "score-pack": ScorePack,
    }


PLUGINS = plugins()
