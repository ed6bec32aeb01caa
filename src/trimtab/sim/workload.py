"""The embedded default workload: a seeded synthetic job generator calibrated on the Philly-derived job list.

Owns the calibration tables (GPU-count mix, duration quantiles, tenant mix, hour/weekday arrival profile) and specs."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from numbers import Integral, Real
from typing import Any

import numpy as np

from trimtab.model import Job, Resources

# Calibration tables, printed by benchmarks/calibrate_workload.py from
# pollux-adaptdl/simulator/traces/philly.csv (82,247 jobs, 2017-09-04 .. 2017-12-22). Summary statistics only;
# docs/workload.md says how they were made and how well the generator reproduces the trace.

DAY_S = 86_400
MAX_DURATION_S = 7 * DAY_S  # 236 trace jobs (0.29%) ran longer; they count as 7 days

# Jobs per GPU count in the trace. A job of G GPUs is a gang of G one-GPU tasks.
TRACE_SIZE_JOBS: dict[int, int] = {
    1: 76627, 2: 1818, 4: 1870, 8: 1643, 12: 7, 16: 199, 24: 7, 32: 67, 64: 6, 128: 3,
}  # fmt: skip

# Duration quantile tables, one per GPU-size class, at the probabilities QUANTILE_P; a draw interpolates
# log(duration) linearly between knots. Trace durations were clipped to [1 s, MAX_DURATION_S] first.
SIZE_CLASS_MAX_GPUS = (1, 4, 8)  # classes: 1 | 2-4 | 5-8 | 9 and more
SIZE_CLASS_NAMES = ("1", "2-4", "5-8", "9+")
QUANTILE_P = (0.0, 0.001, 0.005, 0.01, *(round(0.025 * i, 3) for i in range(1, 40)), 0.99, 0.995, 0.999, 1.0)
DURATION_QUANTILES_S: dict[str, tuple[int, ...]] = {
    "1": (
        1, 6, 22, 30, 44, 52, 58, 62, 66, 69, 72, 76, 87, 122, 171, 215, 302, 385, 527, 600, 714, 855, 959,
        1117, 1278, 1446, 1542, 1728, 1915, 2054, 2278, 2464, 2583, 2716, 3137, 3754, 4349, 5342, 5911, 8512,
        11166, 19137, 55518, 135399, 266914, 604800, 604800,
    ),
    "2-4": (
        2, 2, 5, 6, 9, 11, 13, 15, 16, 17, 18, 19, 20, 21, 23, 25, 28, 33, 45, 85, 110, 149, 183, 367, 680,
        1208, 2938, 5583, 10038, 14305, 18922, 25424, 33150, 45388, 61572, 79258, 89027, 99994, 123762,
        166120, 185892, 233082, 422072, 604800, 604800, 604800, 604800,
    ),
    "5-8": (
        1, 2, 20, 33, 72, 125, 172, 216, 320, 464, 551, 785, 1058, 1876, 3009, 4011, 5176, 7266, 10331, 12382,
        13793, 16651, 21160, 23683, 30274, 36595, 53329, 65014, 90611, 105941, 123779, 140721, 159174, 173248,
        185595, 203050, 221349, 242252, 271624, 351982, 408314, 525618, 604800, 604800, 604800, 604800,
        604800,
    ),
    "9+": (
        1, 1, 2, 4, 11, 35, 46, 72, 120, 220, 290, 345, 417, 566, 702, 890, 1226, 1532, 2479, 3167, 5340,
        8522, 13550, 21137, 31631, 45315, 48398, 53750, 55944, 58976, 65204, 73311, 90526, 104218, 124537,
        158991, 165860, 181582, 210586, 247972, 330234, 443240, 532107, 604800, 604800, 604800, 604800,
    ),
}  # fmt: skip

# The 15 virtual clusters (tenants), biggest first, anonymised as team-a .. team-o.
TENANTS: tuple[str, ...] = tuple(f"team-{chr(ord('a') + i)}" for i in range(15))
TRACE_TENANT_JOBS = (41226, 16091, 9953, 7423, 1934, 1511, 1435, 1137, 723, 422, 374, 8, 4, 3, 3)
TRACE_TENANT_GPU_TIME_SHARE = (
    0.0899, 0.0309, 0.0918, 0.1245, 0.0489, 0.2852, 0.0756, 0.0100, 0.1321, 0.0952, 0.0157, 0.0002, 0.0, 0.0, 0.0,
)  # fmt: skip
# Jobs per tenant (columns, TENANTS order) for each (size class, duration-quantile band) row: row = 4 * class +
# band, bands cut at TENANT_U_EDGES of the job's duration quantile within its class. Big tenants run the long,
# wide jobs, so drawing the tenant given size and duration band reproduces GPU-time shares, not only job shares.
TENANT_U_EDGES = (0.0, 0.5, 0.9, 0.99, 1.0)
TENANT_JOBS_BY_CLASS_AND_U: tuple[tuple[int, ...], ...] = (
    (16230, 13135, 3856, 2597, 1108, 146, 849, 305, 38, 11, 35, 0, 3, 0, 0),
    (21203, 708, 3629, 4491, 43, 63, 9, 367, 47, 22, 65, 2, 0, 2, 0),
    (3170, 731, 1392, 127, 418, 349, 81, 458, 63, 31, 74, 0, 1, 1, 1),
    (238, 33, 177, 22, 2, 39, 151, 7, 56, 0, 41, 0, 0, 0, 0),
    (51, 1402, 290, 9, 0, 13, 0, 0, 71, 5, 3, 0, 0, 0, 0),
    (132, 36, 141, 28, 240, 338, 213, 0, 237, 9, 101, 0, 0, 0, 0),
    (10, 15, 1, 29, 122, 22, 111, 0, 21, 0, 1, 0, 0, 0, 0),
    (1, 2, 1, 9, 1, 2, 21, 0, 0, 0, 0, 0, 0, 0, 0),
    (157, 5, 317, 13, 0, 74, 0, 0, 81, 146, 20, 6, 0, 0, 2),
    (33, 5, 130, 22, 0, 268, 0, 0, 41, 144, 15, 0, 0, 0, 0),
    (1, 0, 7, 15, 0, 69, 0, 0, 52, 3, 1, 0, 0, 0, 0),
    (0, 0, 1, 1, 0, 9, 0, 0, 5, 0, 0, 0, 0, 0, 0),
    (0, 10, 11, 18, 0, 67, 0, 0, 0, 20, 18, 0, 0, 0, 0),
    (0, 6, 0, 24, 0, 44, 0, 0, 11, 31, 0, 0, 0, 0, 0),
    (0, 3, 0, 16, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0),
    (0, 0, 0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0),
)

# Relative submission rates (mean 1): by hour of day (UTC, 00..23) and by weekday (Monday..Sunday).
HOUR_RATE = (
    1.274, 0.985, 1.119, 1.103, 0.700, 1.153, 1.673, 2.089, 1.109, 1.006, 1.024, 0.869,
    0.749, 0.705, 0.638, 0.649, 0.882, 0.668, 0.801, 0.728, 1.016, 0.917, 1.134, 1.010,
)  # fmt: skip
WEEKDAY_RATE = (0.853, 1.054, 1.125, 1.272, 1.427, 0.642, 0.627)

# Model names by GPU-hours band, the rule Pollux's artifact used to label Philly jobs: under 1 GPU-hour cifar10 or
# ncf, 1-10 deepspeech2 or bert, 10-100 yolov3, 100 and more imagenet (a fair coin picks within a pair).
JOB_TYPE_GPU_HOUR_EDGES = (1.0, 10.0, 100.0)
JOB_TYPES = (("cifar10", "ncf"), ("deepspeech2", "bert"), ("yolov3", "yolov3"), ("imagenet", "imagenet"))

_HOUR_S = 3600
_ONE_GPU = Resources(gpus=1)
_SPEC_TYPES: dict[str, type] = {
    "jobs": int,
    "seed": int,
    "load": float,
    "cluster_gpus": int,
    "tenants": int,
    "users_per_tenant": int,
    "max_duration_s": float,
    "priorities": str,
}


def synthetic(
    jobs: int = 2000,
    seed: int = 0,
    *,
    load: float = 1.0,
    cluster_gpus: int = 64,
    tenants: int | None = None,
    users_per_tenant: int = 4,
    max_duration_s: float = MAX_DURATION_S,
    priorities: Sequence[tuple[float, int]] = (),
) -> list[Job]:
    """`jobs` Philly-like jobs for a cluster of `cluster_gpus` GPUs offered `load` (1.0 = all GPUs busy on average).

    Contract: the list is sorted by `submit_s`, the first job submits at 0.0, ids are `s000000`, `s000001`, ... in
    that order. Every job is a gang of G one-GPU tasks with G <= `cluster_gpus`, so every job can run. The same
    arguments give the same list (numpy default_rng(seed), nothing else); a different seed gives a different one.
    Offered load, sum(gpus * duration_s) / (cluster_gpus * arrival window), equals `load` by construction over the
    arrival window; `offered_load()` measures it from first to last submission, which is a little shorter.

    What is drawn, per job and independently: a GPU count from the trace mix (sizes above `cluster_gpus` removed,
    the rest renormalised); a duration from its size class's quantile table, at most `max_duration_s` (1 s
    resolution); a tenant given size class and duration band (`tenants=N` keeps the N biggest of the 15,
    renormalised); a user of that tenant (`users_per_tenant` users, Zipf weights 1/k); a model name from the job's
    GPU-hours. Submission times are a non-homogeneous Poisson process with the hour-of-day x weekday profile
    (t=0 is a Monday 00:00 UTC of the profile; then times shift so the first job is at 0), conditioned on `jobs`
    arrivals in a window whose length is total work / (cluster_gpus * load).

    `priorities`: priority classes as (share of jobs, priority value) pairs, e.g. ((0.1, 1000), (0.3, 100)); the
    other jobs keep priority 0. Each job's class is drawn from a stream of its own (seeded by `seed`), so the
    jobs are the same with or without classes but for their priorities.

    Raises ValueError naming the argument when one is out of range."""
    _check_params({"jobs": jobs, "seed": seed, "load": load, "cluster_gpus": cluster_gpus, "tenants": tenants,
                   "users_per_tenant": users_per_tenant, "max_duration_s": max_duration_s,
                   "priorities": priorities})  # fmt: skip
    if jobs == 0:
        return []
    n_tenants = len(TENANTS) if tenants is None else tenants
    rng = np.random.default_rng(seed)

    sizes, size_p = _size_mix(cluster_gpus)
    gpus = rng.choice(sizes, size=jobs, p=size_p)
    size_class = np.searchsorted(np.array(SIZE_CLASS_MAX_GPUS), gpus, side="left")
    duration_u = rng.random(jobs)
    duration_s = _durations_s(size_class, duration_u, max_duration_s)
    tenant = _draw_tenants(rng, size_class, duration_u, n_tenants)
    user_rank = _draw_user_ranks(rng, jobs, users_per_tenant)
    job_type = _job_types(rng, gpus * duration_s)

    work_gpu_s = float(np.sum(gpus * duration_s))
    window_s = work_gpu_s / (cluster_gpus * load)
    submit_s = _arrivals_s(rng, jobs, window_s)
    made = _as_jobs(submit_s, gpus, duration_s, tenant, user_rank, job_type, n_tenants, users_per_tenant)
    if not priorities:
        return made
    drawn = _draw_priorities(np.random.default_rng([seed, 1]), jobs, priorities)
    return [replace(job, priority=p) if p else job for job, p in zip(made, drawn.tolist(), strict=True)]


def _draw_priorities(rng: np.random.Generator, jobs: int, priorities: Sequence[tuple[float, int]]) -> np.ndarray:
    """A priority per job: class k with probability share_k, priority 0 with the rest."""
    shares = np.array([share for share, _ in priorities], dtype=float)
    values = np.array([*(value for _, value in priorities), 0], dtype=np.int64)
    return values[np.searchsorted(np.cumsum(shares), rng.random(jobs), side="right")]


def parse_priorities(text: str) -> tuple[tuple[float, int], ...]:
    """`0.1:1000,0.3:100` (share:priority, comma-separated) as ((0.1, 1000), (0.3, 100)); ValueError naming the
    bad part."""
    classes = []
    for part in text.split(","):
        share, colon, value = (x.strip() for x in part.partition(":"))
        try:
            classes.append((float(share), int(value)))
        except ValueError:
            colon = ""
        if not colon:
            raise ValueError(f"priorities: expected share:priority such as 0.1:1000, got {part.strip()!r}")
    return tuple(classes)


def _as_jobs(submit_s: np.ndarray, gpus: np.ndarray, duration_s: np.ndarray, tenant: np.ndarray,
             user_rank: np.ndarray, job_type: np.ndarray, n_tenants: int, users_per_tenant: int) -> list[Job]:
    """The drawn columns as Jobs, ids in order."""
    # Name lookups as object-array fancy indexing: the Job constructor is the only per-job Python work left.
    tenant_names = np.array(TENANTS[:n_tenants], dtype=object)
    user_names = np.array([f"{t}-user{k + 1}" for t in tenant_names for k in range(users_per_tenant)], dtype=object)
    type_names = np.array([name for pair in JOB_TYPES for name in pair], dtype=object)
    columns = (
        submit_s.tolist(),
        gpus.tolist(),
        duration_s.tolist(),
        tenant_names[tenant].tolist(),
        user_names[tenant * users_per_tenant + user_rank].tolist(),
        type_names[job_type].tolist(),
    )
    return [
        Job(id=f"s{i:06d}", submit_s=s, tasks=g, task=_ONE_GPU, duration_s=d, tenant=t, user=u, job_type=k)
        for i, (s, g, d, t, u, k) in enumerate(zip(*columns, strict=True))
    ]


def offered_load(jobs: Sequence[Job], cluster_gpus: int) -> float:
    """sum(gpus * duration_s) / (cluster_gpus * (last submit_s - first submit_s)): the share of the cluster the
    jobs ask for while they arrive. Jobs without a duration count as 0; inf when the span is 0 and work is not."""
    if not jobs:
        return 0.0
    work_gpu_s = sum(j.gpus * (j.duration_s or 0.0) for j in jobs)
    submits = [j.submit_s for j in jobs]
    span_s = max(submits) - min(submits)
    if span_s <= 0:
        return math.inf if work_gpu_s > 0 else 0.0
    return work_gpu_s / (cluster_gpus * span_s)


def parse_workload_spec(spec: str) -> dict[str, Any]:
    """The keyword arguments for `synthetic()` in a spec `synthetic` or `synthetic:key=value,...`, e.g.
    `synthetic:jobs=5000,seed=7,load=0.8`. Keys: jobs, seed, load, cluster_gpus, tenants, users_per_tenant,
    max_duration_s, priorities (share:priority pairs, the last key since its pairs are comma-separated too:
    `priorities=0.1:1000,0.3:100`); omitted keys keep synthetic()'s defaults, so the result may be empty.

    Raises ValueError naming the spec and the bad part (another workload name, an unknown or repeated key, a value
    of the wrong type or out of range), and listing the valid keys."""
    valid = ", ".join(_SPEC_TYPES)
    name, _, params = spec.strip().partition(":")
    if name.strip() != "synthetic":
        raise ValueError(f"workload spec {spec!r}: unknown workload {name.strip()!r}; the embedded one is "
                         f"'synthetic' (synthetic:key=value,... with keys {valid})")  # fmt: skip
    kwargs: dict[str, Any] = {}
    params, _, priorities = params.partition("priorities=")
    if priorities:
        kwargs["priorities"] = _spec_priorities(spec, priorities, valid)
    for item in params.split(","):
        if not item.strip():
            continue
        key, eq, raw = (part.strip() for part in item.partition("="))
        if key not in _SPEC_TYPES:
            raise ValueError(f"workload spec {spec!r}: unknown key {key!r}; valid keys: {valid}")
        if not eq or not raw:
            raise ValueError(f"workload spec {spec!r}: key {key!r} needs a value ({key}=...); valid keys: {valid}")
        if key in kwargs:
            raise ValueError(f"workload spec {spec!r}: key {key!r} given twice; valid keys: {valid}")
        kind = _SPEC_TYPES[key]
        try:
            kwargs[key] = kind(raw)
        except ValueError:
            expected = "an integer" if kind is int else "a number"
            raise ValueError(f"workload spec {spec!r}: {key}={raw!r} is not {expected}; valid keys: {valid}") from None
    try:
        _check_params(kwargs)
    except ValueError as err:
        raise ValueError(f"workload spec {spec!r}: {err}; valid keys: {valid}") from None
    return kwargs


def _spec_priorities(spec: str, text: str, valid: str) -> tuple[tuple[float, int], ...]:
    try:
        return parse_priorities(text)
    except ValueError as err:
        raise ValueError(f"workload spec {spec!r}: {err}; valid keys: {valid}") from None


def _priorities_ok(value: object) -> bool:
    """Share:priority pairs with shares in (0, 1] summing to at most 1."""
    try:
        shares = [float(share) for share, _ in value]  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        return False
    return all(0 < s <= 1 for s in shares) and sum(shares) <= 1 + 1e-9


def _check_params(values: Mapping[str, object]) -> None:
    """Raise ValueError `name=value must be ...` for the first of `values` (arguments of `synthetic` by name)
    out of range."""

    def is_int(value: object) -> bool:
        return isinstance(value, Integral) and not isinstance(value, bool)

    def is_real(value: object) -> bool:
        return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(float(value))

    checks: dict[str, tuple[Callable[[Any], bool], str]] = {
        "jobs": (lambda v: is_int(v) and v >= 0, "an integer >= 0"),
        "seed": (lambda v: is_int(v) and v >= 0, "an integer >= 0"),
        "load": (lambda v: is_real(v) and v > 0, "a finite number > 0"),
        "cluster_gpus": (lambda v: is_int(v) and v >= 1, "an integer >= 1"),
        "tenants": (lambda v: v is None or (is_int(v) and 1 <= v <= len(TENANTS)),
                    f"None or an integer from 1 to {len(TENANTS)}"),
        "users_per_tenant": (lambda v: is_int(v) and v >= 1, "an integer >= 1"),
        "max_duration_s": (lambda v: is_real(v) and v >= 1, "a finite number >= 1"),
        "priorities": (_priorities_ok, "share:priority pairs with shares in (0, 1] summing to at most 1"),
    }  # fmt: skip
    for name, (ok, expected) in checks.items():
        if name in values and not ok(values[name]):
            raise ValueError(f"{name}={values[name]!r} must be {expected}")


def _size_mix(cluster_gpus: int) -> tuple[np.ndarray, np.ndarray]:
    """GPU counts that fit `cluster_gpus` and their trace probabilities, renormalised."""
    sizes = np.array([g for g in TRACE_SIZE_JOBS if g <= cluster_gpus], dtype=np.int64)
    counts = np.array([TRACE_SIZE_JOBS[g] for g in sizes.tolist()], dtype=float)
    return sizes, counts / counts.sum()


def _durations_s(size_class: np.ndarray, u: np.ndarray, max_duration_s: float) -> np.ndarray:
    """Inverse CDF of each class's quantile table at `u`, log-interpolated; whole seconds in [1, max_duration_s]."""
    log_s = np.empty(len(u))
    p = np.array(QUANTILE_P)
    for k, name in enumerate(SIZE_CLASS_NAMES):
        mask = size_class == k
        log_s[mask] = np.interp(u[mask], p, np.log(np.array(DURATION_QUANTILES_S[name], dtype=float)))
    return np.clip(np.rint(np.exp(log_s)), 1.0, math.floor(max_duration_s))


def _draw_tenants(rng: np.random.Generator, size_class: np.ndarray, u: np.ndarray, n_tenants: int) -> np.ndarray:
    """Tenant index per job from the (class, duration band) row of the table, restricted to the first n_tenants;
    a row with no job among them falls back to their overall job shares."""
    table = np.array(TENANT_JOBS_BY_CLASS_AND_U, dtype=float)[:, :n_tenants]
    empty = table.sum(axis=1) == 0
    table[empty] = np.array(TRACE_TENANT_JOBS[:n_tenants], dtype=float)
    cum = np.cumsum(table / table.sum(axis=1, keepdims=True), axis=1)
    bands = len(TENANT_U_EDGES) - 1
    band = np.clip(np.searchsorted(np.array(TENANT_U_EDGES), u, side="right") - 1, 0, bands - 1)
    row = size_class * bands + band
    draw = rng.random(len(u))
    return np.minimum((cum[row] <= draw[:, None]).sum(axis=1), n_tenants - 1)


def _draw_user_ranks(rng: np.random.Generator, jobs: int, users_per_tenant: int) -> np.ndarray:
    """0-based user rank inside the tenant, with Zipf weights 1/k: a few users submit most jobs."""
    cum = np.cumsum(1.0 / np.arange(1, users_per_tenant + 1))
    rank = np.searchsorted(cum, rng.random(jobs) * cum[-1], side="right")
    return np.minimum(rank, users_per_tenant - 1)


def _job_types(rng: np.random.Generator, work_gpu_s: np.ndarray) -> np.ndarray:
    """Index into the flattened JOB_TYPES: the GPU-hours band picks the pair, a fair coin the member."""
    band = np.searchsorted(np.array(JOB_TYPE_GPU_HOUR_EDGES), work_gpu_s / _HOUR_S, side="right")
    return 2 * band + (rng.random(len(work_gpu_s)) < 0.5)


def _arrivals_s(rng: np.random.Generator, jobs: int, window_s: float) -> np.ndarray:
    """`jobs` sorted arrival times of the profile's non-homogeneous Poisson process over [0, window_s], given
    their number (then they are independent draws from the normalised rate), shifted so the first is 0.0."""
    hours = max(1, math.ceil(window_s / _HOUR_S))
    hour = np.arange(hours)
    width = np.ones(hours)  # in hours; the last one may be partial
    width[-1] = (window_s - (hours - 1) * _HOUR_S) / _HOUR_S
    mass_per_hour = np.array(HOUR_RATE)[hour % 24] * np.array(WEEKDAY_RATE)[(hour // 24) % 7] * width
    cum = np.cumsum(mass_per_hour)
    mass = rng.random(jobs) * cum[-1]
    idx = np.minimum(np.searchsorted(cum, mass, side="right"), hours - 1)
    within = np.clip((mass - (cum[idx] - mass_per_hour[idx])) / mass_per_hour[idx], 0.0, 1.0)
    submit_s = np.sort((idx + within * width[idx]) * _HOUR_S)
    return submit_s - submit_s[0]
