"""Task consolidation: a burst of small jobs of one tenant is placed as units, then runs as separate jobs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_properties import check_invariants, scenarios

from builders import job, nodes
from trimtab.cluster import ClusterState
from trimtab.model import JobState
from trimtab.profile import Profile
from trimtab.scheduler import Scheduler
from trimtab.sim.run import SimConfig, simulate


def _profile(window_s: float, base: str = "fifo", max_jobs: int = 256) -> Profile:
    return Profile.load(base).model_copy(update={"consolidate_window_s": window_s, "consolidate_max_jobs": max_jobs})


def _burst(count: int, tenants: int = 1, spacing_s: float = 0.01) -> list:
    rng = np.random.default_rng(7)
    return [job(i, submit_s=i * spacing_s, duration_s=float(rng.uniform(50, 500)), tenant=f"t{i % tenants}")
            for i in range(count)]


def _cycle_all(profile: Profile, jobs: list, cluster_nodes: int = 10) -> Scheduler:
    sched = Scheduler(ClusterState(nodes(cluster_nodes)), profile)
    for j in jobs:
        sched.submit(j, 0.0)
    sched.cycle(0.0)
    return sched


def test_a_burst_is_placed_in_units_and_each_job_gets_one_gpu() -> None:
    jobs = _burst(60)
    plain = _cycle_all(_profile(0.0), jobs)
    units = _cycle_all(_profile(10.0, max_jobs=16), jobs)
    assert len(plain.running) == len(units.running) == 60
    assert plain.framework.placements_tried == 60
    assert units.framework.placements_tried == 4  # 16 + 16 + 16 + 12
    held = np.zeros((10, 8), dtype=int)
    for run in units.running.values():
        assert run.alloc.tasks == 1 and run.alloc.gpus == 1
        held[run.alloc.nodes[0], run.alloc.gpu_idx] += 1
    assert held.max() == 1  # no GPU given twice
    assert units.cluster.allocated_gpus == 60


def test_units_stop_at_what_fits_and_the_rest_waits_in_order() -> None:
    sched = _cycle_all(_profile(10.0), _burst(100))  # 80 GPUs
    assert sorted(sched.running, key=int) == [str(i) for i in range(80)]
    assert [j.id for j in sched.pending()] == [str(i) for i in range(80, 100)]
    sched.stopped("3", 1.0, JobState.COMPLETED)
    assert [j.id for j, _ in sched.cycle(1.0).starts] == ["80"]


def test_units_keep_to_one_tenant_and_the_window() -> None:
    mixed = _cycle_all(_profile(10.0), _burst(40, tenants=2))  # tenants alternate: no two neighbours alike
    assert mixed.framework.placements_tried == 40
    spread = _cycle_all(_profile(0.5), _burst(40, spacing_s=1.0))  # one job per second, a 0.5 s window
    assert spread.framework.placements_tried == 40
    grouped = _cycle_all(_profile(5.0), _burst(40, spacing_s=1.0))  # 6 jobs (0..5 s after the first) per unit
    assert grouped.framework.placements_tried == 7


@pytest.mark.parametrize("base", ["fifo", "las", "quota-fifo"])
def test_per_job_metrics_are_exact(base: str) -> None:
    """Identical one-GPU jobs start at the same moments whether they are placed one by one or in units, so every
    job's record and the summary but for the spread over nodes are the same. Jobs arrive 25 at a time and end
    together, so units do form."""
    rng = np.random.default_rng(3)
    jobs = [job(i, submit_s=float(i // 25 * 40), duration_s=float(rng.choice([100, 250, 400])), tenant="a")
            for i in range(500)]
    config = SimConfig(timing=False)
    plain = simulate(nodes(6), jobs, _profile(0.0, base), config)
    units = simulate(nodes(6), jobs, _profile(30.0, base), config)

    def times(record: dict) -> list:
        return [(r["id"], r["state"], [(run["start"], run["end"]) for run in r["runs"]]) for r in record["jobs"]]

    assert times(units) == times(plain)
    where = {"node_util_variance"}  # which nodes: a unit is packed as one gang, so the spread over nodes may differ
    assert {k: v for k, v in units["summary"].items() if k not in where} == \
        {k: v for k, v in plain["summary"].items() if k not in where}


def test_shares_in_a_unit_are_booked_and_given_back_per_job() -> None:
    from trimtab.model import Job, Resources

    half = Resources(cpu_milli=1000, gpu_milli=500)
    sched = Scheduler(ClusterState(nodes(2)), _profile(10.0))
    for i in range(40):
        sched.submit(Job(str(i), 0.0, 1, half, duration_s=10.0), 0.0)
    sched.cycle(0.0)
    assert sched.framework.placements_tried == 1  # one unit of 32 shares; the rest fit nowhere (no place call)
    assert len(sched.running) == 32 and (sched.cluster.gpu_free_milli[:, :8] == 0).all()
    for jid in list(sched.running):
        sched.stopped(jid, 5.0, JobState.COMPLETED)
    assert (sched.cluster.gpu_free_milli[:, :8] == 1000).all() and sched.cluster.free_gpus_total == 16


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from([5.0, 60.0, 600.0]), st.integers(2, 8))
def test_invariants_hold_with_units(scenario, window_s: float, max_jobs: int) -> None:
    """Random workloads (gangs among single-task jobs, preemptive policies too) with consolidation on: no node
    over-allocated, gangs whole, every job ends with its progress."""
    cluster_nodes, jobs, policy, config = scenario
    profile = _profile(window_s, policy, max_jobs)
    check_invariants(cluster_nodes, jobs, simulate(cluster_nodes, jobs, profile, config))
