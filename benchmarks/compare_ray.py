"""Benchmark: `compare` as Ray tasks against one local process. Starts a head-only Ray cluster on this machine with
`--cpus` CPUs (`ray start`), runs the same policies on the same workload in one process and then on Ray, checks the
run records are identical (timings off) and prints one JSON line with both wall times."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trimtab.cli.sim import load_inputs
from trimtab.sim.compare import compare
from trimtab.sim.run import SimConfig


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cluster", default="8x8")
    parser.add_argument("--workload", default="synthetic:jobs=3000,seed=1")
    parser.add_argument("--policies", default="fifo-backfill,sjf,las,priority")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="CPUs the Ray head offers")
    args = parser.parse_args()
    nodes, jobs = load_inputs(args.cluster, args.workload, seed=0)
    policies = args.policies.split(",")
    config = SimConfig(timing=False)

    t0 = time.perf_counter()
    local = compare(nodes, jobs, policies, config, workers=1)
    local_s = time.perf_counter() - t0

    ray = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
    temp = tempfile.mkdtemp(prefix="tt-bench-ray-")
    port = _free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.Popen([ray, "start", "--head", "--port", str(port), "--num-cpus", str(args.cpus),
                             "--num-gpus", "0", "--temp-dir", temp, "--include-dashboard=false",
                             "--disable-usage-stats"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            start_new_session=True, env=env)
    try:
        if head.wait(timeout=120) != 0:
            raise SystemExit("ray start --head failed")
        t0 = time.perf_counter()
        on_ray = compare(nodes, jobs, policies, config, ray_address=f"127.0.0.1:{port}")
        ray_s = time.perf_counter() - t0
    finally:
        with contextlib.suppress(ProcessLookupError):  # the head's processes stay in its session
            os.killpg(head.pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)
    print(json.dumps({"bench": "compare_ray", "cluster": args.cluster, "workload": args.workload,
                      "jobs": len(jobs), "policies": len(policies), "ray_cpus": args.cpus,
                      "one_process_s": round(local_s, 1), "ray_s": round(ray_s, 1),
                      "speedup": round(local_s / ray_s, 2), "identical": local == on_ray}))


if __name__ == "__main__":
    main()
