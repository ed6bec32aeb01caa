"""The demo is the loop: the comparison, then advise naming fifo's bottleneck and the measured fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from trimtab.cli import app


@pytest.mark.slow
def test_the_demo_compares_then_advises(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo", "--out-dir", str(tmp_path / "rep")])
    assert result.exit_code == 0, result.output
    assert "bottleneck: blocking" in result.output
    assert "recommended: fifo+backfill" in result.output and "beats fifo on held-out jobs" in result.output
    assert (tmp_path / "rep" / "advice" / "recommended.yaml").read_text().startswith("name: fifo+backfill")
    assert (tmp_path / "rep" / "advice" / "advise.html").exists()
