"""The report's options on the command line: `compare --seeds` runs each policy per seed and gives the spread,
`--baseline` picks what the verdict measures against (a policy that did not run is a clear error), `report` takes
the runs of one policy with different seeds together, and `--window-s` overrides the windows sized to the run."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from trimtab.cli import app

runner = CliRunner()
SMALL = ["--cluster", "1x8", "--workload", "synthetic:jobs=60,load=1.5", "--policies", "fifo,sjf,las",
         "--workers", "1", "--no-timing"]


def test_compare_over_seeds_against_a_chosen_baseline_then_report_the_files_again(tmp_path: Path) -> None:
    out = tmp_path / "rep"
    result = runner.invoke(app, ["compare", *SMALL, "--seeds", "1,2", "--baseline", "las", "--out-dir", str(out)])
    assert result.exit_code == 0, result.output
    assert "verdict against las" in result.output
    for policy in ("fifo", "sjf", "las"):
        seeds = [json.loads((out / f"{policy}.seed{seed}.json").read_text())["config"]["seed"] for seed in (1, 2)]
        assert seeds == [1, 2]
    page = (out / "index.html").read_text()
    assert "Baseline: las" in page and "mean over 2 seeds" in page
    assert page.count('<tr><td class="name">') == 3, "one summary row per policy, not per run"

    again = runner.invoke(app, ["report", *map(str, sorted(out.glob("*.json"))), "-o", str(tmp_path / "again"),
                                "--window-s", "600"])
    assert again.exit_code == 0, again.output
    page = (tmp_path / "again" / "index.html").read_text()
    assert "Baseline: fifo" in page and "mean over 2 seeds" in page and page.count('<tr><td class="name">') == 3
    assert "Windows of 10 min as asked" in page


def test_a_baseline_that_did_not_run_is_an_error_naming_those_that_did(tmp_path: Path) -> None:
    result = runner.invoke(app, ["compare", *SMALL, "--baseline", "drf"])
    assert result.exit_code == 2 and "--baseline drf: not one of the policies (fifo, sjf, las)" in result.output
    run = tmp_path / "fifo.json"
    assert runner.invoke(app, ["simulate", "--cluster", "1x8", "--workload", "synthetic:jobs=20", "--policy",
                               "fifo", "--out", str(run)]).exit_code == 0
    result = runner.invoke(app, ["report", str(run), "-o", str(tmp_path / "r"), "--baseline", "sjf"])
    assert result.exit_code == 2 and "--baseline sjf: no such policy in the report (policies: fifo)" in result.output
    result = runner.invoke(app, ["compare", *SMALL, "--seeds", "1,x"])
    assert result.exit_code == 2 and "--seeds 1,x: give whole numbers" in result.output
