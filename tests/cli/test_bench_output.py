"""`trimtab bench packing` prints counts of pods as counts: "failed pods 1", not "1.0"."""

from __future__ import annotations

import json
from pathlib import Path


def test_failed_pods_are_printed_as_a_whole_number(tmp_path: Path) -> None:
    """Six 8-GPU pods on 2x8, inflated to 150% of capacity: the third pod of each seed fits nowhere."""
    from typer.testing import CliRunner

    from trimtab.cli import app

    pods = tmp_path / "pods.csv"
    pods.write_text("id,submit_s,gpus,duration_s\n" + "".join(f"p{i},0,8,100\n" for i in range(6)))
    out = tmp_path / "packing.json"
    result = CliRunner().invoke(app, ["bench", "packing", "--nodes", "2x8", "--pods", str(pods), "--seeds", "1-2",
                                      "--policies", "best-fit", "--inflate", "1.5", "--out", str(out),
                                      "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["policies"]["best-fit"]["failed_mean"] == 1.0
    [row] = [line for line in result.output.splitlines() if "best-fit" in line]
    cells = [cell.strip() for cell in row.split("│") if cell.strip()]
    assert cells[3] == "1", row
