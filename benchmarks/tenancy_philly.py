"""Benchmark: Philly's virtual clusters as tenants. Replays the Philly-derived list (all of it, or the first --jobs)
with each VC a queue of weight 1 under fifo-backfill, quota queues without and with borrowing, drf with reclaim, and
tenants, in parallel on the local cores. Prints one JSON line per policy: fairness, average wait, the VCs' average
waits (min / median / max), preemptions, and the wall time of all runs together."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from trimtab.formats.cluster import load_cluster
from trimtab.formats.traces import load_trace
from trimtab.model import Job
from trimtab.profile import Profile
from trimtab.sim.compare import compare
from trimtab.sim.run import SimConfig

DEFAULT_TRACE = Path(__file__).resolve().parents[2] / "shared/traces/pollux-adaptdl/simulator/traces/philly.csv"


def vc_profiles(jobs: list[Job]) -> list[Profile]:
    """The policies compared, each VC (tenant) of `jobs` a queue of weight 1 (equal shares)."""
    queues = [{"name": vc, "weight": 1} for vc in sorted({j.tenant for j in jobs})]
    return [
        Profile.load("fifo-backfill"),
        Profile(name="queues-no-borrow", admit=["quota"], order=["fifo"],
                args={"quota": {"queues": queues, "borrowing": False}}),
        Profile(name="queues-borrow", admit=["quota"], order=["fifo"],
                args={"quota": {"queues": queues, "borrowing": True}}),
        Profile.load("drf").with_args({"quota": {"queues": queues}}),
        Profile.load("tenants").with_args({"quota": {"queues": queues}}),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", default=os.environ.get("TRIMTAB_PHILLY", str(DEFAULT_TRACE)))
    parser.add_argument("--jobs", type=int, default=None, help="the first N jobs (default: all)")
    parser.add_argument("--cluster", default="7r8x8")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    jobs = load_trace(f"philly:{args.trace}")[:args.jobs]
    t0 = time.perf_counter()
    runs = compare(load_cluster(args.cluster), jobs, vc_profiles(jobs), SimConfig(), workers=args.workers)
    total_s = time.perf_counter() - t0
    for name, run in runs.items():
        s = run["summary"]
        waits = np.array([t["avg_wait_s"] for t in s["tenants"].values() if t["avg_wait_s"] is not None])
        print(json.dumps({
            "bench": "tenancy_philly", "policy": name, "jobs": len(jobs), "cluster": args.cluster, "vcs": len(waits),
            "fairness_jain": s["fairness_jain"], "avg_wait_s": round(s["avg_wait_s"]),
            "vc_wait_s": [round(float(w)) for w in (waits.min(), np.median(waits), waits.max())],
            "preemptions": s["preemptions"], "jobs_lost": s["jobs_lost"], "total_s": round(total_s, 1)}))


if __name__ == "__main__":
    main()
