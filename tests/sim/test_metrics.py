"""Every number of a run can be checked from its records: a consumer recomputes the summary and the series from
`jobs` and their `runs` and gets the same values."""

import math

import numpy as np
import pytest

from builders import job, nodes
from trimtab.sim.run import SimConfig, simulate


@pytest.fixture(scope="module")
def run():
    from trimtab.sim.workload import synthetic

    jobs = synthetic(jobs=600, seed=11, load=1.2, cluster_gpus=32, tenants=3)
    return simulate(nodes(4, gpus=8, racks=2), jobs, "las", SimConfig(seed=2, window_s=1800.0, timing=False))


def test_jct_wait_and_counts_from_the_records(run):
    s, jobs = run["summary"], run["jobs"]
    jct = np.array([j["end"] - j["submit"] for j in jobs if j["state"] == "completed"])
    waits = np.array([j["runs"][0]["start"] - j["submit"] for j in jobs])
    assert s["jobs_completed"] == len(jct) == 600 and s["jobs_lost"] == 0
    assert s["avg_jct_s"] == pytest.approx(jct.mean(), rel=1e-6)
    assert s["jct_std_s"] == pytest.approx(jct.std(), rel=1e-6)
    assert s["p99_jct_s"] == pytest.approx(np.percentile(jct, 99), rel=1e-6)
    assert s["avg_wait_s"] == pytest.approx(waits.mean(), rel=1e-6)
    assert s["preemptions"] == sum(r["outcome"] == "preempted" for j in jobs for r in j["runs"]) > 0
    slow = [(j["end"] - j["submit"]) / j["duration"] for j in jobs]
    assert s["avg_slowdown"] == pytest.approx(np.mean(slow), rel=1e-6)


def test_series_and_throughput_cv_from_the_records(run):
    s, series, jobs = run["summary"], run["series"], run["jobs"]
    w, t0 = series["window_s"], series["start_s"]
    ends = [j["end"] for j in jobs]
    counts = np.zeros(len(series["completions"]))
    for end in ends:
        counts[min(int((end - t0) // w), len(counts) - 1)] += 1
    assert counts.tolist() == series["completions"]
    last_submit = max(j["submit"] for j in jobs)
    whole = [c for k, c in enumerate(series["completions"]) if t0 + (k + 1) * w <= last_submit]
    assert s["throughput_cv"] == pytest.approx(np.std(whole) / np.mean(whole), rel=1e-5)


def test_gpu_util_and_goodput_from_the_runs(run):
    s, series, jobs = run["summary"], run["series"], run["jobs"]
    first = min(j["submit"] for j in jobs)
    end = max(j["end"] for j in jobs)
    gpu_s = sum(j["gpus"] * (r["end"] - r["start"]) for j in jobs for r in j["runs"])
    assert s["gpu_util"] == pytest.approx(gpu_s / (32 * (end - first)), rel=1e-5)
    useful_gpu_s = sum(j["gpus"] * r["useful_s"] for j in jobs for r in j["runs"])
    assert sum(series["goodput_gpu_s"]) == pytest.approx(useful_gpu_s, rel=1e-5)
    assert useful_gpu_s == pytest.approx(sum(j["gpus"] * j["duration"] for j in jobs), rel=1e-5)
    wasted = (gpu_s - useful_gpu_s) / 3600
    assert s["wasted_gpu_hours"] == pytest.approx(wasted, rel=1e-4, abs=1e-4)
    assert s["gpu_util"] == pytest.approx(np.average(series["gpu_alloc"]) * len(series["gpu_alloc"]) * 1800
                                          / (end - first), rel=1e-4)


def test_cross_node_ratio_and_starvation_from_the_runs(run):
    s, jobs = run["summary"], run["jobs"]
    gang = [(j["gpus"] * (r["end"] - r["start"]), len(r["nodes"]) > 1) for j in jobs if j["tasks"] > 1
            for r in j["runs"]]
    total = sum(g for g, _ in gang)
    assert s["cross_node_ratio"] == pytest.approx(sum(g for g, x in gang if x) / total, rel=1e-5)
    starved = sum(j["runs"][0]["start"] - j["submit"] > max(3600, 10 * j["duration"]) for j in jobs)
    assert s["starvation_rate"] == pytest.approx(starved / len(jobs), rel=1e-6)


def test_checkpoint_loss_is_wasted_and_restart_costs_time():
    """A job preempted 250 s into its run with checkpoints every 100 s keeps 200 s; the 50 s lost and the restart
    cost are wasted GPU time, and it finishes later by exactly that much."""
    jobs = [job("long", 1, submit_s=0, duration_s=5000), job("short", 1, submit_s=3300, duration_s=100)]
    run = simulate(nodes(1, gpus=1), jobs, "las", SimConfig(checkpoint_s=100, restart_s=20, timing=False))
    by_id = {j["id"]: j for j in run["jobs"]}
    first, second = by_id["long"]["runs"]
    assert first["outcome"] == "preempted" and first["end"] == 3300 and first["useful_s"] == 3300
    jobs[1] = job("short", 1, submit_s=3250 + 250, duration_s=100)
    run = simulate(nodes(1, gpus=1), jobs, "las", SimConfig(checkpoint_s=100, restart_s=20, timing=False))
    first, second = {j["id"]: j for j in run["jobs"]}["long"]["runs"]
    assert first["useful_s"] == 3500
    assert second["start"] == 3600 and second["end"] == 3600 + 20 + 1500
    jobs[1] = job("short", 1, submit_s=3350, duration_s=100)
    run = simulate(nodes(1, gpus=1), jobs, "las", SimConfig(checkpoint_s=100, restart_s=20, timing=False))
    long = {j["id"]: j for j in run["jobs"]}["long"]
    assert long["runs"][0]["useful_s"] == 3300  # 50 s since the last checkpoint are lost
    assert long["end"] == 3450 + 20 + (5000 - 3300)
    assert run["summary"]["wasted_gpu_hours"] == pytest.approx((50 + 20) / 3600, abs=1e-6)
    assert not math.isnan(run["summary"]["gpu_util"])


def test_fairness_is_one_when_every_tenant_gets_what_it_asked():
    jobs = [job(f"{t}{i}", 1, submit_s=i, duration_s=100, tenant=t) for t in "ab" for i in range(3)]
    run = simulate(nodes(1, gpus=8), jobs, "fifo", SimConfig(timing=False))
    assert run["summary"]["fairness_jain"] == pytest.approx(1.0)
