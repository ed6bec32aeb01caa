"""Faults in the simulator: checkpoint loss, failover, retries with backoff, GPU and rack failures, leaves and joins,
draining, and determinism with faults on."""

import json
import math

import pytest

from builders import job, nodes
from trimtab.profile import Profile
from trimtab.sim.faults import FaultSpec
from trimtab.sim.run import SimConfig, simulate
from trimtab.units import parse_duration_s

H = 3600.0


def run(tmp_path, cluster, jobs, faults_yaml, policy="fifo-backfill", **config):
    spec = tmp_path / "faults.yaml"
    spec.write_text(faults_yaml)
    cfg = SimConfig(timing=False, faults=str(spec), **config)
    return simulate(cluster, jobs, policy, cfg)


def by_id(result):
    return {j["id"]: j for j in result["jobs"]}


def test_a_checkpoint_at_40_min_and_a_failure_at_55_min_lose_15_min_plus_the_restart_cost(tmp_path):
    """The job checkpoints every 40 min; its node fails at 55 min; it fails over to the other node at once and
    resumes from the 40-min checkpoint after the 30 s restart cost."""
    big = job("a", gpus=8, duration_s=3 * H, checkpoint_s=40 * 60.0)
    result = run(tmp_path, nodes(2), [big], "schedule: [{at: 55m, kind: node, target: n000, for: 10h}]")
    rec = by_id(result)["a"]
    first, second = rec["runs"]
    assert first["nodes"] == ["n000"] and first["outcome"] == "node-failed" and first["end"] == 55 * 60
    assert first["useful_s"] == 40 * 60
    assert second["nodes"] == ["n001"] and second["start"] == 55 * 60
    lost_s = 15 * 60 + 30
    assert rec["end"] == pytest.approx(3 * H + lost_s)
    summary = result["summary"]
    assert summary["wasted_gpu_hours"] == pytest.approx(8 * lost_s / H)
    assert summary["failure_rate"] == pytest.approx(0.5) and summary["jobs_lost"] == 0


def test_a_job_that_keeps_failing_is_retried_with_doubling_backoff_then_fails(tmp_path):
    result = run(tmp_path, nodes(1), [job("x", duration_s=1000.0)],
                 "job-fail: 0.9999\nmax-retries: 2\nbackoff: 60s\nseed: 3\n")
    rec = by_id(result)["x"]
    assert rec["state"] == "failed" and rec["attempts"] == 3
    runs = rec["runs"]
    assert all(r["outcome"] == "failed" for r in runs)
    assert runs[1]["start"] == pytest.approx(runs[0]["end"] + 60)
    assert runs[2]["start"] == pytest.approx(runs[1]["end"] + 120)
    s = result["summary"]
    assert (s["jobs_failed"], s["jobs_lost"], s["failure_rate"]) == (1, 0, 1.0)


def test_a_jobs_own_max_retries_overrides_the_run_default(tmp_path):
    result = run(tmp_path, nodes(1), [job("x", max_retries=0)], "job-fail: 0.9999\nmax-retries: 5\n")
    assert by_id(result)["x"]["attempts"] == 1 and result["summary"]["jobs_failed"] == 1


def test_a_failed_gpu_stops_its_job_and_the_node_runs_on_one_gpu_short_until_repaired(tmp_path):
    """An 8-GPU job on the only (8-GPU) node loses a GPU at t=10: it waits for the repair at t=110 (the node has
    7 GPUs meanwhile, while a 1-GPU job fits) and resumes (no checkpoint loss at checkpoint_s 0)."""
    jobs = [job("big", gpus=8, duration_s=1000.0), job("small", gpus=1, submit_s=20.0, duration_s=50.0)]
    result = run(tmp_path, nodes(1), jobs, "schedule: [{at: 10s, kind: gpu, target: n000, for: 100s}]",
                 checkpoint_s=0.0)
    big, small = by_id(result)["big"], by_id(result)["small"]
    assert [r["outcome"] for r in big["runs"]] == ["node-failed", "completed"]
    assert big["runs"][1]["start"] == 110.0 and big["end"] == pytest.approx(110 + 30 + 990)
    assert small["runs"][0]["start"] == 20.0


def test_a_rack_cut_off_moves_its_jobs_to_the_other_rack(tmp_path):
    result = run(tmp_path, nodes(2, racks=2), [job("a", gpus=8, duration_s=500.0)],
                 "schedule: [{at: 100s, kind: rack, target: r0, for: 1h}]", checkpoint_s=0.0)
    runs = by_id(result)["a"]["runs"]
    assert [r["nodes"] for r in runs] == [["n000"], ["n001"]] and runs[1]["start"] == 100.0


def test_a_node_that_joins_later_takes_work_from_then_and_a_leaving_node_is_not_a_failure(tmp_path):
    jobs = [job("a", gpus=8, duration_s=1000.0), job("b", gpus=8, duration_s=1000.0)]
    result = run(tmp_path, nodes(2), jobs, "schedule: [{at: 500s, kind: join, target: n001},"
                 " {at: 700s, kind: leave, target: n000, for: 1h}]", checkpoint_s=0.0)
    a, b = by_id(result)["a"], by_id(result)["b"]
    assert b["runs"][0]["start"] == 500.0 and b["runs"][0]["nodes"] == ["n001"]
    assert a["runs"][0]["outcome"] == "preempted"
    assert result["summary"]["failure_rate"] == 0.0


def test_random_faults_end_every_job_and_the_same_seed_gives_identical_output():
    cluster = nodes(8, racks=2)
    jobs = [job(i, gpus=1 + i % 4, submit_s=i * 300.0, duration_s=2 * H + 97 * i) for i in range(80)]
    faults = "node-mtbf=1d,node-mttr=2h,gpu-mtbf=4d,rack-mtbf=6d,job-fail=0.05,flaky=0.25,seed={}"
    runs = [simulate(cluster, jobs, "las", SimConfig(timing=False, faults=faults.format(s))) for s in (5, 5, 6)]
    texts = [json.dumps(r, sort_keys=True) for r in runs]
    assert texts[0] == texts[1]
    first = runs[0]["summary"]
    assert first["jobs_lost"] == 0 and first["failure_rate"] > 0 and first["wasted_gpu_hours"] > 0
    assert runs[0]["jobs"] != runs[2]["jobs"]  # another fault seed, other failures


def test_draining_and_history_keep_jobs_off_a_flaky_node(tmp_path):
    """One node fails every few hours; with drain + history + score-pack fewer attempts fail than with plain las."""
    cluster = nodes(4)
    jobs = [job(i, gpus=2, submit_s=i * 600.0, duration_s=3 * H) for i in range(60)]
    resilient = Profile(name="resilient", order=[{"las": {"thresholds_gpu_s": [3250, 7200]}}, "fifo"],
                        preempt=["lower-order"], filter=["gpu-model", "node-selector", "drain"],
                        score={"history": 1.0}, place="score-pack")
    spec = tmp_path / "flaky.yaml"
    spec.write_text("seed: 2\nnode-mttr: 30m\nnodes: {n000: 4h}\n")
    config = SimConfig(timing=False, faults=str(spec))
    base = simulate(cluster, jobs, "las", config)["summary"]
    better = simulate(cluster, jobs, resilient, config)["summary"]
    assert base["failure_rate"] > 0 and base["jobs_lost"] == better["jobs_lost"] == 0
    assert better["failure_rate"] < base["failure_rate"]
    assert better["wasted_gpu_hours"] < base["wasted_gpu_hours"]


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("15m", 900), ("2h", 7200), ("7d", 604800),
                                               ("1.5h", 5400), ("never", math.inf)])
def test_durations_read_with_units(text, seconds):
    assert parse_duration_s(text) == seconds


def test_inline_faults_parse_and_bad_specs_name_the_problem(tmp_path):
    spec = FaultSpec.parse("node-mtbf=7d,node-mttr=2h,gpu-mtbf=30d,job-fail=0.02,seed=1")
    assert (spec.node_mtbf_s, spec.node_mttr_s, spec.gpu_mtbf_s, spec.job_fail, spec.seed) == (
        7 * 86400, 7200, 30 * 86400, 0.02, 1)
    assert spec.active and not FaultSpec().active
    for bad, words in [("node-mtbf=soon", "duration"), ("colour=red", "unknown key"), ("job-fail=1.5", "job_fail"),
                       ("node-mtbf", "key=value")]:
        with pytest.raises(ValueError, match=words):
            FaultSpec.parse(bad)
    with pytest.raises(ValueError, match="unknown node"):
        run(tmp_path, nodes(1), [job("a")], "schedule: [{at: 1h, kind: node, target: nope}]")


def test_the_command_line_takes_faults_speed_load_and_bursts_and_repeats_itself(tmp_path):
    from typer.testing import CliRunner

    from trimtab.cli import app

    runner = CliRunner()
    args = ["simulate", "--cluster", "2r2x8", "--workload", "synthetic:jobs=120,seed=4", "--policy", "las",
            "--faults", "node-mtbf=12h,gpu-mtbf=5d,job-fail=0.05,seed=3", "--speed", "topology,data",
            "--load", "1.5", "--burst", "3x@1h+1h", "--no-timing"]
    outs = []
    for name in ("a.json", "b.json"):
        result = runner.invoke(app, [*args, "--out", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        outs.append((tmp_path / name).read_text())
    assert outs[0] == outs[1]
    summary = json.loads(outs[0])["summary"]
    assert summary["jobs_lost"] == 0 and summary["net_util"] > 0 and summary["failure_rate"] > 0
    bad = runner.invoke(app, ["compare", "--cluster", "1x8", "--workload", "synthetic:jobs=5", "--faults",
                              "node-mtbf=soon"])
    assert bad.exit_code == 2 and "node-mtbf" in bad.output


def test_a_node_lost_under_a_running_gang_requeues_it_without_spending_a_retry(tmp_path):
    """Failover: a gang of 12 one-GPU tasks spans n000 and n001 (8 GPUs each) with no retries allowed; n000 fails
    under it. The attempt is the cluster's failure, not the job's: the gang is queued again at once, runs whole on
    the healthy nodes and completes. By contrast, a job that fails on its own with no retries ends FAILED: only the
    job's own failures count."""
    gang = job("gang", gpus=12, duration_s=1000.0, max_retries=0)
    result = run(tmp_path, nodes(3), [gang], "schedule: [{at: 100s, kind: node, target: n000, for: 10h}]",
                 checkpoint_s=0.0, policy="fifo")
    rec = by_id(result)["gang"]
    first, second = rec["runs"]
    assert first["nodes"] == ["n000", "n001"] and first["outcome"] == "node-failed"
    assert second["start"] == 100.0 and "n000" not in second["nodes"] and second["outcome"] == "completed"
    assert (rec["state"], rec["attempts"]) == ("completed", 2)
    assert (result["summary"]["jobs_failed"], result["summary"]["jobs_lost"]) == (0, 0)
    own = run(tmp_path, nodes(1), [job("x", max_retries=0)], "job-fail: 0.9999\n")
    assert by_id(own)["x"]["state"] == "failed" and by_id(own)["x"]["attempts"] == 1
