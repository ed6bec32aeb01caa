"""Plugins that place work where it runs best: topology (gangs packed at the tightest level), locality and
prefetch (near cached datasets), heterogeneity (GPU models by speed-up) and score-pack (the score decides where).

Locality, prefetch and heterogeneity read `ctx.observations` (cached datasets, GPU speeds); without them they are
neutral."""

from __future__ import annotations

import numpy as np

from trimtab.cluster import Allocation, ClusterState
from trimtab.model import Job
from trimtab.plugins.place import Pack
from trimtab.policy import CycleContext, Decision, Plugin


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
    """At the end of a cycle, asks the world (`Decision.prefetches`) to load the datasets of the first `jobs`
    waiting jobs onto the nodes they are likely to get, counting GPUs free now or freed within `horizon_s` (running
    jobs' remaining reference time): the node that will hold the whole gang with the least to spare (where `pack`
    puts it), else the nodes that will hold most of it; nodes that already hold the dataset are skipped."""

    def __init__(self, jobs: int = 4, horizon_s: float = 1800.0) -> None:
        self.jobs = int(jobs)
        self.horizon_s = float(horizon_s)
        self._asked: set[str] = set()

    def close(self, ctx: CycleContext, decision: Decision) -> float | None:
        cached = ctx.observations.cached
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
                decision.prefetches.append((job, targets))
        return None


class Locality(Prefetch):
    """Score: 100 on nodes whose cache holds the job's dataset (or is loading it), 0 elsewhere. It also prefetches
    as `prefetch` does for the first `jobs` waiting jobs (0: no prefetching)."""

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        cached = ctx.observations.cached
        if cached is None or not job.dataset:
            return np.zeros(len(ctx.cluster))
        return 100.0 * cached(job.dataset)


class Heterogeneity(Plugin):
    """Score: places a job where its speed-up is largest (Gavel's idea as a placement score). With s_m the job's
    speed on GPU model m and c_m the mean speed on m of the job types running or waiting, a node of model m scores
    100 x (w x s_m / max s + (1 - w) x (s_m / c_m) / max(s / c)): its own speed, and its comparative advantage
    there (jobs that gain little from fast GPUs leave them to jobs that gain much). The default `speed_weight` 0
    ranks by comparative advantage alone (measured best on Gavel's 96-job trace; docs/strategies.md)."""

    def __init__(self, speed_weight: float = 0.0) -> None:
        self.speed_weight = float(speed_weight)
        self._mean: np.ndarray | None = None

    def open(self, ctx: CycleContext) -> None:
        self._mean = None

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        speeds_of = ctx.observations.gpu_speeds
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


PLUGINS = {"topology": Topology, "locality": Locality, "prefetch": Prefetch, "heterogeneity": Heterogeneity,
           "score-pack": ScorePack}
