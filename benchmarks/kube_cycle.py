"""One `trimtab kube` cycle at scale against a fake API (no cluster): how long a cycle takes to read the
informers' objects, decide and hand its bindings to the writers, with --nodes 8-GPU nodes, --bound one-GPU pods
already bound and --arrivals new one-GPU pods pending in each measured cycle (the steady state of a burst: most
pods bound, a few new ones per cycle). One JSON line: the median and worst of --cycles cycles.

Usage (from the project root):
    .venv/bin/python benchmarks/kube_cycle.py [--nodes 1000 --bound 6000 --arrivals 100 --cycles 5]"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "kube"))
from kube_objects import gpu_node, gpu_pod
from test_kube_cycle import FakeApi

from trimtab.kube.live import KubeScheduler
from trimtab.profile import Profile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--bound", type=int, default=6000)
    parser.add_argument("--arrivals", type=int, default=100)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--policy", default="reserve")
    args = parser.parse_args()
    sched = KubeScheduler(FakeApi(), Profile.load(args.policy))  # type: ignore[arg-type]
    sched.informers["nodes"].load([gpu_node(f"n{i}", 8) for i in range(args.nodes)])
    pods = [gpu_pod(f"b{i}", 1, node=f"n{i % args.nodes}") for i in range(args.bound)]
    sched.informers["pods"].load(pods)
    sched.cycle(0.0)  # the first cycle reads every pod
    seconds = []
    for cycle in range(args.cycles):
        pods += [gpu_pod(f"p{cycle}-{i}", 1) for i in range(args.arrivals)]
        sched.informers["pods"].load(pods)  # the bound ones stay pending in the informer: assumed, as live
        started = time.perf_counter()
        sched.cycle(cycle + 1.0, wait=False)
        seconds.append(time.perf_counter() - started)
    sched.cycle(args.cycles + 1.0)  # the last writes, booked
    print(json.dumps({"bench": "kube_cycle", "nodes": args.nodes, "bound": args.bound, "arrivals": args.arrivals,
                      "policy": args.policy, "cycle_s_median": round(statistics.median(seconds), 3),
                      "cycle_s_max": round(max(seconds), 3), "bound_by_trimtab": len(sched.api.bound)}))


if __name__ == "__main__":
    main()
