"""Elastic jobs in the simulator: a resize changes the rate of progress, an elastic job completes once, and
Pollux's workloads at their tuned fixed sizes under las come close to the authors' Tiresias results."""

from __future__ import annotations

import json

import pytest

from builders import job, nodes, trace_path
from trimtab.formats.traces import load_trace
from trimtab.model import Elastic, LinearScaling
from trimtab.profile import Profile
from trimtab.sim.run import SimConfig, simulate

GROW = Profile(name="grow", order=["fifo"], resize=["elastic-grow"],
               args={"elastic-grow": {"min_interval_s": 60, "repay": 1.0}})


def test_a_grow_speeds_progress_from_the_resize_on() -> None:
    # 1000 s of work at 2 GPUs; at 60 s (60 s done) it grows to 8 GPUs: 940 s of work at 4x after a 30 s restart
    elastic = job("a", 2, duration_s=1000.0, scaling=LinearScaling(), elastic=Elastic(1, 8, 30.0))
    run = simulate(nodes(1, 8), [elastic], GROW, SimConfig(timing=False))
    (record,) = run["jobs"]
    assert [(r["outcome"], r["node_tasks"]) for r in record["runs"]] == [("resized", [2]), ("completed", [8])]
    assert record["runs"][0]["useful_s"] == pytest.approx(60.0)
    assert record["end"] == pytest.approx(60.0 + 30.0 + 940.0 / 4)
    assert record["state"] == "completed" and run["summary"]["jobs_completed"] == 1
    assert run["summary"]["preemptions"] == 0


def test_a_shrink_slows_progress_and_the_job_completes_once() -> None:
    profile = Profile(name="shrink", order=["priority", "fifo"], resize=["elastic-shrink"],
                      args={"elastic-shrink": {"min_interval_s": 60}})
    elastic = job("a", 8, duration_s=1000.0, scaling=LinearScaling(), elastic=Elastic(2, 8, 30.0))
    fixed = job("b", 4, submit_s=100.0, duration_s=50.0, priority=1)
    run = simulate(nodes(1, 8), [elastic, fixed], profile, SimConfig(timing=False))
    by_id = {r["id"]: r for r in run["jobs"]}
    a, b = by_id["a"], by_id["b"]
    assert [r["node_tasks"] for r in a["runs"]] == [[8], [4]]
    assert b["runs"][0]["start"] == pytest.approx(100.0)  # started in the cycle right after the shrink
    # 100 s done at 8 GPUs, 900 s left at half speed after a 30 s restart
    assert a["end"] == pytest.approx(100.0 + 30.0 + 900.0 * 2)
    assert [r["state"] for r in run["jobs"]] == ["completed", "completed"]
    assert sum(r["outcome"] == "completed" for r in a["runs"]) == 1


def test_fixed_size_las_within_10_percent_of_tiresias_on_workload_1() -> None:
    workload = trace_path("pollux-adaptdl/simulator/workloads/workload-1.csv")
    published = trace_path("pollux-adaptdl/simulator/results-jobload/tiresias-1.0/summary.json")
    jobs = load_trace(f"pollux:{workload}")
    run = simulate(nodes(16, 4), jobs, "las", SimConfig(checkpoint_s=0, restart_s=30, timing=False))
    tiresias = json.loads(published.read_text())["avgs"]["workload-1"]
    assert run["summary"]["jobs_completed"] == 160
    assert abs(run["summary"]["avg_jct_s"] / tiresias - 1) < 0.10
