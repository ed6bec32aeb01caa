"""Benchmark of the command line's start-up: median wall time of `trimtab --help` and `trimtab jobs --help` against
a bare `python -c pass`, over N runs each. Prints one JSON line per command. Target: under 0.3 s for both.

Usage (from the project root):
    .venv/bin/python benchmarks/cli_startup.py [--runs 20]

The commands run in rounds (one of each per round) so that a change of load on the machine touches all of them
alike. `trimtab` is the console script beside the interpreter, else `python -m trimtab.cli`; PYTHONPATH decides
which sources it runs."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_S = 0.3


def trimtab_command() -> list[str]:
    script = Path(sys.executable).parent / "trimtab"
    return [str(script)] if script.exists() else [sys.executable, "-m", "trimtab.cli"]


def wall_s(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    trimtab = trimtab_command()
    commands = {"python -c pass": [sys.executable, "-c", "pass"], "trimtab --help": [*trimtab, "--help"],
                "trimtab jobs --help": [*trimtab, "jobs", "--help"]}
    for argv in commands.values():  # warm the file cache and the bytecode before timing
        wall_s(argv)
    times_s: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.runs):
        for name, argv in commands.items():
            times_s[name].append(wall_s(argv))
    python_s = statistics.median(times_s["python -c pass"])
    for name, samples in times_s.items():
        median_s = statistics.median(samples)
        print(json.dumps({"benchmark": "cli_startup", "command": name, "runs": args.runs,
                          "median_s": round(median_s, 3), "min_s": round(min(samples), 3),
                          "ratio_to_python": round(median_s / python_s, 1),
                          "under_target": median_s < TARGET_S if name.startswith("trimtab") else None,
                          "pythonpath": os.environ.get("PYTHONPATH", ""), "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
