"""Benchmark: replay the whole Philly-derived job list (82,247 jobs) on 56x8 GPUs under las, as
`trimtab simulate --cluster 56x8 --workload .../philly.csv --policy las` does. Prints one JSON line."""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
from pathlib import Path

from trimtab.formats.cluster import load_cluster
from trimtab.formats.traces import load_trace
from trimtab.sim.run import SimConfig, simulate

DEFAULT_TRACE = Path(__file__).resolve().parents[2] / "shared/traces/pollux-adaptdl/simulator/traces/philly.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", default=os.environ.get("TRIMTAB_PHILLY", str(DEFAULT_TRACE)))
    parser.add_argument("--cluster", default="56x8")
    parser.add_argument("--policy", default="las")
    args = parser.parse_args()
    t0 = time.perf_counter()
    jobs = load_trace(f"philly:{args.trace}")
    t1 = time.perf_counter()
    run = simulate(load_cluster(args.cluster), jobs, args.policy, SimConfig())
    t2 = time.perf_counter()
    s = run["summary"]
    print(json.dumps({
        "bench": "replay_philly", "policy": args.policy, "cluster": args.cluster, "jobs": len(jobs),
        "jobs_lost": s["jobs_lost"], "load_s": round(t1 - t0, 2), "simulate_s": round(t2 - t1, 2),
        "total_s": round(t2 - t0, 2), "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "avg_jct_s": s["avg_jct_s"], "preemptions": s["preemptions"], "python": platform.python_version(),
    }))


if __name__ == "__main__":
    main()
