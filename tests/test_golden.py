"""Golden runs: a fixed set of simulations whose run JSON (without wall-clock timing) must stay byte-identical.

A change of structure must not change a decision. When a change of behaviour is meant, rewrite the hashes with
`python tests/test_golden.py --write` and say in the commit which runs changed and why."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))  # builders, also when run as a script

from builders import TRACES
from trimtab.cli import app

HASHES = Path(__file__).with_name("golden_hashes.json")
DOCS = Path(__file__).resolve().parents[1] / "docs"
TIRESIAS = "tiresias/simulator/60_job.csv"
OPENB = "alibaba-gpu-v2023-openb/cluster-trace-gpu-v2023/csv/"
FAULTS = "node-mtbf=7d,node-mttr=2h,job-fail=0.02,seed=1"
SYNTHETIC = "synthetic:jobs=1500,seed=7,load=1.1"

# name -> (trace the run needs or None, simulate arguments with {traces} and {examples} to fill in)
CASES: dict[str, tuple[str | None, list[str]]] = {
    "tiresias-fifo": (TIRESIAS, ["--cluster", "1x8", "--workload", "tiresias:{traces}/" + TIRESIAS,
                                 "--policy", "fifo", "--checkpoint-s", "0", "--restart-s", "0"]),
    "tiresias-las": (TIRESIAS, ["--cluster", "1x8", "--workload", "tiresias:{traces}/" + TIRESIAS,
                                "--policy", "las", "--checkpoint-s", "0", "--restart-s", "0"]),
    **{f"synthetic-{p}": (None, ["--cluster", "2r8x8", "--workload", SYNTHETIC, "--policy", p, "--faults", FAULTS])
       for p in ("steady", "drf", "tenants")},
    "synthetic-models": (None, ["--cluster", "2r8x8:v100+8x8:k80", "--workload", SYNTHETIC, "--policy",
                                "{strategies}/las-topology.yaml", "--speed", "topology,data", "--load", "1.3",
                                "--burst", "3x@10h+1h", "--faults", "gpu-mtbf=3d,gpu-mttr=1h,seed=2"]),
    "synthetic-locality": (None, ["--cluster", "2r8x8", "--workload", SYNTHETIC, "--policy",
                                  "{strategies}/fifo-locality.yaml", "--speed", "data"]),
    "synthetic-drain": (None, ["--cluster", "2r8x8", "--workload", SYNTHETIC, "--policy",
                               "{strategies}/las-drain.yaml", "--faults", FAULTS + ",gpu-mtbf=5d"]),
    "manifests-two-teams": (None, ["--manifests", "{examples}/two-teams.yaml", "--policy", "tenants"]),
    "manifests-two-teams-steady": (None, ["--manifests", "{examples}/two-teams.yaml"]),
}
PACKING = {f"openb-{p}": p for p in ("fgd", "steady-pack")}


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, separators=(",", ":"), allow_nan=False).encode()).hexdigest()


def run_case(name: str, tmp: Path) -> str:
    """The hash of one golden run's JSON, with the input paths replaced by the case name."""
    runner = CliRunner()
    out = tmp / f"{name}.json"
    if name in PACKING:
        args = ["bench", "packing", "--nodes", f"openb:{TRACES}/{OPENB}openb_node_list_all_node.csv",
                "--pods", f"openb:{TRACES}/{OPENB}openb_pod_list_default.csv", "--seeds", "42",
                "--policies", PACKING[name], "--workers", "1", "--out", str(out)]
    else:
        fill = {"traces": TRACES, "examples": DOCS / "examples", "strategies": DOCS / "strategies"}
        args = ["simulate", *[a.format(**fill) for a in CASES[name][1]],
                "--no-timing", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    for key in ("cluster", "workload", "nodes", "pods"):
        if key in data:
            data[key] = name
    return _digest(_without_wall_clock(data))


def _without_wall_clock(data: Any) -> Any:
    """The packing experiment's JSON reports wall-clock seconds: those are not decisions."""
    if isinstance(data, dict):
        return {k: _without_wall_clock(v) for k, v in data.items() if not k.startswith("wall_s")}
    return data


def _needs(name: str) -> str | None:
    return OPENB + "openb_pod_list_default.csv" if name in PACKING else CASES[name][0]


@pytest.mark.parametrize("name", [*CASES, *PACKING])
def test_golden_run_is_unchanged(name: str, tmp_path: Path) -> None:
    """The same inputs give the same decisions as when the hashes were written."""
    trace = _needs(name)
    if trace is not None and not (TRACES / trace).exists():
        pytest.skip(f"trace {TRACES / trace} is absent (set TRIMTAB_TRACES to the traces folder)")
    expected = json.loads(HASHES.read_text())[name]
    assert run_case(name, tmp_path) == expected


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        hashes = {name: run_case(name, Path(folder)) for name in [*CASES, *PACKING]}
    HASHES.write_text(json.dumps(hashes, indent=1) + "\n")
    print(json.dumps(hashes, indent=1))
