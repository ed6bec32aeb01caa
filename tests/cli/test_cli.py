"""The command line as a user runs it: simulate, compare with a report, demo, policies, bad input."""

import json
import subprocess
import sys

from typer.testing import CliRunner

from builders import trace_path
from trimtab.cli import app

runner = CliRunner()


def test_simulate_writes_a_run_with_every_metric(tmp_path):
    from trimtab.metrics import SUMMARY_KEYS

    out = tmp_path / "run.json"
    trace = trace_path("tiresias/simulator/60_job.csv")
    result = runner.invoke(app, ["simulate", "--cluster", "1x8", "--workload", str(trace), "--policy", "las",
                                 "--checkpoint-s", "0", "--restart-s", "0", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "avg_jct_s" in result.output and "715.266667" in result.output
    run = json.loads(out.read_text())
    assert tuple(run["summary"]) == SUMMARY_KEYS
    assert run["policy"] == "las" and len(run["jobs"]) == 60
    assert {"window_s", "completions", "goodput_gpu_s", "gpu_alloc", "queue_len"} <= set(run["series"])
    job = run["jobs"][0]
    assert {"id", "tenant", "priority", "gpus", "submit", "state", "attempts", "preemptions", "end", "runs"} <= set(job)
    assert {"start", "end", "nodes", "outcome"} <= set(job["runs"][0])


def test_compare_writes_one_json_per_policy_and_a_report(tmp_path):
    result = runner.invoke(app, ["compare", "--cluster", "2x8", "--workload", "synthetic:jobs=300,seed=3",
                                 "--policies", "fifo,las,sjf", "--out-dir", str(tmp_path), "--workers", "2"])
    assert result.exit_code == 0, result.output
    for name in ("fifo", "las", "sjf"):
        run = json.loads((tmp_path / f"{name}.json").read_text())
        assert run["policy"] == name and run["summary"]["jobs_lost"] == 0
    page = (tmp_path / "index.html").read_text()
    assert page.count("<tr><td class=\"name\">") == 3 and "data:image/png;base64," in page
    assert (tmp_path / "completions.png").stat().st_size > 1000


def test_same_seed_gives_byte_identical_json_across_processes(tmp_path):
    """Two separate processes, same inputs and seed: the run files are byte for byte the same."""
    outs = []
    for i in range(2):
        out = tmp_path / f"run{i}.json"
        subprocess.run([sys.executable, "-m", "trimtab.cli", "simulate", "--cluster", "2r2x8", "--workload",
                        "synthetic:jobs=400,seed=5", "--policy", "las", "--seed", "9", "--no-timing",
                        "--out", str(out)], check=True, capture_output=True)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


def test_demo_writes_the_report(tmp_path):
    result = runner.invoke(app, ["demo", "--out-dir", str(tmp_path / "rep"), "--no-advise"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "rep" / "index.html").exists()
    for name in ("steady", "fifo", "fifo-backfill", "sjf", "srtf", "las", "qssf", "drf", "priority"):
        assert name in result.output


def test_policies_lists_the_builtins():
    result = runner.invoke(app, ["policies"])
    assert result.exit_code == 0
    for name in ("steady", "fifo", "fifo-backfill", "sjf", "srtf", "las", "qssf", "drf", "priority"):
        assert name in result.output


def test_bad_input_is_a_clear_error(tmp_path):
    cases = [
        (["--cluster", "8y8", "--workload", "synthetic"], "8y8"),
        (["--cluster", "1x8", "--workload", str(tmp_path / "nope.csv")], "nope.csv"),
        (["--cluster", "1x8", "--workload", "synthetic:jobz=3"], "jobz"),
        (["--cluster", "1x8", "--workload", "synthetic:jobs=10", "--policy", "nosuch"], "nosuch"),
    ]
    for args, named in cases:
        result = runner.invoke(app, ["simulate", *args])
        assert result.exit_code == 2, (args, result.output)
        assert "error" in result.output and named in result.output, result.output
