"""The advise loop: diagnose where a run's GPU-hours go (losses.py), build candidate profiles from the strategies
that answer its largest causes, run them on the same inputs over several seeds, keep the best on one part of the
workload and check it on the held-out part (as tune does), and say what was done and what it gave."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from trimtab.losses import CAUSES, NOT_THE_SCHEDULERS, gpu_losses
from trimtab.model import Job, Node, Resources
from trimtab.profile import PluginRef, Profile
from trimtab.profile import _split_ref as split_ref
from trimtab.series import window_edges
from trimtab.sim.parallel import parallel_map
from trimtab.sim.run import SimConfig, simulate
from trimtab.sim.tune import objective, split

SCHEDULER_CAUSES = tuple(c for c in CAUSES if c not in NOT_THE_SCHEDULERS)
LOST = "lost_gpu_hours_scheduler"  # the GPU-hours lost to every cause the scheduler controls (load excluded)
GAIN_METRICS = (LOST, "avg_jct_s", "p99_jct_s", "gpu_util", "goodput_cv_backlogged")
OBJECTIVE = (LOST, "avg_jct_s")  # how candidates are judged: lost GPU-hours and JCT, equally (tune.objective)


@dataclass(frozen=True, slots=True)
class Strategy:
    """One answer to a cause: `compose` turns the current profile into the candidate (None: it does not apply);
    `needs`: what the workload must have for it to change anything ("priorities": jobs of different priorities,
    "tenants": several tenants; "" nothing)."""

    name: str
    cause: str
    what: str
    compose: Callable[[Profile], Profile | None]
    needs: str = ""


def _refs(refs: Sequence[PluginRef], drop: set[str]) -> list[PluginRef]:
    return [ref for ref in refs if split_ref(ref)[0] not in drop]


# scorers that choose among nodes by load or packing alone: a fragmentation-aware placer replaces them
_NODE_CHOOSERS = frozenset({"random", "round-robin", "weighted-round-robin", "least-connections", "least-load",
                            "best-fit", "dot-product", "gpu-clustering", "gpu-packing"})


def _place(name: str, scorer: str, replaces_choosers: bool = False) -> Callable[[Profile], Profile | None]:
    def compose(p: Profile) -> Profile | None:
        if split_ref(p.place)[0] == name and scorer in p.score:
            return None
        kept = {k: w for k, w in p.score.items() if not (replaces_choosers and k in _NODE_CHOOSERS)}
        return p.model_copy(update={"place": name, "score": kept}).with_score(scorer, 1.0)
    return compose


def _backfill(refs: list[PluginRef]) -> Callable[[Profile], Profile | None]:
    def compose(p: Profile) -> Profile | None:
        return None if p.backfill == refs else p.model_copy(update={"backfill": refs})
    return compose


def _min_runtime(p: Profile) -> Profile | None:
    guards = [split_ref(ref)[0] for ref in p.preempt if split_ref(ref)[0] in ("lower-order", "lower-priority",
                                                                              "guarded")]
    if not guards:
        return None
    now = max(float(p.args.get(g, {}).get("min_runtime_s") or 0.0) for g in guards)
    return p.with_args({g: {"min_runtime_s": max(3600.0, 2 * now)} for g in guards})


def _sized_victims(p: Profile) -> Profile | None:
    if "lower-order" not in p.enabled("preempt") or p.args.get("lower-order", {}).get("max_victim_gpus_per_gpu"):
        return None
    return p.with_args({"lower-order": {"level_depth": 2, "max_victim_gpus_per_gpu": 2.0, "victim_size_wait_s": 300.0}})


def _guarded(p: Profile) -> Profile | None:
    if not p.preempt or "guarded" in p.enabled("preempt"):
        return None
    return p.model_copy(update={"preempt": ["guarded", *_refs(p.preempt, {"lower-order", "lower-priority"})]})


def _quota(borrowing: bool, reclaim: bool) -> Callable[[Profile], Profile | None]:
    def compose(p: Profile) -> Profile | None:
        if "quota" not in p.enabled("admit"):
            return None
        out = p.with_admission("quota", {"borrowing": borrowing})
        if reclaim and "quota" not in p.enabled("preempt"):
            out = out.model_copy(update={"preempt": [*p.preempt, "quota"]})
        return out
    return compose


def _filter(name: str) -> Callable[[Profile], Profile | None]:
    def compose(p: Profile) -> Profile | None:
        return None if name in p.enabled("filter") else p.model_copy(update={"filter": [*p.filter, name]})
    return compose


def _order_first(name: str) -> Callable[[Profile], Profile | None]:
    def compose(p: Profile) -> Profile | None:
        if split_ref(p.order[0])[0] == name:
            return None
        return p.model_copy(update={"order": [name, *_refs(p.order, {name})]})
    return compose


STRATEGIES: tuple[Strategy, ...] = (
    Strategy("fgd", "fragmentation", "place by fragmentation gradient descent (fgd)", _place("fgd", "fgd", True)),
    Strategy("steady-pack", "fragmentation", "place with steady-pack (fgd with GPU-model rules)",
             _place("steady-pack", "steady-pack", True)),
    Strategy("backfill", "blocking", "skip a job that does not fit so smaller ones start (no strict head)",
             _backfill([])),
    Strategy("reserve-aging", "blocking", "EASY backfill: a gang of 8+ GPUs or a job waiting 1 h reserves",
             _backfill([{"reserve": {"min_gpus": 8, "max_wait_s": 3600.0}}])),
    Strategy("borrowing", "quota", "queues borrow idle GPUs beyond their share", _quota(True, False)),
    Strategy("reclaim", "quota", "borrowing, and lenders reclaim what is lent", _quota(True, True)),
    Strategy("min-runtime", "preemption", "a job is not preempted in its first hour (or twice the guard)",
             _min_runtime),
    Strategy("sized-victims", "preemption", "victims alike inside a queue; in a job's first 5 min, victims of at most "
             "twice its GPUs", _sized_victims),
    Strategy("guarded", "preemption", "guarded preemption: checkpoint-aware victims, eviction caps and budget",
             _guarded),
    Strategy("drain", "failure", "drain nodes that fail far more often than the others", _filter("drain")),
    Strategy("history", "failure", "prefer nodes with a clean failure record (history scorer)",
             _place("score-pack", "history")),
    Strategy("topology", "slowdown", "keep gangs in one node, else one rack (topology)", _place("topology",
                                                                                                 "topology")),
    Strategy("locality", "slowdown", "prefer nodes that cache the job's data", _place("score-pack", "locality")),
    Strategy("heterogeneity", "slowdown", "place on the GPU model the job runs best on",
             _place("score-pack", "heterogeneity")),
    Strategy("priority", "load", "priority classes first when demand exceeds the cluster", _order_first("priority"),
             "priorities"),
    Strategy("drf", "load", "tenants' dominant shares first (fair under overload)", _order_first("drf"), "tenants"),
)


def candidates_for(profile: Profile, cause: str, jobs: Sequence[Job] = ()) -> list[tuple[Strategy, Profile]]:
    """The candidate profiles that answer `cause`, each composed onto `profile` and named after both; with `jobs`,
    only those whose needs the workload meets."""
    has = {"": True, "priorities": len({j.priority for j in jobs}) > 1, "tenants": len({j.tenant for j in jobs}) > 1}
    out = []
    for strategy in STRATEGIES:
        if strategy.cause != cause or (jobs and not has[strategy.needs]):
            continue
        if (composed := strategy.compose(profile)) is not None:
            out.append((strategy, composed.model_copy(update={
                "name": f"{profile.name}+{strategy.name}",
                "description": f"{profile.name}, with {strategy.what} (against {cause})"})))
    return out


def compose(profile: Profile, strategies: Sequence[Strategy]) -> Profile | None:
    """`profile` with every strategy applied in turn (None if one no longer applies)."""
    out: Profile | None = profile
    for strategy in strategies:
        out = strategy.compose(out) if out is not None else None
    if out is None:
        return None
    return out.model_copy(update={"name": "+".join([profile.name, *(s.name for s in strategies)]),
                                  "description": f"{profile.name}, with " + "; ".join(s.what for s in strategies)})


def ranked_causes(lost_gpu_hours: dict[str, float]) -> list[dict[str, Any]]:
    """The causes, largest first, each with its GPU-hours and whether the scheduler can act on it."""
    order = sorted(CAUSES, key=lambda c: (-lost_gpu_hours.get(c, 0.0), CAUSES.index(c)))
    return [{"cause": c, "gpu_hours": round(lost_gpu_hours.get(c, 0.0), 6), "scheduler": c not in NOT_THE_SCHEDULERS}
            for c in order]


def measured(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary with LOST and each cause's GPU-hours as top-level metrics (`lost.<cause>`)."""
    lost = summary.get("lost_gpu_hours") or {}
    return {**summary, LOST: sum(lost.get(c, 0.0) for c in SCHEDULER_CAUSES),
            **{f"lost.{c}": lost.get(c, 0.0) for c in CAUSES}}


def gain(base: Sequence[dict[str, Any]], cand: Sequence[dict[str, Any]], metrics: Sequence[str]) -> dict[str, Any]:
    """Per metric, over paired seeds: the means of base and candidate, the mean relative change and its spread
    (standard deviation over the seeds; 0 with one seed)."""
    out = {}
    for metric in metrics:
        pairs = [(b.get(metric), c.get(metric)) for b, c in zip(base, cand, strict=True)]
        pairs = [(float(b), float(c)) for b, c in pairs if b is not None and c is not None]
        if not pairs:
            continue
        b_arr, c_arr = np.array(pairs).T
        rel = np.where(b_arr != 0, (c_arr - b_arr) / np.where(b_arr != 0, b_arr, 1.0), 0.0)
        out[metric] = {"base": round(float(b_arr.mean()), 4), "candidate": round(float(c_arr.mean()), 4),
                       "change": round(float(rel.mean()), 4), "spread": round(float(rel.std()), 4)}
    return out


def score(base: Sequence[dict[str, Any]], cand: Sequence[dict[str, Any]]) -> float:
    """Mean over seeds of tune.objective on OBJECTIVE (below 1: better than the base)."""
    scores = [objective(c, b, OBJECTIVE) for b, c in zip(base, cand, strict=True)]
    return float(np.mean(scores)) if scores else math.inf


# ------------------------------------------------------------------------------------------------ the loop


@dataclass(frozen=True, slots=True)
class AdviseConfig:
    """How much to try: the top `causes` (by GPU-hours) get candidates; each runs over `seeds` seeds (SimConfig
    seeds from the run's own); `tune_share` of the jobs choose, the rest check; `workers` / `ray_address` as
    parallel_map takes them."""

    causes: int = 3
    seeds: int = 3
    tune_share: float = 0.7
    workers: int | None = None
    ray_address: str | None = None


def _summary_of(nodes: Sequence[Node], parts: dict[str, list[Job]], config: SimConfig,
                item: tuple[Profile, str, int]) -> dict[str, Any]:
    """One what-if (as parallel_map calls it): `item` is (profile, part of the workload, seed)."""
    profile, part, seed = item
    return measured(simulate(nodes, parts[part], profile, replace(config, seed=seed, timing=False))["summary"])


class Loop:
    """One advise session on fixed inputs; `progress` gets a line of text per step."""

    def __init__(self, nodes: Sequence[Node], jobs: Sequence[Job], config: SimConfig, settings: AdviseConfig,
                 progress: Callable[[str], None]) -> None:
        if settings.causes < 1 or settings.seeds < 1:
            raise ValueError("advise needs at least one cause and one seed")
        self.nodes, self.config, self.settings = list(nodes), config, settings
        tune_jobs, held_jobs = split(jobs, settings.tune_share)
        self.parts = {"tune": tune_jobs, "held-out": held_jobs}
        self.seeds = [config.seed + k for k in range(settings.seeds)]
        self.say = progress
        self.steps: list[str] = []

    def runs(self, profiles: Sequence[Profile], part: str) -> list[list[dict[str, Any]]]:
        """Each profile's summaries over the seeds, on one part of the workload (all at once, in parallel)."""
        items = [(p, part, seed) for p in profiles for seed in self.seeds]
        flat = parallel_map(_summary_of, items, (self.nodes, self.parts, self.config), self.settings.workers,
                            self.settings.ray_address)
        k = len(self.seeds)
        return [flat[i * k:(i + 1) * k] for i in range(len(profiles))]

    def step(self, text: str) -> None:
        self.steps.append(text)
        self.say(text)


@dataclass(frozen=True, slots=True)
class Advice:
    """What advise found: the JSON `document` (baseline, causes, candidates, recommended), the recommended
    `profile` (the current one when nothing beat it on the held-out jobs), the `steps` taken (text) and the
    `baseline` run record it diagnosed."""

    document: dict[str, Any]
    profile: Profile
    steps: list[str]
    baseline: dict[str, Any]


def advise(nodes: Sequence[Node], jobs: Sequence[Job], profile: Profile, config: SimConfig | None = None,
           settings: AdviseConfig | None = None, progress: Callable[[str], None] = lambda _: None,
           baseline: dict[str, Any] | None = None) -> Advice:
    """The loop: the baseline (simulated here unless a run record of it is given), its causes ranked, candidates
    for the top causes run on the tuning part over the seeds, the best strategies of the two leading causes
    composed, the best candidate checked against the current profile on the held-out part. The recommended profile
    is the best candidate if it beats the current one there (tune.objective on OBJECTIVE below 1), else the
    current one."""
    config = config or SimConfig()
    loop = Loop(nodes, jobs, config, settings or AdviseConfig(), progress)
    if baseline is None:
        loop.step(f"baseline: {profile.name} on {len(jobs)} jobs, {sum(n.capacity.gpus for n in nodes)} GPUs")
        baseline = simulate(nodes, jobs, profile, replace(config, timing=False))
    causes = ranked_causes(baseline["summary"].get("lost_gpu_hours") or {})
    bottleneck = next((c["cause"] for c in causes if c["scheduler"] and c["gpu_hours"] > 0), None)
    loop.step("GPU-hours lost: " + ", ".join(f"{c['cause']} {c['gpu_hours']:g}" for c in causes)
              + f"; bottleneck: {bottleneck or 'none'}"
              + (" (load, demand over the cluster, is not the scheduler's doing)" if causes[0]["cause"] == "load"
                 else ""))
    targets = [c["cause"] for c in causes if c["scheduler"] and c["gpu_hours"] > 0][:loop.settings.causes]
    if causes[0]["cause"] == "load" and causes[0]["gpu_hours"] > 0:  # overload: who goes first matters most
        targets.append("load")
    tried = [pair for cause in targets for pair in candidates_for(profile, cause, jobs)]
    candidates = _try(loop, profile, tried, targets)
    best = min(candidates, key=lambda c: c["score"], default=None)
    recommended, held = profile, None
    if best is not None and best["score"] < 1.0:
        loop.step(f"checking {best['profile']} against {profile.name} on the {len(loop.parts['held-out'])} "
                  f"held-out jobs over {len(loop.seeds)} seeds")
        base_held, cand_held = loop.runs([profile, best["candidate"]], "held-out")
        metrics = [*GAIN_METRICS, *(f"lost.{c}" for c in CAUSES)]
        held = {"score": round(score(base_held, cand_held), 4), "gain": gain(base_held, cand_held, metrics)}
        if held["score"] < 1.0:
            recommended = best["candidate"]
    loop.step(f"recommended: {recommended.name}" + (f" (held-out score {held['score']})" if held else "")
              + ("" if recommended is not profile else ": no candidate beat the current profile on held-out jobs"))
    document = {
        "baseline": baseline["summary"],
        "causes": causes,
        "candidates": [{k: v for k, v in c.items() if k != "candidate"} for c in candidates],
        "recommended": {"profile": recommended.name, "path": None, "bottleneck": bottleneck,
                        "improved": recommended is not profile, "held_out": held},
    }
    return Advice(document, recommended, loop.steps, baseline)


def _try(loop: Loop, profile: Profile, tried: list[tuple[Strategy, Profile]],
         targets: list[str]) -> list[dict[str, Any]]:
    """Runs the candidates (and, to adjust, the composition of the best strategy of each of the two leading
    causes that improved) on the tuning part; each with its strategy, cause, score and gain there."""
    loop.step(f"trying {len(tried)} candidates for {', '.join(targets) or 'no cause'} on "
              f"{len(loop.parts['tune'])} jobs over {len(loop.seeds)} seeds: "
              + ", ".join(s.name for s, _ in tried))
    results = loop.runs([profile, *(p for _, p in tried)], "tune")
    base = results[0]
    out = [_judged(strategy.name, strategy.cause, p, base, res)
           for (strategy, p), res in zip(tried, results[1:], strict=True)]
    for c in out:
        loop.step(f"  {c['profile']}: {c['cause']} {_change(c['gain'], 'lost.' + c['cause'])}, lost GPU-h "
                  f"{_change(c['gain'], LOST)}, avg JCT {_change(c['gain'], 'avg_jct_s')} (score {c['score']})")
    leaders = []
    for cause in targets:
        good = [(c["score"], s) for c, (s, _) in zip(out, tried, strict=True) if c["cause"] == cause
                and c["score"] < 1.0]
        if good:
            leaders.append(min(good, key=lambda x: x[0])[1])
    combined = compose(profile, leaders[:2]) if len(leaders) >= 2 else None
    if combined is not None:
        loop.step(f"adjusting: composing {' and '.join(s.name for s in leaders[:2])} ({combined.name})")
        [res] = loop.runs([combined], "tune")
        c = _judged("+".join(s.name for s in leaders[:2]), leaders[0].cause, combined, base, res)
        loop.step(f"  {c['profile']}: lost GPU-h {_change(c['gain'], LOST)}, avg JCT "
                  f"{_change(c['gain'], 'avg_jct_s')} (score {c['score']})")
        out.append(c)
    return out


def _judged(strategy: str, cause: str, profile: Profile, base: list[dict[str, Any]],
            results: list[dict[str, Any]]) -> dict[str, Any]:
    return {"profile": profile.name, "strategy": strategy, "cause": cause, "score": round(score(base, results), 4),
            "gain": gain(base, results, [*GAIN_METRICS, f"lost.{cause}"]), "candidate": profile}


def _change(g: dict[str, Any], metric: str) -> str:
    if metric not in g:
        return "-"
    m = g[metric]
    return f"{m['base']:g} -> {m['candidate']:g} ({m['change']:+.0%} ±{m['spread']:.0%})"


# ------------------------------------------------------------------------------------------------ inputs


def jobs_of_records(records: Sequence[dict[str, Any]]) -> list[Job]:
    """The jobs of a run's records (a run file's `jobs`, or `history_records`), as a simulation replays them:
    submission, gang shape, reference duration, tenant and priority. Records without a duration (a live job not
    yet completed) or without GPUs are left out. Submissions are rebased so the first is at 0."""
    usable = [r for r in records if r.get("duration") is not None and int(r["gpus"]) > 0]
    if not usable:
        raise ValueError("no job with a known duration and GPUs to replay")
    t0 = min(float(r["submit"]) for r in usable)
    return [Job(id=str(r["id"]), submit_s=float(r["submit"]) - t0, tasks=int(r["tasks"]),
                task=Resources(gpus=int(r["gpus"]) // int(r["tasks"])), duration_s=float(r["duration"]),
                tenant=str(r.get("tenant", "default")), priority=int(r.get("priority", 0))) for r in usable]


def history_records(api_jobs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The jobs of a live server (GET /v1/jobs: runs per attempt and rank) in the run records' shape. An attempt
    spans its tasks' earliest start to their latest end (None while running); a completed attempt's span is the
    job's reference duration and all its GPU-time is useful, any other keeps nothing (a live task says nothing of
    its checkpoints)."""
    out = []
    for job in api_jobs:
        attempts: dict[int, list[dict[str, Any]]] = {}
        for run in job["runs"]:
            if run.get("start_s") is not None:
                attempts.setdefault(int(run["attempt"]), []).append(run)
        runs = []
        for _, ranks in sorted(attempts.items()):
            start = min(float(r["start_s"]) for r in ranks)
            ends = [r["end_s"] for r in ranks]
            end = None if any(e is None for e in ends) else max(float(e) for e in ends)
            outcome = "completed" if all(r["outcome"] == "completed" for r in ranks) else next(
                (r["outcome"] for r in ranks if r["outcome"] not in ("", "completed")), "")
            nodes = sorted({r["node"] for r in ranks})
            runs.append({"start": start, "end": end, "nodes": nodes,
                         "node_tasks": [sum(r["node"] == n for r in ranks) for n in nodes], "outcome": outcome,
                         "useful_s": (end - start) if outcome == "completed" and end is not None else 0.0,
                         "progress_from": start, "slowdown": 1.0})
        done = [r for r in runs if r["outcome"] == "completed"]
        out.append({"id": str(job["id"]), "tenant": job["tenant"], "priority": job.get("priority", 0),
                    "gpus": int(job["gpus"]), "tasks": int(job["tasks"]), "submit": float(job["submit_s"]),
                    "state": job["state"], "end": job.get("end_s"), "runs": runs,
                    "duration": done[-1]["end"] - done[-1]["start"] if done else None})
    return out


def baseline_of_records(records: Sequence[dict[str, Any]], nodes: Sequence[Node], window_s: float = 3600.0,
                        now_s: float | None = None) -> dict[str, Any]:
    """A run record to diagnose from records that were not simulated here (a live server's history): its
    `summary` holds the lost GPU-hours by cause (losses.py) over windows from the first submission to `now_s`
    (default: the last end or submission), its `series` the per-window losses, `jobs` the records."""
    submits = [float(r["submit"]) for r in records]
    ends = [float(r["end"]) for r in records if r.get("end") is not None]
    first = min(submits, default=0.0)
    last = now_s if now_s is not None else max([*ends, *submits], default=first)
    edges = window_edges(first, max(last, first + 1.0), window_s)
    losses = gpu_losses(records, {n.name: n.capacity.gpus for n in nodes}, edges)
    series = {"window_s": window_s, "start_s": first, "useful_gpu_s": losses.useful_gpu_s.tolist(),
              "lost_gpu_s": {c: v.tolist() for c, v in losses.lost_gpu_s.items()}}
    states = [r.get("state") for r in records]
    summary = {"jobs_submitted": len(records), "jobs_completed": states.count("completed"),
               "lost_gpu_hours": losses.lost_gpu_hours()}
    return {"policy": "", "summary": summary, "series": series, "jobs": list(records)}
