"""Benchmark: the simulator's speed figures (issue 20) for this tree and for a baseline commit, in one run.

Each figure runs in a fresh child process, once per tree and repeat, the two trees alternating (the order swaps
every repeat) so that load on a shared machine hits both alike; the best of the repeats counts. The baseline is
checked out with `git worktree add` into a temporary folder (removed at the end) and run with PYTHONPATH at its
`src`. Prints one JSON line per figure: both values, the ratio (how many times faster this tree is), the CPU
seconds of each tree's child process (start-up and loading included, forked workers included: on a machine shared
with other work they vary far less than wall time; both trees are byte-compiled first, so no child compiles its
sources), both peak RSS and whether the two trees decided the same (average JCT and preemptions, or the packing
result).

Figures (the default sizes are smaller than the issue's, so that a run takes minutes on a busy 2-core machine;
`--full` gives the issue's sizes):
  philly   las on 56x8 over the Philly-derived list (first --philly-jobs jobs; all 82,247 with --full), the run
           JSON written as `trimtab simulate --out` writes it
  compare  steady, fifo-backfill, sjf, srtf, las, drf, qssf on 7r8x8 with node faults (first --compare-jobs)
  packing  one openb seed at 130% under fgd and under steady-pack
  scale    benchmarks/scale.py bulk (placements/s) and incremental (largest cycle) at --scale-nodes x 8"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TRACES = Path(os.environ.get("TRIMTAB_TRACES", HERE.parents[1] / "shared" / "traces"))
PHILLY = TRACES / "pollux-adaptdl" / "simulator" / "traces" / "philly.csv"
OPENB = TRACES / "alibaba-gpu-v2023-openb" / "cluster-trace-gpu-v2023" / "csv"
COMPARE_POLICIES = "steady,fifo-backfill,sjf,srtf,las,drf,qssf"
FAULTS = "node-mtbf=7d,node-mttr=2h,job-fail=0.02,seed=1"


# ------------------------------------------------------------------------------------------- children (one tree)

def _philly(jobs: int) -> dict[str, Any]:
    from trimtab.cli.common import write_json
    from trimtab.formats.cluster import load_cluster
    from trimtab.formats.traces import load_trace
    from trimtab.sim.run import SimConfig, simulate

    t0 = time.perf_counter()
    trace = load_trace(f"philly:{PHILLY}")[:jobs or None]
    run = simulate(load_cluster("56x8"), trace, "las", SimConfig())
    with tempfile.TemporaryDirectory() as out:
        write_json(run, Path(out) / "run.json")  # as `trimtab simulate --out` writes it
    s = run["summary"]
    return {"value": time.perf_counter() - t0, "decisions": [s["avg_jct_s"], s["preemptions"]]}


def _compare(jobs: int) -> dict[str, Any]:
    from trimtab.formats.cluster import load_cluster
    from trimtab.formats.traces import load_trace
    from trimtab.sim.compare import compare
    from trimtab.sim.run import SimConfig

    t0 = time.perf_counter()
    trace = load_trace(f"philly:{PHILLY}")[:jobs or None]
    runs = compare(load_cluster("7r8x8"), trace, COMPARE_POLICIES.split(","), SimConfig(faults=FAULTS))
    decisions = {name: [run["summary"]["avg_jct_s"], run["summary"]["preemptions"]] for name, run in runs.items()}
    return {"value": time.perf_counter() - t0, "decisions": decisions}


def _packing(policy: str) -> dict[str, Any]:
    from trimtab.formats.cluster import load_cluster
    from trimtab.formats.traces import load_trace
    from trimtab.sim.packing import run_packing

    nodes = load_cluster(f"openb:{OPENB / 'openb_node_list_all_node.csv'}")
    pods = load_trace(f"openb:{OPENB / 'openb_pod_list_default.csv'}")
    run = run_packing(nodes, pods, policy, inflate=1.3, seed=42)
    return {"value": run["wall_s"], "decisions": [run["failed"], run["alloc_pct"][130]]}


def _scale(which: str, nodes: int, jobs: int, waiting: int, events: int) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    import scale  # this tree's benchmark, run on the tree PYTHONPATH names

    if which == "bulk":
        out = scale.bulk(nodes, jobs, "las", 0)
        return {"value": out["placements_per_s"], "decisions": out["placed"]}
    out = scale.incremental(nodes, waiting, events, "las", 0)
    return {"value": out["cycle_max_ms"], "decisions": None}


def _child(args: argparse.Namespace) -> None:
    name, arg = args.child
    if name == "philly":
        out = _philly(int(arg))
    elif name == "compare":
        out = _compare(int(arg))
    elif name == "packing":
        out = _packing(arg)
    else:
        out = _scale(name, *(int(x) for x in arg.split(",")))
    print(json.dumps(out))


# ------------------------------------------------------------------------------------------- parent

def _measure(tree: Path, child: list[str]) -> dict[str, Any]:
    """One child run on `tree`: its answer, its CPU seconds and its peak RSS (of the child and the workers it
    waited for, through wait4)."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # `_compile` wrote the bytecode: the child loads it, not the sources
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", *child], env=env,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: child {' '.join(child)} failed with exit code {proc.returncode}")
    out = json.loads(output.strip().splitlines()[-1])
    out["rss_mib"] = round(usage.ru_maxrss / 1024)
    out["cpu_s"] = usage.ru_utime + usage.ru_stime
    return out


def _compile(tree: Path) -> None:
    """Byte-compile a tree's sources once, so that each child's CPU seconds count the run rather than compiling
    every module (which a child does when the environment forbids writing bytecode)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "src")], check=True, stdout=subprocess.DEVNULL)


def _figure(name: str, unit: str, higher_is_better: bool, child: list[str], trees: dict[str, Path],
            repeat: int) -> dict[str, Any]:
    results: dict[str, list[dict[str, Any]]] = {"baseline": [], "current": []}
    for rep in range(repeat):
        order = ["baseline", "current"] if rep % 2 == 0 else ["current", "baseline"]
        for which in order:
            results[which].append(_measure(trees[which], child))
    pick = max if higher_is_better else min
    best = {which: pick(runs, key=lambda r: r["value"]) for which, runs in results.items()}
    base, cur = best["baseline"]["value"], best["current"]["value"]
    ratio = cur / base if higher_is_better else base / cur
    cpu = {which: min(r["cpu_s"] for r in runs) for which, runs in results.items()}
    return {"figure": name, "unit": unit, "baseline": round(base, 3), "current": round(cur, 3),
            "speedup": round(ratio, 2), "cpu_s": [round(cpu["baseline"], 2), round(cpu["current"], 2)],
            "cpu_speedup": round(cpu["baseline"] / cpu["current"], 2),
            "rss_mib": [best["baseline"]["rss_mib"], best["current"]["rss_mib"]],
            "same_decisions": best["baseline"]["decisions"] == best["current"]["decisions"],
            "repeat": repeat}


def _figures(args: argparse.Namespace) -> list[tuple[str, str, bool, list[str]]]:
    full = args.full
    philly_jobs = 0 if full else args.philly_jobs
    compare_jobs = 0 if full else args.compare_jobs
    nodes, jobs, waiting, events = (5000, 40_000, 10_000, 10_000) if full else (
        args.scale_nodes, 8 * args.scale_nodes, 2 * args.scale_nodes, 2 * args.scale_nodes)
    sizes = f"{nodes},{jobs},{waiting},{events}"
    table = {
        "philly": [(f"philly las 56x8, {philly_jobs or 'all'} jobs", "s", False, ["philly", str(philly_jobs)])],
        "compare": [(f"compare 7 policies 7r8x8 faults, {compare_jobs or 'all'} jobs", "s", False,
                     ["compare", str(compare_jobs)])],
        "packing": [(f"packing openb 130% {p}", "s", False, ["packing", p]) for p in ("fgd", "steady-pack")],
        "scale": [(f"scale bulk {nodes}x8", "placements/s", True, ["bulk", sizes]),
                  (f"scale incremental {nodes}x8 cycle max", "ms", False, ["incremental", sizes])],
    }
    return [f for name in args.figures.split(",") for f in table[name]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="087a493", help="commit to compare with (default: before the speed work)")
    parser.add_argument("--figures", default="philly,compare,packing,scale")
    parser.add_argument("--repeat", type=int, default=1, help="runs per tree and figure; the best counts")
    parser.add_argument("--full", action="store_true", help="the issue's sizes (82,247 jobs, 5,000 nodes)")
    parser.add_argument("--philly-jobs", type=int, default=20_000)
    parser.add_argument("--compare-jobs", type=int, default=5_000)
    parser.add_argument("--scale-nodes", type=int, default=1_000)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    repo = HERE.parent
    with tempfile.TemporaryDirectory(prefix="trimtab-baseline-") as tmp:
        base = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", "--quiet", str(base), args.baseline],
                       check=True)
        try:
            trees = {"baseline": base, "current": repo}
            for tree in trees.values():
                _compile(tree)
            for name, unit, higher, child in _figures(args):
                line = _figure(name, unit, higher, child, trees, args.repeat)
                print(json.dumps({**line, "baseline_commit": args.baseline}), flush=True)
        finally:
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(base)], check=True)


if __name__ == "__main__":
    main()
