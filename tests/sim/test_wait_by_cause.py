"""A simulated run keeps, per job, the time it waited by cause (`wait_by_cause_s`), and their sums."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from builders import job, nodes
from trimtab.model import Job, Resources, Taint
from trimtab.profile import Profile
from trimtab.sim.run import SimConfig, simulate

NO_LOSS = SimConfig(checkpoint_s=0.0, restart_s=0.0, timing=False)


def one_task(jid: str, gpus: int, duration_s: float = 100.0, **kw: object) -> Job:
    return Job(id=jid, submit_s=0.0, tasks=1, task=Resources(gpus=gpus), duration_s=duration_s, **kw)  # type: ignore[arg-type]


def waits(run: dict[str, Any]) -> dict[str, dict[str, float]]:
    return {j["id"]: j["wait_by_cause_s"] for j in run["jobs"]}


def test_a_quota_blocked_job_waits_under_quota():
    profile = Profile.load("fifo").with_admission("quota", {"tenant_gpus": {"team-a": 2}})
    run = simulate(nodes(1, 8), [job(k, 1, tenant="team-a") for k in (1, 2, 3)], profile, NO_LOSS)
    assert waits(run) == {"1": {}, "2": {}, "3": {"quota": 100.0}}
    assert run["wait_by_cause_s"] == {"quota": 100.0}


def test_a_capacity_blocked_job_waits_under_fit_and_the_job_behind_it_under_order():
    jobs = [one_task("a", 4), one_task("b", 2), one_task("c", 1)]
    run = simulate(nodes(1, 4), jobs, "fifo", NO_LOSS)
    assert waits(run) == {"a": {}, "b": {"fit": 100.0}, "c": {"order": 100.0}}
    assert run["wait_by_cause_s"] == {"fit": 100.0, "order": 100.0}


def test_a_taint_blocked_job_waits_under_fit_until_an_untainted_node_frees():
    tainted = replace(nodes(1, 4)[0], name="t0", taints=(Taint("dedicated", "infer"),))
    plain = replace(nodes(1, 4)[0], name="p0")
    run = simulate([tainted, plain], [one_task("a", 4), one_task("c", 4, duration_s=10.0)], "fifo", NO_LOSS)
    assert waits(run)["c"] == {"fit": 100.0}
    assert [r["nodes"] for r in run["jobs"][1]["runs"]] == [["p0"]]


def test_a_gang_follower_waits_under_gang_and_the_gang_under_fit():
    profile = Profile.load("fifo").with_admission("min-member", {}).model_copy(update={"backfill": []})
    jobs = [one_task("big", 3), job("gang", 2), one_task("extra", 1, after="gang")]
    run = simulate(nodes(1, 4), jobs, profile, NO_LOSS)
    assert waits(run) == {"big": {}, "gang": {"fit": 100.0}, "extra": {"gang": 100.0}}


def test_the_waits_of_a_preempted_job_add_up_over_its_returns_to_the_queue():
    low = replace(one_task("low", 4, duration_s=300.0), priority=0)
    high = replace(one_task("high", 4), submit_s=50.0, priority=10)
    run = simulate(nodes(1, 4), [low, high], "priority", NO_LOSS)
    low_rec = next(j for j in run["jobs"] if j["id"] == "low")
    assert low_rec["preemptions"] == 1
    waited = sum(b["start"] - a["end"] for a, b in zip(low_rec["runs"], low_rec["runs"][1:], strict=False))
    assert sum(low_rec["wait_by_cause_s"].values()) == waited == 100.0
