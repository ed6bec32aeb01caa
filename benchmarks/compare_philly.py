"""Benchmark: `trimtab compare` of several policies on the whole Philly-derived list (82,247 jobs) on 7r8x8,
run in parallel on the local cores. Prints one JSON line with the wall time and each policy's key metrics."""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

from trimtab.formats.cluster import load_cluster
from trimtab.formats.traces import load_trace
from trimtab.sim.compare import compare
from trimtab.sim.run import SimConfig

DEFAULT_TRACE = Path(__file__).resolve().parents[2] / "shared/traces/pollux-adaptdl/simulator/traces/philly.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", default=os.environ.get("TRIMTAB_PHILLY", str(DEFAULT_TRACE)))
    parser.add_argument("--cluster", default="7r8x8")
    parser.add_argument("--policies", default="steady,fifo-backfill,sjf,srtf,las,qssf")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    t0 = time.perf_counter()
    jobs = load_trace(f"philly:{args.trace}")
    runs = compare(load_cluster(args.cluster), jobs, args.policies.split(","), SimConfig(), workers=args.workers)
    wall = time.perf_counter() - t0
    keys = ("jobs_lost", "avg_jct_s", "p99_jct_s", "goodput_cv", "starvation_rate")
    print(json.dumps({
        "bench": "compare_philly", "cluster": args.cluster, "jobs": len(jobs), "policies": len(runs),
        "workers": args.workers or os.cpu_count(), "total_s": round(wall, 1),
        "peak_rss_mib_parent": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "peak_rss_mib_child": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024),
        "summary": {name: {k: run["summary"][k] for k in keys} for name, run in runs.items()},
    }))


if __name__ == "__main__":
    main()
