"""What `trimtab tune` writes: the tuned profile only when it beats the base on the held-out jobs (or with --force),
and its LAS thresholds in increasing order."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import Result

from trimtab.profile import Profile
from trimtab.sim.tune import with_values

THRESHOLDS = ("order", 0, "las", "thresholds_gpu_s")


def test_thresholds_stay_in_increasing_order_whatever_the_search_draws() -> None:
    changed = with_values(Profile.load("las"), {(*THRESHOLDS, 0): 9000.0, (*THRESHOLDS, 1): 500.0}, "x")
    assert changed.order[0] == {"las": {"thresholds_gpu_s": [500, 9000]}}


def tune(tmp_path: Path, seed: int, *extra: str) -> tuple[Result, Path]:
    """`trimtab tune` of las on 300 synthetic jobs (seed `seed`, load 1.2) on 2x8, 3 candidates."""
    from typer.testing import CliRunner

    from trimtab.cli import app

    out = tmp_path / f"tuned-{seed}.yaml"
    args = ["tune", "-c", "2x8", "-w", f"synthetic:jobs=300,seed={seed},load=1.2", "-p", "las", "--objective",
            "avg_jct_s", "--budget", "3", "--workers", "1", "--out", str(out), *extra]
    return CliRunner().invoke(app, args), out


@pytest.mark.parametrize(("seed", "better"), [(4, True), (5, False)])
def test_the_tuned_profile_is_written_only_when_it_beats_the_base_on_the_held_out_jobs(
        tmp_path: Path, seed: int, better: bool) -> None:
    """Workload 4: the tuned thresholds beat las's on the held-out jobs (score 0.94), the profile is written, its
    thresholds in order. Workload 5: the tuned profile does worse there (1.003): nothing is written, and the
    message says so; --force writes it all the same."""
    result, out = tune(tmp_path, seed)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    if better:
        assert f"tuned profile written to {out}" in text
    else:
        assert "nothing written: the tuned profile scores 1.0027 on the held-out jobs, no better than las" in text
        assert "--force writes it anyway" in text and not out.exists()
        result, out = tune(tmp_path, seed, "--force")
        assert result.exit_code == 0 and "though it scores 1.0027 on the held-out jobs" in " ".join(
            result.output.split())
    thresholds = yaml.safe_load(out.read_text())["order"][0]["las"]["thresholds_gpu_s"]
    assert thresholds == sorted(thresholds)
    assert Profile.load(out).name == "las-tuned"
