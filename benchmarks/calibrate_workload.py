"""Calibration of the embedded synthetic workload: reads the Philly-derived job list and prints the literal tables
that src/trimtab/sim/workload.py embeds, as JSON, and with --check the trace-vs-generator comparison.

Usage (from the project root):
    .venv/bin/python benchmarks/calibrate_workload.py            # tables, one JSON object
    .venv/bin/python benchmarks/calibrate_workload.py --check    # one JSON line per comparison

The trace is found at --trace, else $TRIMTAB_TRACES/pollux-adaptdl/simulator/traces/philly.csv, else
../shared/traces/... beside the project. Only summary statistics leave this script, never trace rows."""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

TRACE_RELPATH = Path("pollux-adaptdl/simulator/traces/philly.csv")
DAY_S = 86_400
# The same constants as workload.py; kept here (not imported) so the tables can be built before that module exists.
MAX_DURATION_S = 7 * DAY_S
SIZE_CLASS_MAX_GPUS = (1, 4, 8)  # classes: 1 | 2-4 | 5-8 | >=9
SIZE_CLASS_NAMES = ("1", "2-4", "5-8", "9+")
QUANTILE_P = (0.0, 0.001, 0.005, 0.01, *(round(0.025 * i, 3) for i in range(1, 40)), 0.99, 0.995, 0.999, 1.0)
TENANT_U_EDGES = (0.0, 0.5, 0.9, 0.99, 1.0)
REPORT_P = (0.1, 0.5, 0.9, 0.99)
GRID_P = tuple(round(0.01 * i, 2) for i in range(1, 100))  # for the worst-case quantile error


def default_trace_path() -> Path:
    """$TRIMTAB_TRACES if set, else the shared traces folder beside the project root."""
    root = os.environ.get("TRIMTAB_TRACES")
    base = Path(root) if root else Path(__file__).resolve().parents[1].parent / "shared" / "traces"
    return base / TRACE_RELPATH


def read_trace(path: Path) -> dict[str, np.ndarray]:
    """The columns we use: submit_s (naive timestamps read as UTC), duration_s, gpus, tenant (VC id string)."""
    submit_s, duration_s, gpus, tenant = [], [], [], []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            when = datetime.fromisoformat(row["timestamp"]).replace(tzinfo=UTC)
            submit_s.append(when.timestamp())
            duration_s.append(float(row["duration"]))
            gpus.append(int(row["num_gpus"]))
            tenant.append(row["cluster"])
    return {
        "submit_s": np.array(submit_s),
        "duration_s": np.array(duration_s),
        "gpus": np.array(gpus, dtype=np.int64),
        "tenant": np.array(tenant),
    }


def size_class(gpus: np.ndarray) -> np.ndarray:
    """0 for 1 GPU, 1 for 2-4, 2 for 5-8, 3 for 9 and more."""
    return np.searchsorted(np.array(SIZE_CLASS_MAX_GPUS), gpus, side="left")


def within_class_rank(duration_s: np.ndarray, cls: np.ndarray) -> np.ndarray:
    """Each job's mid-rank quantile (0..1) of its duration within its size class."""
    u = np.empty(len(duration_s))
    for k in range(len(SIZE_CLASS_NAMES)):
        mask = cls == k
        ranks = np.argsort(np.argsort(duration_s[mask], kind="stable"), kind="stable")
        u[mask] = (ranks + 0.5) / mask.sum()
    return u


def calibrate(trace: dict[str, np.ndarray]) -> dict[str, object]:
    """Every table workload.py embeds, from the trace columns."""
    gpus = trace["gpus"]
    duration_s = np.clip(trace["duration_s"], 1.0, MAX_DURATION_S)
    gpu_time_s = gpus * duration_s
    cls = size_class(gpus)

    sizes, size_jobs = np.unique(gpus, return_counts=True)

    quantiles = {
        name: [round(float(q)) for q in np.quantile(duration_s[cls == k], QUANTILE_P)]
        for k, name in enumerate(SIZE_CLASS_NAMES)
    }

    vcs, vc_index, vc_jobs = np.unique(trace["tenant"], return_inverse=True, return_counts=True)
    order = np.argsort(-vc_jobs, kind="stable")  # tenants in job-share order: team-a is the biggest
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    tenant = rank[vc_index]
    tenant_jobs = np.bincount(tenant, minlength=len(vcs))
    tenant_gpu_time = np.bincount(tenant, weights=gpu_time_s, minlength=len(vcs))

    u = within_class_rank(duration_s, cls)
    u_bin = np.searchsorted(np.array(TENANT_U_EDGES), u, side="right") - 1
    n_bins = len(TENANT_U_EDGES) - 1
    tenant_by_row = np.zeros((len(SIZE_CLASS_NAMES) * n_bins, len(vcs)), dtype=np.int64)
    np.add.at(tenant_by_row, (cls * n_bins + u_bin, tenant), 1)

    hour = ((trace["submit_s"] % DAY_S) // 3600).astype(int)
    hour_jobs = np.bincount(hour, minlength=24)
    day = (trace["submit_s"] // DAY_S).astype(np.int64)
    weekday = (day + 3) % 7  # 1970-01-01 was a Thursday; 0 = Monday
    covered_days = np.arange(day.min(), day.max() + 1)
    weekday_dates = np.bincount((covered_days + 3) % 7, minlength=7)
    weekday_rate = np.bincount(weekday, minlength=7) / weekday_dates

    return {
        "jobs": len(gpus),
        "span_days": round(float(np.ptp(trace["submit_s"])) / DAY_S, 2),
        "max_duration_s": MAX_DURATION_S,
        "jobs_over_cap": int((trace["duration_s"] > MAX_DURATION_S).sum()),
        "size_jobs": {int(s): int(c) for s, c in zip(sizes, size_jobs, strict=True)},
        "quantile_p": list(QUANTILE_P),
        "duration_quantiles_s": quantiles,
        "tenant_vc": [str(v) for v in vcs[order]],  # the trace's VC ids behind team-a, team-b, ...
        "tenant_jobs": tenant_jobs.tolist(),
        "tenant_gpu_time_share": [round(float(x), 4) for x in tenant_gpu_time / tenant_gpu_time.sum()],
        "tenant_u_edges": list(TENANT_U_EDGES),
        "tenant_jobs_by_class_and_u": tenant_by_row.tolist(),
        "hour_rate": [round(float(x), 3) for x in hour_jobs / hour_jobs.mean()],
        "weekday_rate": [round(float(x), 3) for x in weekday_rate / weekday_rate.mean()],
        "mean_gpu_time_s": round(float(gpu_time_s.mean())),
    }


def lognormal_quantiles(duration_s: np.ndarray, p: tuple[float, ...]) -> list[float]:
    """Quantiles of the log-normal fitted by moments of log(duration), capped like the generator: the alternative
    we compared the quantile tables against."""
    from statistics import NormalDist

    logs = np.log(duration_s)
    fit = NormalDist(float(logs.mean()), float(logs.std()))
    return [max(1, round(min(float(np.exp(fit.inv_cdf(q))), MAX_DURATION_S))) for q in p]


def worst_log10_gap(a_s: np.ndarray | list[float], b_s: np.ndarray) -> float:
    """The largest |log10 a - log10 b| over matching quantiles: a worst-case ratio, 0.1 being about 26%."""
    return round(float(np.abs(np.log10(np.asarray(a_s, dtype=float)) - np.log10(b_s)).max()), 3)


def check(trace: dict[str, np.ndarray], jobs: int, seed: int) -> list[dict[str, object]]:
    """Trace vs generator (cluster big enough for every size) vs a per-class log-normal, at REPORT_P."""
    from trimtab.sim.workload import TENANTS, synthetic

    sample = synthetic(jobs=jobs, seed=seed, cluster_gpus=128)
    gen_gpus = np.array([j.gpus for j in sample])
    gen_duration_s = np.array([j.duration_s for j in sample])
    duration_s = np.clip(trace["duration_s"], 1.0, MAX_DURATION_S)
    cls, gen_cls = size_class(trace["gpus"]), size_class(gen_gpus)
    lines: list[dict[str, object]] = []
    for k, name in [(None, "all"), *enumerate(SIZE_CLASS_NAMES)]:
        mask = np.ones(len(cls), bool) if k is None else cls == k
        gen_mask = np.ones(len(gen_cls), bool) if k is None else gen_cls == k
        trace_grid = np.quantile(duration_s[mask], GRID_P)
        lines.append({
            "class": name,
            "p": list(REPORT_P),
            "trace_jobs": int(mask.sum()),
            "trace_s": [round(float(q)) for q in np.quantile(duration_s[mask], REPORT_P)],
            "generator_jobs": int(gen_mask.sum()),
            "generator_s": [round(float(q)) for q in np.quantile(gen_duration_s[gen_mask], REPORT_P)],
            "lognormal_s": lognormal_quantiles(duration_s[mask], REPORT_P),
            "max_log10_error_p01_p99": worst_log10_gap(np.quantile(gen_duration_s[gen_mask], GRID_P), trace_grid),
            "lognormal_max_log10_error_p01_p99": worst_log10_gap(lognormal_quantiles(duration_s[mask], GRID_P),
                                                                 trace_grid),
        })  # fmt: skip
    sizes = sorted(set(trace["gpus"].tolist()))
    lines.append({
        "gpus": sizes,
        "trace_share": [round(float(np.mean(trace["gpus"] == g)), 5) for g in sizes],
        "generator_share": [round(float(np.mean(gen_gpus == g)), 5) for g in sizes],
    })  # fmt: skip
    gen_tenant = np.array([TENANTS.index(j.tenant) for j in sample])
    gen_work = gen_gpus * gen_duration_s
    lines.append({
        "tenant_job_share": [round(float(x), 4) for x in np.bincount(gen_tenant, minlength=15) / len(sample)],
        "tenant_gpu_time_share": [
            round(float(x), 4) for x in np.bincount(gen_tenant, gen_work, minlength=15) / gen_work.sum()
        ],
        "mean_gpu_time_s": round(float(gen_work.mean())),
    })  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=None, help="path to philly.csv")
    parser.add_argument("--check", action="store_true", help="compare generator and trace quantiles")
    parser.add_argument("--jobs", type=int, default=200_000, help="generator sample size for --check")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    path = args.trace or default_trace_path()
    if not path.is_file():
        print(f"trace not found: {path} (set --trace or TRIMTAB_TRACES)", file=sys.stderr)
        return 2
    trace = read_trace(path)
    if args.check:
        for line in check(trace, args.jobs, args.seed):
            print(json.dumps(line))
    else:
        print(json.dumps(calibrate(trace), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
