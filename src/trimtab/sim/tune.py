"""Tuning a profile: random search over its numeric parameters on one part of a workload, judged on a held-out part,
so an operator can adapt a policy to their own cluster and see whether the gain holds on jobs it was not tuned on."""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from trimtab.model import Job, Node
from trimtab.profile import Profile
from trimtab.sim.parallel import parallel_map
from trimtab.sim.run import SimConfig, simulate

HIGHER_IS_BETTER = frozenset({"jobs_completed", "gpu_util", "cpu_util", "mem_util", "backlogged_util",
                              "fairness_jain", "decisions_per_s"})
_SKIP_KEYS = frozenset({"name", "description", "consolidate_window_s", "consolidate_max_jobs"})  # not policy: cost
_STRUCTURE_ARGS = frozenset({"key_depth"})  # plugin arguments that say how the profile is built, not how much


@dataclass(frozen=True, slots=True)
class Knob:
    """One numeric parameter of a profile: where it is (a path of keys and indices) and its value there."""

    path: tuple[str | int, ...]
    value: float
    integer: bool


def knobs(profile: Profile) -> list[Knob]:
    """Every numeric parameter of the profile: plugin arguments (lists element by element) and score weights."""
    found: list[Knob] = []

    def walk(node: Any, path: tuple[str | int, ...]) -> None:
        if isinstance(node, bool):
            return
        if isinstance(node, int | float):
            found.append(Knob(path, float(node), isinstance(node, int)))
        elif isinstance(node, dict):
            for key, value in node.items():
                if not (len(path) == 0 and key in _SKIP_KEYS) and key not in _STRUCTURE_ARGS:
                    walk(value, (*path, key))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, (*path, i))

    walk(profile.model_dump(), ())
    return found


def with_values(profile: Profile, values: dict[tuple[str | int, ...], float], name: str) -> Profile:
    """A copy of `profile` named `name` with the knobs at the given paths set to new values. A list of thresholds
    (an argument whose name starts with `thresholds`, such as las's `thresholds_gpu_s`) is kept in increasing
    order, as a person writes it: its plugin sorts it anyway, so the order changes nothing it does."""
    data = copy.deepcopy(profile.model_dump())
    thresholds: list[list[float]] = []
    for path, value in values.items():
        target: Any = data
        for key in path[:-1]:
            target = target[key]
        old = target[path[-1]]
        target[path[-1]] = round(value) if isinstance(old, int) and not isinstance(old, bool) else value
        if len(path) > 1 and str(path[-2]).startswith("thresholds"):
            thresholds.append(target)
    for values_list in thresholds:
        values_list.sort()
    data["name"] = name
    return Profile.model_validate(data)


def objective(summary: dict[str, Any], base: dict[str, Any], metrics: Sequence[str]) -> float:
    """Mean ratio of the metrics to the base run's, oriented so that lower is better (1.0: as good as the base).
    A metric the run lacks counts as infinitely bad; one the base lacks (or has at 0) is left out."""
    ratios = []
    for metric in metrics:
        value, ref = summary.get(metric), base.get(metric)
        if ref is None or ref == 0:
            continue
        if value is None:
            return math.inf
        ratios.append(ref / value if metric in HIGHER_IS_BETTER and value else value / ref)
    return float(np.mean(ratios)) if ratios else math.inf


def split(jobs: Sequence[Job], tune_share: float) -> tuple[list[Job], list[Job]]:
    """The first `tune_share` of the jobs by submission for tuning, the rest held out; each part starts at time 0."""
    ordered = sorted(jobs, key=lambda j: j.submit_s)
    cut = max(1, min(len(ordered) - 1, int(len(ordered) * tune_share)))

    def rebase(part: list[Job]) -> list[Job]:
        t0 = part[0].submit_s
        return [replace(j, submit_s=j.submit_s - t0) for j in part]

    return rebase(ordered[:cut]), rebase(ordered[cut:])


def candidate_summary(nodes: Sequence[Node], jobs: Sequence[Job], config: SimConfig,
                      profile: Profile) -> dict[str, Any]:
    """The summary of one candidate's run (as `parallel_map` calls it: the cluster, workload and config shared)."""
    return simulate(nodes, jobs, profile, config)["summary"]


def _map(profiles: list[Profile], nodes: Sequence[Node], jobs: Sequence[Job], config: SimConfig,
         workers: int, ray_address: str | None = None) -> list[dict[str, Any]]:
    return parallel_map(candidate_summary, profiles, (nodes, jobs, config), workers, ray_address)


def tune(nodes: Sequence[Node], jobs: Sequence[Job], base: Profile, metrics: Sequence[str], budget: int,
         config: SimConfig | None = None, seed: int = 0, tune_share: float = 0.7, spread: float = 4.0,
         workers: int | None = None, progress: Callable[[int, int], None] | None = None,
         ray_address: str | None = None) -> dict[str, Any]:
    """Random search: `budget` candidates, each knob of `base` scaled by a log-uniform factor in [1/spread, spread],
    run on the tuning part; the best by `objective` (against the base on the same part) is then run with the base on
    the held-out part. Returns both scores on both parts, the tuned profile, whether it `improved` on the base on
    the held-out part (its score there below 1: only then is it worth using) and every candidate's score.

    Runs go to up to `workers` forked processes, or, with `ray_address`, to the Ray cluster there as one task each
    (all candidates at once); runs are deterministic, so the result is the same either way."""
    if budget < 1:
        raise ValueError("budget must be >= 1")
    config = config or SimConfig(timing=False)
    found = knobs(base)
    if not found:
        raise ValueError(f"profile {base.name} has no numeric parameter to tune")
    tune_jobs, held_jobs = split(jobs, tune_share)
    rng = np.random.default_rng(seed)
    candidates = []
    for i in range(budget):
        factors = np.exp(rng.uniform(-math.log(spread), math.log(spread), size=len(found)))
        values = {k.path: max(k.value * f, 0.0) if k.value else float(rng.uniform(0, 1)) for k, f in
                  zip(found, factors, strict=True)}
        candidates.append(with_values(base, values, f"{base.name}-tuned-{i}"))
    workers = min(workers or os.cpu_count() or 1, budget + 1)
    done = 0
    results: list[dict[str, Any]] = []
    chunk = budget + 1 if ray_address else max(workers, 1)
    for start in range(0, budget + 1, chunk):
        batch = [base, *candidates][start:start + chunk]
        results += _map(batch, nodes, tune_jobs, config, workers, ray_address)
        done += len(batch)
        if progress:
            progress(done, budget + 1)
    base_tune, cand_tune = results[0], results[1:]
    scores = [objective(s, base_tune, metrics) for s in cand_tune]
    best = int(np.argmin(scores))
    tuned = with_values(candidates[best], {}, f"{base.name}-tuned").model_copy(update={
        "description": f"{base.name} tuned for {', '.join(metrics)} on {len(tune_jobs)} jobs ({budget} candidates)"})
    base_held, tuned_held = _map([base, tuned], nodes, held_jobs, config, min(workers, 2), ray_address)
    held_score = objective(tuned_held, base_held, metrics)
    return {
        "base": base.name,
        "objective": list(metrics),
        "tune_jobs": len(tune_jobs),
        "held_out_jobs": len(held_jobs),
        "tuned_profile": tuned.model_dump(exclude_defaults=False),
        "tune": {"base": {m: base_tune.get(m) for m in metrics}, "tuned": {m: cand_tune[best].get(m) for m in metrics},
                 "score": scores[best]},
        "held_out": {"base": {m: base_held.get(m) for m in metrics}, "tuned": {m: tuned_held.get(m) for m in metrics},
                     "score": held_score},
        "improved": held_score < 1.0,
        "candidates": [{"score": s, "values": {".".join(map(str, k.path)): v
                                               for k, v in zip(found, _knob_values(cand, found), strict=True)}}
                       for s, cand in zip(scores, candidates, strict=True)],
    }


def _knob_values(profile: Profile, found: list[Knob]) -> list[float]:
    data: Any = profile.model_dump()
    out = []
    for k in found:
        target = data
        for key in k.path:
            target = target[key]
        out.append(float(target))
    return out
