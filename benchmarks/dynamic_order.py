"""Benchmark: a dynamic order kept by groups against the whole queue sorted every cycle. Replays the first N jobs
of the Philly-derived list (each VC a queue of weight 1) on 56x8 under `drf` and `tenants`, once as shipped (drf
names its key group: one key per queue and cycle) and once with drf's `key_group` taken away (every waiting job's
key computed and the queue sorted every cycle). Prints one JSON line per policy: both wall times, their ratio, and
whether the run records are identical (they must be)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path

from trimtab.formats.cluster import load_cluster
from trimtab.formats.traces import load_trace
from trimtab.plugins.tenancy import Drf
from trimtab.policy import Plugin
from trimtab.profile import Profile
from trimtab.sim.run import SimConfig, simulate

DEFAULT_TRACE = Path(__file__).resolve().parents[2] / "shared/traces/pollux-adaptdl/simulator/traces/philly.csv"


def _run(profile: Profile, jobs: list, cluster: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    run = simulate(load_cluster(cluster), jobs, profile, SimConfig(timing=False))
    wall = time.perf_counter() - t0
    return wall, hashlib.sha256(json.dumps(run, sort_keys=True, default=str).encode()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", default=os.environ.get("TRIMTAB_PHILLY", str(DEFAULT_TRACE)))
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--cluster", default="56x8")
    parser.add_argument("--policies", default="drf,tenants")
    args = parser.parse_args()
    jobs = load_trace(f"philly:{args.trace}")[:args.jobs]
    queues = [{"name": vc, "weight": 1} for vc in sorted({j.tenant for j in jobs})]
    grouped = Drf.key_group
    for name in args.policies.split(","):
        profile = Profile.load(name).with_args({"quota": {"queues": queues}})
        by_group_s, by_group = _run(profile, jobs, args.cluster)
        Drf.key_group = Plugin.key_group  # type: ignore[method-assign]  # no group: the whole queue every cycle
        try:
            whole_s, whole = _run(profile, jobs, args.cluster)
        finally:
            Drf.key_group = grouped  # type: ignore[method-assign]
        print(json.dumps({"bench": "dynamic_order", "policy": name, "jobs": len(jobs), "cluster": args.cluster,
                          "by_group_s": round(by_group_s, 1), "whole_queue_s": round(whole_s, 1),
                          "speedup": round(whole_s / by_group_s, 2), "identical": by_group == whole}), flush=True)


if __name__ == "__main__":
    main()
