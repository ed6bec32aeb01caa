"""Invariants over random workloads: no node over-allocated at any time, every job ends, a gang is never partly
running, the same seed gives byte-identical output; a job that outranks enough running jobs starts at once, and
no preemption stops a victim it could give back."""

import json
from collections import defaultdict

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from builders import nodes
from trimtab.cluster import ClusterState
from trimtab.model import Job, Resources
from trimtab.profile import Profile
from trimtab.scheduler import Scheduler
from trimtab.sim.run import SimConfig, simulate

POLICIES = ["fifo", "fifo-backfill", "sjf", "srtf", "las", "priority"]


@st.composite
def scenarios(draw):
    n_nodes = draw(st.integers(1, 4))
    gpus = draw(st.sampled_from([1, 2, 4, 8]))
    cap = n_nodes * gpus
    n_jobs = draw(st.integers(1, 25))
    jobs = []
    for i in range(n_jobs):
        jobs.append(Job(
            id=f"j{i}", submit_s=float(draw(st.integers(0, 3000))), tasks=draw(st.integers(1, cap)),
            task=Resources(gpus=1), duration_s=float(draw(st.integers(1, 5000))),
            priority=draw(st.integers(0, 3)), tenant=draw(st.sampled_from(["a", "b"]))))
    policy = draw(st.sampled_from(POLICIES))
    config = SimConfig(seed=draw(st.integers(0, 3)), checkpoint_s=draw(st.sampled_from([0.0, 300.0])),
                       restart_s=draw(st.sampled_from([0.0, 20.0])), window_s=600.0, timing=False)
    return nodes(n_nodes, gpus=gpus, racks=2), jobs, policy, config


def check_invariants(cluster_nodes, jobs, run):
    cap = {n.name: n.capacity.gpus for n in cluster_nodes}
    by_id = {j.id: j for j in jobs}
    assert run["summary"]["jobs_lost"] == 0
    assert run["summary"]["jobs_completed"] == len(jobs)
    deltas = defaultdict(list)
    for rec in run["jobs"]:
        job = by_id[rec["id"]]
        assert rec["state"] == "completed"
        assert rec["attempts"] == len(rec["runs"]) >= 1
        useful = 0.0
        for r in rec["runs"]:
            assert sum(r["node_tasks"]) == job.tasks, "a gang runs whole or not at all"
            assert r["start"] >= job.submit_s and r["end"] >= r["start"]
            for name, tasks in zip(r["nodes"], r["node_tasks"], strict=True):
                deltas[name] += [(r["start"], tasks), (r["end"], -tasks)]
            useful += r["useful_s"]
        assert abs(useful - job.duration_s) < 1e-5 * len(rec["runs"]), "progress kept adds up to the job's duration"
        # runs of one job never overlap
        for a, b in zip(rec["runs"], rec["runs"][1:], strict=False):
            assert b["start"] >= a["end"]
    for name, changes in deltas.items():
        level = 0
        for _, d in sorted(changes, key=lambda x: (x[0], x[1])):  # releases before allocations at equal time
            level += d
            assert 0 <= level <= cap[name], f"node {name} over-allocated"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants_hold_for_every_policy(scenario):
    cluster_nodes, jobs, policy, config = scenario
    run = simulate(cluster_nodes, jobs, policy, config)
    check_invariants(cluster_nodes, jobs, run)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_same_seed_gives_byte_identical_json(scenario):
    cluster_nodes, jobs, policy, config = scenario
    a = json.dumps(simulate(cluster_nodes, jobs, policy, config))
    b = json.dumps(simulate(cluster_nodes, list(jobs), policy, config))
    assert a == b


# ------------------------------------------------------------------------------------------ preemption

PREEMPTIVE = {"priority": Profile.load("priority"),  # guards off: every lower-priority job is a candidate victim
              "tenants": Profile.load("tenants").with_args(
                  {"guarded": {"min_runtime_s": 0, "max_evictions_per_job": None, "budget_per_hour": None}})}


@st.composite
def busy_clusters(draw):
    """Running jobs of priorities 0..3 (gangs of 1..3 tasks of 1..4 GPUs, those that fit at 0 s), and a job of
    priority 1..4 arriving at 60 s."""
    n_nodes = draw(st.integers(1, 4))
    gpus = draw(st.sampled_from([2, 4, 8]))
    running = [Job(f"r{i}", 0.0, draw(st.integers(1, 3)), Resources(gpus=draw(st.integers(1, min(gpus, 4)))),
                   5000.0, priority=draw(st.integers(0, 3))) for i in range(draw(st.integers(1, 12)))]
    per_task = draw(st.integers(1, gpus))
    arriving = Job("new", 60.0, draw(st.integers(1, n_nodes * (gpus // per_task))), Resources(gpus=per_task),
                   1000.0, priority=draw(st.integers(1, 4)))
    return nodes(n_nodes, gpus=gpus), running, arriving, draw(st.sampled_from(sorted(PREEMPTIVE)))


def _running_scheduler(cluster_nodes, running, profile) -> Scheduler:
    s = Scheduler(ClusterState(cluster_nodes), profile)
    for job in running:
        s.submit(job, 0.0)
    s.cycle(0.0)
    for job in running:
        if job.id not in s.running:
            s.cancel(job.id, 0.0)
    return s


def _fits(cluster: ClusterState, job: Job) -> bool:
    return int(np.minimum(cluster.fit_counts(job.task), job.tasks).sum()) >= job.tasks


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(busy_clusters())
def test_a_job_that_outranks_enough_running_jobs_starts_within_one_cycle(scenario):
    """If stopping every running job of lower priority would make room for it, it starts in the next cycle."""
    cluster_nodes, running, arriving, profile = scenario
    s = _running_scheduler(cluster_nodes, running, PREEMPTIVE[profile])
    with s.cluster.txn():  # discarded: only asks whether the room is there
        for run in s.running.values():
            if run.job.priority < arriving.priority:
                s.cluster.release(run.alloc)
        assume(_fits(s.cluster, arriving))
    s.submit(arriving, 60.0)
    d = s.cycle(60.0)
    assert "new" in {j.id for j, _ in d.starts}, (profile, d.preemptions)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(busy_clusters())
def test_no_preemption_stops_a_victim_it_could_give_back(scenario):
    """Every victim is needed: given back its GPUs, the job it made room for would not fit any more."""
    cluster_nodes, running, arriving, profile = scenario
    s = _running_scheduler(cluster_nodes, running, PREEMPTIVE[profile])
    allocs = {jid: run.alloc for jid, run in s.running.items()}
    s.submit(arriving, 60.0)
    d = s.cycle(60.0)
    for eviction in d.evictions:
        alloc = next(a for j, a in d.starts if j.id == eviction.job_id)
        assert eviction.evicted_gpus == sum(allocs[v].gpus for v in eviction.victims)
        for victim in eviction.victims:
            with s.cluster.txn() as txn:
                txn.release(alloc)
                txn.allocate(allocs[victim])
                assert not _fits(s.cluster, arriving), (profile, victim, eviction)
