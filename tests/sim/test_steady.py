"""The default profile, `steady`: what each of its parts does, and that together they beat LAS and QSSF on an
overloaded heavy-tailed workload (the full Philly study is in docs/steady.md)."""

from __future__ import annotations

from builders import job, nodes
from trimtab.cluster import ClusterState
from trimtab.model import JobState
from trimtab.scheduler import Scheduler
from trimtab.sim.compare import compare
from trimtab.sim.run import SimConfig
from trimtab.sim.workload import synthetic


def test_a_young_job_is_not_preempted_and_an_old_one_is() -> None:
    sched = Scheduler(ClusterState(nodes(1)), "steady")
    sched.submit(job("big", gpus=8, duration_s=100_000.0), 0.0)
    sched.cycle(0.0)
    sched.submit(job("new", gpus=4), 1000.0)  # big is in the last LAS queue by now, but started 1,000 s ago
    assert sched.cycle(1000.0).preemptions == []
    decision = sched.cycle(1800.0)
    assert decision.preemptions == ["big"] and [j.id for j, _ in decision.starts] == ["new"]


def test_inside_a_class_a_job_is_evicted_just_after_its_checkpoint() -> None:
    """Checkpoints every 600 s of progress: at 2,000 s the old job is 200 s past one, so the new job waits; the
    scheduler asks to be woken at the next one (2,400 s), and the new job evicts it then."""
    sched = Scheduler(ClusterState(nodes(1)), "steady")
    sched.submit(job("big", gpus=8, duration_s=100_000.0), 0.0)
    sched.cycle(0.0)
    sched.submit(job("new", gpus=4), 2000.0)
    waiting = sched.cycle(2000.0)
    assert waiting.preemptions == [] and waiting.wake_s == 2400.0
    assert sched.cycle(2400.0).preemptions == ["big"]


def test_a_higher_priority_class_preempts_a_lower_one_whatever_its_service() -> None:
    sched = Scheduler(ClusterState(nodes(1)), "steady")
    sched.submit(job("low", gpus=8, duration_s=100_000.0), 0.0)
    sched.cycle(0.0)
    sched.submit(job("high", gpus=8, priority=10, duration_s=50_000.0), 2000.0)
    assert sched.cycle(2000.0).preemptions == ["low"]


def test_inside_a_queue_the_least_predicted_service_goes_first() -> None:
    """Tenant a's jobs have been short, tenant b's long; two demoted jobs wait for one free node: a's goes first
    under steady, the earlier one (b's) under LAS."""
    starts = {}
    for policy in ("steady", "las"):
        sched = Scheduler(ClusterState(nodes(1)), policy)
        for i, tenant in enumerate(["a", "b"] * 3):  # history: a's jobs take 100 s, b's 10,000 s
            sched.submit(job(f"h{i}", tenant=tenant), 0.0)
            sched.cycle(0.0)
            sched.stopped(f"h{i}", 100.0 if tenant == "a" else 10_000.0, JobState.COMPLETED)
        t = 20_000.0
        sched.submit(job("runner", gpus=8, submit_s=t, duration_s=90_000.0), t)
        sched.cycle(t)
        for jid, tenant in (("b-demoted", "b"), ("a-demoted", "a")):  # both preempted before: in LAS's last queue
            sched.prior_attained_gpu_s[jid] = 10_000.0
            sched.submit(job(jid, gpus=8, tenant=tenant, submit_s=t, duration_s=90_000.0), t)
        assert sched.cycle(t).starts == []
        sched.stopped("runner", t + 50_000.0, JobState.COMPLETED)
        starts[policy] = [j.id for j, _ in sched.cycle(t + 50_000.0).starts]
    assert starts == {"steady": ["a-demoted"], "las": ["b-demoted"]}


def test_steady_beats_las_and_qssf_on_an_overloaded_heavy_tailed_workload() -> None:
    runs = compare(nodes(2), synthetic(1500, seed=4, load=1.2, cluster_gpus=16), ["steady", "las", "qssf"],
                   SimConfig(timing=False), workers=1)
    s = {name: run["summary"] for name, run in runs.items()}
    for other in ("las", "qssf"):
        assert s["steady"]["avg_jct_s"] < s[other]["avg_jct_s"], other
        assert s["steady"]["p99_jct_s"] < 0.85 * s[other]["p99_jct_s"], other
        assert s["steady"]["goodput_cv"] < s[other]["goodput_cv"], other
    assert s["steady"]["starvation_rate"] == 0 and s["steady"]["jobs_lost"] == 0
