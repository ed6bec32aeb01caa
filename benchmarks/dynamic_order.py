"""Benchmark: a dynamic order kept by groups against the whole queue sorted every cycle. Replays the first N jobs
of the Philly-derived list (each VC a queue of weight 1) on 56x8 under `drf` and `tenants`, once as shipped (drf
names its key group: one key per queue and cycle) and once with drf's `key_group` taken away (every waiting job's
key computed and the queue sorted every cycle). Both ask a queue's key again after each start or stop within a
cycle. Prints one JSON line per policy: both wall times, their ratio, whether every job's runs (start, end, nodes,
outcome) are the same both ways (they must be), and whether the whole run records are: the reasons jobs wait may
differ, because the walk by groups also meets the jobs a preemption requeued during the cycle (they get a status in
it) while the sorted queue is fixed when the cycle begins."""

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


def _digest(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _run(profile: Profile, jobs: list, cluster: str) -> tuple[float, str, str]:
    """Wall time, the digest of every job's runs, the digest of the whole run record."""
    t0 = time.perf_counter()
    run = simulate(load_cluster(cluster), jobs, profile, SimConfig(timing=False))
    wall = time.perf_counter() - t0
    return wall, _digest([(job["id"], job["runs"]) for job in run["jobs"]]), _digest(run)


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
        by_group_s, *by_group = _run(profile, jobs, args.cluster)
        Drf.key_group = Plugin.key_group  # type: ignore[method-assign]  # no group: the whole queue every cycle
        try:
            whole_s, *whole = _run(profile, jobs, args.cluster)
        finally:
            Drf.key_group = grouped  # type: ignore[method-assign]
        print(json.dumps({"bench": "dynamic_order", "policy": name, "jobs": len(jobs), "cluster": args.cluster,
                          "by_group_s": round(by_group_s, 1), "whole_queue_s": round(whole_s, 1),
                          "speedup": round(whole_s / by_group_s, 2), "same_runs": by_group[0] == whole[0],
                          "identical": by_group[1] == whole[1]}), flush=True)


if __name__ == "__main__":
    main()
