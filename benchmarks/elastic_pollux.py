"""Benchmark: elastic jobs against fixed sizes (docs/elastic.md). Pollux's 8 workloads (`workloads/`, and
`workloads-2.0/` at twice the load) on 16 x 4 GPUs under `las` with the tuned fixed sizes, and under `steady` and
`elastic` with elastic jobs; then the Philly list on 7r8x8 with every other job elastic between half and twice its
GPUs (flat scaling), `steady` on the fixed list against `steady` and `elastic` on the elastic one. Prints one JSON
line per run, one per policy and workload set with the mean of the average JCTs, beside the published means."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trimtab.formats.cluster import load_cluster
from trimtab.formats.traces import load_trace
from trimtab.model import Elastic, Job, LinearScaling
from trimtab.sim.parallel import parallel_map
from trimtab.sim.run import SimConfig, simulate

DEFAULT_TRACES = Path(__file__).resolve().parents[2] / "shared/traces"
# Mean of the 8 per-workload average JCTs (s) in the authors' raw results (results-jobload/<policy>-<load>/).
PUBLISHED = ("pollux", "tiresias", "optimus")
# Pollux's simulator: a preempted job keeps its progress (checkpoint_s 0) and every restart costs 30 s.
POLLUX_CONFIG = SimConfig(checkpoint_s=0, restart_s=30, timing=False)
PHILLY_CONFIG = SimConfig(timing=False)
PHILLY_RESIZE_S = 30.0
# Pollux runs: (policy, workload options of the pollux: reader); the elastic jobs ask for half their tuned GPUs
POLLUX_RUNS = (("las", ""), ("steady", ",elastic,start=0.5"), ("elastic", ",elastic,start=0.5"),
               ("elastic", ",elastic"))


def elastic_half(jobs: Sequence[Job]) -> list[Job]:
    """Every other job (in list order) elastic between half (rounded up) and twice its tasks, with the flat
    scaling model (throughput proportional to GPUs) and a 30 s resize; it asks for its own tasks."""
    out = []
    for i, job in enumerate(jobs):
        if i % 2:
            out.append(job)
            continue
        out.append(dataclasses.replace(job, scaling=LinearScaling(),
                                       elastic=Elastic((job.tasks + 1) // 2, 2 * job.tasks, PHILLY_RESIZE_S)))
    return out


def _pollux_run(traces: Path, item: tuple[str, str, str, int]) -> dict[str, Any]:
    folder, policy, options, number = item
    path = traces / "pollux-adaptdl/simulator" / folder / f"workload-{number}.csv"
    jobs = load_trace(f"pollux:{path}{options}")
    t0 = time.perf_counter()
    run = simulate(load_cluster("16x4"), jobs, policy, POLLUX_CONFIG)
    return _line("pollux", folder, policy, options, f"workload-{number}", run, time.perf_counter() - t0)


def _philly_run(traces: Path, item: tuple[str, bool, int]) -> dict[str, Any]:
    policy, elastic, limit = item
    jobs = load_trace(f"philly:{traces / 'pollux-adaptdl/simulator/traces/philly.csv'}")
    jobs = jobs[:limit] if limit else jobs
    t0 = time.perf_counter()
    run = simulate(load_cluster("7r8x8"), elastic_half(jobs) if elastic else jobs, policy, PHILLY_CONFIG)
    return _line("philly", "7r8x8", policy, "half elastic" if elastic else "fixed", f"{len(jobs)} jobs", run,
                 time.perf_counter() - t0)


def _line(bench: str, folder: str, policy: str, jobs: str, workload: str, run: dict[str, Any],
          wall_s: float) -> dict[str, Any]:
    summary = run["summary"]
    resizes = sum(r["outcome"] == "resized" for job in run["jobs"] for r in job["runs"])
    return {"bench": bench, "set": folder, "policy": policy, "jobs": jobs.strip(",") or "fixed",
            "workload": workload, "avg_jct_s": round(summary["avg_jct_s"]), "p99_jct_s": round(summary["p99_jct_s"]),
            "backlogged_util": summary["backlogged_util"], "preemptions": summary["preemptions"],
            "resizes": resizes, "wall_s": round(wall_s, 1)}


def _published(traces: Path, folder: str) -> dict[str, float]:
    load = "1.0" if folder == "workloads" else folder.removeprefix("workloads-")
    results = traces / "pollux-adaptdl/simulator/results-jobload"
    return {name: round(json.loads((results / f"{name}-{load}/summary.json").read_text())["mean"])
            for name in PUBLISHED}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--traces", type=Path, default=Path(os.environ.get("TRIMTAB_TRACES", DEFAULT_TRACES)))
    parser.add_argument("--part", choices=("pollux", "philly", "all"), default="all")
    parser.add_argument("--philly-jobs", type=int, default=0, help="The first N Philly jobs (0: all).")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    if args.part in ("pollux", "all"):
        items = [(folder, policy, options, n) for folder in ("workloads", "workloads-2.0")
                 for policy, options in POLLUX_RUNS for n in range(1, 9)]
        lines = parallel_map(_pollux_run, items, (args.traces,), workers=args.workers)
        for line in lines:
            print(json.dumps(line), flush=True)
        for folder in ("workloads", "workloads-2.0"):
            for policy, options in POLLUX_RUNS:
                jcts = [line["avg_jct_s"] for line in lines if line["set"] == folder and line["policy"] == policy
                        and line["jobs"] == (options.strip(",") or "fixed")]
                print(json.dumps({"bench": "pollux-mean", "set": folder, "policy": policy,
                                  "jobs": options.strip(",") or "fixed", "mean_avg_jct_s": round(sum(jcts) / 8),
                                  "published_mean_s": _published(args.traces, folder)}), flush=True)
    if args.part in ("philly", "all"):
        items = [("steady", False, args.philly_jobs), ("steady", True, args.philly_jobs),
                 ("elastic", True, args.philly_jobs)]
        for line in parallel_map(_philly_run, items, (args.traces,), workers=args.workers):
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
