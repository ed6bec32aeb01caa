"""Benchmark: one seed of the FGD paper's packing experiment on openb (130% of GPU capacity), one policy.

Prints one JSON line: wall time, pods, failed pods, allocation ratio at 100% and at the end. With
`--write-variants DIR` it instead writes the pod lists derived from the default one that docs/placement.md
measures steady-pack on (Alibaba's own variants are not in the shared traces), always the same files."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from trimtab.formats.cluster import load_cluster
from trimtab.formats.traces import load_trace
from trimtab.sim.packing import run_packing, write_openb_variants

TRACES = Path(os.environ.get("TRIMTAB_TRACES", Path(__file__).resolve().parents[2] / "shared" / "traces"))
CSV = TRACES / "alibaba-gpu-v2023-openb" / "cluster-trace-gpu-v2023" / "csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--policy", default="fgd")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--inflate", type=float, default=1.3)
    parser.add_argument("--pods", default=str(CSV / "openb_pod_list_default.csv"))
    parser.add_argument("--nodes", default=str(CSV / "openb_node_list_all_node.csv"))
    parser.add_argument("--write-variants", metavar="DIR", help="write the derived pod lists into DIR and stop")
    args = parser.parse_args()
    if args.write_variants:
        for path in write_openb_variants(Path(args.pods), Path(args.nodes), Path(args.write_variants)):
            print(path)
        return
    t0 = time.perf_counter()
    nodes = load_cluster(f"openb:{args.nodes}")
    pods = load_trace(f"openb:{args.pods}")
    load_s = time.perf_counter() - t0
    run = run_packing(nodes, pods, args.policy, inflate=args.inflate, seed=args.seed)
    top = round(args.inflate * 100)
    print(json.dumps({"benchmark": "packing_openb", "policy": args.policy, "seed": args.seed,
                      "inflate": args.inflate, "pods": run["pods"], "failed": run["failed"],
                      "alloc_pct_100": run["alloc_pct"][100] if top >= 100 else None,
                      f"alloc_pct_{top}": run["alloc_pct"][top], "load_s": round(load_s, 3),
                      "run_s": run["wall_s"], "total_s": round(time.perf_counter() - t0, 3)}))


if __name__ == "__main__":
    main()
