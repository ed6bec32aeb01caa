"""Benchmark: priority policies on the synthetic workload with three priority classes (issue table in
docs/multitenant.md). Runs each policy (or reads run files written by `trimtab compare --out-dir`) and prints one
JSON line per policy: preemptions, evicted GPUs per needed GPU, and the waits of each priority class."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from trimtab.cli.sim import load_inputs
from trimtab.sim.compare import compare
from trimtab.sim.run import SimConfig

WORKLOAD = "synthetic:jobs=20000,seed=3,load=1.1,priorities=0.1:1000,0.3:100"
FAULTS = "node-mtbf=7d,node-mttr=2h,seed=1"


def class_waits(run: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Average and p99 wait (first start - submit) of the started jobs of each priority class."""
    waits: dict[int, list[float]] = {}
    for rec in run["jobs"]:
        if rec["runs"]:
            waits.setdefault(rec["priority"], []).append(rec["runs"][0]["start"] - rec["submit"])
    return {str(p): {"jobs": len(w), "avg_wait_s": round(float(np.mean(w)), 1),
                     "p99_wait_s": round(float(np.percentile(w, 99)), 1)} for p, w in sorted(waits.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cluster", default="7r8x8")
    parser.add_argument("--workload", default=WORKLOAD)
    parser.add_argument("--faults", default=FAULTS)
    parser.add_argument("--policies", default="priority,tenants,steady")
    parser.add_argument("--runs-dir", type=Path, help="read <policy>.json from here instead of running")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    policies = args.policies.split(",")
    if args.runs_dir:
        runs = {p: json.loads((args.runs_dir / f"{p}.json").read_text()) for p in policies}
    else:
        nodes, jobs = load_inputs(args.cluster, args.workload, seed=0)  # as `trimtab compare` reads them
        config = SimConfig(faults=args.faults, timing=False)
        runs = compare(nodes, jobs, policies, config, workers=args.workers)
    for policy, run in runs.items():
        s = run["summary"]
        print(json.dumps({"bench": "priority_classes", "policy": policy, "workload": args.workload,
                          "preemptions": s["preemptions"],
                          "evicted_gpus_per_needed_gpu": s.get("evicted_gpus_per_needed_gpu"),
                          "avg_jct_s": s["avg_jct_s"], "classes": class_waits(run)}))


if __name__ == "__main__":
    main()
