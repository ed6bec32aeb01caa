"""Where the GPU-hours go: each cause of losses.py counted exactly on hand-built records, and the accounting of a
simulated run adding up to the GPU-time it allocated."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from builders import job, nodes
from trimtab.losses import CAUSES, gpu_losses
from trimtab.model import Elastic, LinearScaling
from trimtab.profile import Profile
from trimtab.sim.run import SimConfig, simulate

EDGES = np.array([0.0, 1000.0, 2000.0])
TWO_NODES = {"n0": 4, "n1": 4}


def _job(jid: str, gpus: int, submit: float, runs: list[dict[str, Any]], tasks: int = 1, end: float | None = None,
         tenant: str = "default", duration: float | None = None) -> dict[str, Any]:
    return {"id": jid, "tenant": tenant, "gpus": gpus, "tasks": tasks, "submit": submit, "duration": duration,
            "end": end, "runs": runs}


def _run(start: float, end: float, node: str, tasks: int = 1, outcome: str = "completed", useful_s: float | None = None,
         progress_from: float | None = None, slowdown: float = 1.0) -> dict[str, Any]:
    progress_from = start if progress_from is None else progress_from
    return {"start": start, "end": end, "nodes": [node], "node_tasks": [tasks], "outcome": outcome,
            "useful_s": (end - progress_from) / slowdown if useful_s is None else useful_s,
            "progress_from": progress_from, "slowdown": slowdown}


def _lost_gpu_s(jobs: list[dict[str, Any]], **kw: Any) -> dict[str, float]:
    """GPU-seconds lost by cause over the windows."""
    return {c: float(v.sum()) for c, v in gpu_losses(jobs, TWO_NODES, EDGES, **kw).lost_gpu_s.items()}


def test_a_preempted_attempt_loses_its_tail_and_the_restart_of_the_next() -> None:
    """2 GPUs from 0 to 600 s, progress kept to 400 s, preempted; restarted at 700 s with 50 s of restart."""
    runs = [_run(0, 600, "n0", 2, "preempted", useful_s=400),
            _run(700, 1200, "n0", 2, progress_from=750)]
    losses = gpu_losses([_job("a", 2, 0, runs, tasks=2, end=1200)], TWO_NODES, EDGES)
    assert losses.lost_gpu_s["preemption"].sum() == pytest.approx(2 * 200 + 2 * 50)
    assert losses.useful_gpu_s.sum() == pytest.approx(2 * 400 + 2 * 450)


def test_the_restart_after_a_resize_is_the_schedulers_stop_not_a_failure() -> None:
    """An elastic job resized at 500 s keeps all its progress and restarts with 20 s of resize time: preemption."""
    runs = [_run(0, 500, "n0", 2, "resized"), _run(500, 900, "n1", 2, progress_from=520)]
    lost = _lost_gpu_s([_job("a", 2, 0, runs, tasks=2, end=900)])
    assert lost["preemption"] == pytest.approx(2 * 20)
    assert lost["failure"] == 0


def test_a_failed_attempt_and_a_slow_run() -> None:
    """A failure loses the progress since the checkpoint; a run at slowdown 2 keeps half its GPU-time useful."""
    runs = [_run(0, 300, "n0", outcome="node-failed", useful_s=100), _run(300, 900, "n1", slowdown=2.0)]
    lost = _lost_gpu_s([_job("a", 1, 0, runs, end=900)])
    assert lost["failure"] == pytest.approx(200)
    assert lost["slowdown"] == pytest.approx(300)


def test_idle_gpus_while_a_job_fits_in_the_total_but_on_no_node_are_fragmentation() -> None:
    """One GPU busy on each node of 4: 6 GPUs free, but a single task of 4 GPUs fits on neither node."""
    busy = [_job(f"b{i}", 1, 0, [_run(0, 1000, f"n{i}")], end=1000) for i in range(2)]
    waiting = _job("w", 4, 0, [_run(1000, 1500, "n0", 1)], end=1500)
    lost = _lost_gpu_s([*busy, waiting])
    assert lost["fragmentation"] == pytest.approx(4 * 1000)
    assert lost["blocking"] == 0


def test_idle_gpus_while_a_fitting_job_waits_are_blocking_or_quota() -> None:
    """A 1-GPU job waits 500 s with 8 GPUs idle: held by the policy it is blocking, by its tenant's quota quota."""
    waiting = [_job("w", 1, 0, [_run(500, 800, "n0")], end=800, tenant="t")]
    assert _lost_gpu_s(waiting)["blocking"] == pytest.approx(500)
    held = _lost_gpu_s(waiting, quota_held=[(0.0, "t", True), (300.0, "t", False)])
    assert (held["quota"], held["blocking"]) == (pytest.approx(300), pytest.approx(200))


def test_a_node_out_of_service_holds_no_idle_gpu() -> None:
    """Node n1 is down while a 4-GPU job waits and n0 is busy: nothing idle, so nothing lost."""
    busy = _job("b", 4, 0, [_run(0, 1000, "n0", 4)], tasks=4, end=1000)
    waiting = _job("w", 4, 0, [_run(1000, 1200, "n0", 4)], tasks=4, end=1200)
    assert _lost_gpu_s([busy, waiting])["blocking"] == pytest.approx(4 * 1000)
    out = _lost_gpu_s([busy, waiting], out_of_service=[(0.0, "n1", False), (1000.0, "n1", True)])
    assert out["blocking"] == 0


def test_load_is_demand_over_the_cluster_had_every_job_started_on_arrival() -> None:
    """Two 8-GPU jobs of 500 s on 8 GPUs, both submitted at 0: 8 GPUs over the cluster for 500 s."""
    jobs = [_job(j, 8, 0, [], duration=500.0, end=None) for j in ("a", "b")]
    assert _lost_gpu_s(jobs)["load"] == pytest.approx(8 * 500)


def test_a_simulated_runs_allocated_gpu_time_is_useful_or_lost_to_an_attempt_cause() -> None:
    """useful + preemption + failure + slowdown adds up to the GPU-time allocated (faults, LAS preemptions)."""
    jobs = [job(i, gpus=1 + i % 4, submit_s=60.0 * i, duration_s=900.0 + 97 * (i % 7)) for i in range(60)]
    run = simulate(nodes(2, gpus=4), jobs, "las",
                   SimConfig(timing=False, faults="node-mtbf=1d,node-mttr=1h,seed=2", window_s=600))
    series, summary = run["series"], run["summary"]
    allocated = sum(series["gpu_alloc"]) * 8 * series["window_s"]
    attempt_causes = sum(sum(series["lost_gpu_s"][c]) for c in ("preemption", "failure", "slowdown"))
    assert sum(series["useful_gpu_s"]) + attempt_causes == pytest.approx(allocated, rel=1e-6)
    assert set(summary["lost_gpu_hours"]) == set(CAUSES)
    assert summary["preemptions"] > 0 and summary["lost_gpu_hours"]["preemption"] > 0


def test_an_elastic_attempt_counts_the_gpus_it_held() -> None:
    """An 8-GPU elastic job (1000 s of work, linear scaling) shrinks to 4 GPUs at 100 s for a job of a higher
    class: 800 GPU-s of work on 8 GPUs, a 30-s restart on 4 (the scheduler's stop: preemption), then 7200 GPU-s of
    work at half speed on 4 GPUs, none of it slowdown (the GPUs held do all the work their speed allows)."""
    shrink = Profile(name="shrink", order=["priority", "fifo"], resize=["elastic-shrink"],
                     args={"elastic-shrink": {"min_interval_s": 60}})
    elastic = job("a", 8, duration_s=1000.0, scaling=LinearScaling(), elastic=Elastic(2, 8, 30.0))
    fixed = job("b", 4, submit_s=100.0, duration_s=50.0, priority=1)
    run = simulate(nodes(1, 8), [elastic, fixed], shrink, SimConfig(timing=False, window_s=600))
    series = run["series"]
    lost = {c: sum(v) for c, v in series["lost_gpu_s"].items()}
    assert sum(series["useful_gpu_s"]) == pytest.approx(8 * 1000 + 4 * 50)
    assert lost["preemption"] == pytest.approx(4 * 30)
    assert lost["slowdown"] == pytest.approx(0) and lost["failure"] == 0
    allocated = sum(series["gpu_alloc"]) * 8 * series["window_s"]
    assert sum(series["useful_gpu_s"]) + lost["preemption"] == pytest.approx(allocated, rel=1e-6)
