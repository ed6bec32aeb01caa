"""Why jobs wait: the statuses a cycle gives the jobs it cannot start (causes always, words with
`Framework.explains`), in kube-scheduler's FitError shape, and `why.explain` on demand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders import job, nodes
from trimtab.cluster import ClusterState
from trimtab.model import Job, JobState, Resources, Taint
from trimtab.policy import Cause, Code, Status
from trimtab.profile import Profile
from trimtab.scheduler import Scheduler
from trimtab.waits import WaitBook
from trimtab.why import BEHIND, explain


def one_task(jid: str, gpus: int, duration_s: float = 100.0, **kw: object) -> Job:
    return Job(id=jid, submit_s=0.0, tasks=1, task=Resources(gpus=gpus), duration_s=duration_s, **kw)  # type: ignore[arg-type]


def explaining(cluster_nodes: list, profile: Profile | str = "fifo") -> Scheduler:
    sched = Scheduler(ClusterState(cluster_nodes), profile)
    sched.framework.explains = True
    return sched


def test_a_quota_blocked_job_says_who_holds_the_quota_and_what_frees_it():
    profile = Profile.load("fifo").with_admission("quota", {"tenant_gpus": {"team-a": 2}})
    sched = explaining(nodes(1, 8), profile)
    for k in (1, 2, 3):
        sched.submit(job(k, 1, tenant="team-a"), 0.0)
    decision = sched.cycle(0.0)
    assert [j.id for j, _ in decision.starts] == ["1", "2"]
    status = decision.waiting["3"]
    assert (status.reason, status.cause) == ("quota: team-a holds 2 of 2 GPUs", Cause.QUOTA)
    assert status.hint == "needs 1 GPU: starts when team-a's running jobs free 1 or the admin raises the quota to 3"


def test_a_job_too_large_for_any_node_counts_the_nodes_as_kube_scheduler_does():
    sched = explaining(nodes(2, 4))
    sched.submit(one_task("a", 3), 0.0)
    sched.submit(one_task("b", 3), 0.0)
    sched.submit(one_task("c", 4), 0.0)
    decision = sched.cycle(0.0)
    status = decision.waiting["c"]
    assert status.cause is Cause.FIT
    assert status.reason == "0/2 nodes are available: 2 have too few free GPUs."
    assert status.hint == "needs 4 GPUs on one node; largest free: 1 on node n000 (of 2 nodes it may use)"


def test_tainted_nodes_are_counted_apart_and_the_reasons_are_sorted():
    tainted = [replace(n, taints=(Taint("dedicated", "infer"),)) for n in nodes(2, 4)]
    plain = [replace(n, name=f"p{i}") for i, n in enumerate(nodes(2, 4))]
    sched = explaining([*tainted, *plain])
    sched.submit(one_task("a", 3), 0.0)
    sched.submit(one_task("b", 3), 0.0)
    sched.submit(one_task("c", 4), 0.0)
    decision = sched.cycle(0.0)
    assert decision.waiting["c"].reason == "0/4 nodes are available: 2 are tainted, 2 have too few free GPUs."
    assert "largest free: 1 on node p0 (of 2 nodes it may use)" in decision.waiting["c"].hint


def test_a_gang_says_how_many_of_its_members_have_room():
    sched = explaining(nodes(2, 2))
    sched.submit(one_task("a", 1), 0.0)
    sched.submit(job("g", 4), 0.0)  # four tasks of one GPU: three have room
    decision = sched.cycle(0.0)
    status = decision.waiting["g"]
    assert status.cause is Cause.FIT
    assert status.reason == "waiting for room for the gang's 4 members: room for 3 on 2/2 nodes."


def test_a_follower_of_a_gang_waits_for_the_gang():
    profile = Profile.load("fifo").with_admission("min-member", {}).model_copy(update={"backfill": []})
    sched = explaining(nodes(1, 4), profile)
    sched.submit(one_task("big", 3), 0.0)
    sched.submit(job("gang", 2), 0.0)
    sched.submit(one_task("extra", 1, after="gang"), 0.0)
    decision = sched.cycle(0.0)
    assert decision.waiting["gang"].reason == "waiting for room for the gang's 2 members: room for 1 on 1/1 nodes."
    status = decision.waiting["extra"]
    assert (status.cause, status.plugin) == (Cause.GANG, "min-member")
    assert status.reason.startswith("waiting for its gang gang to start")
    assert status.hint == "starts once job gang (the gang's minimum) has started"


def test_gpus_reserved_for_a_job_ahead_keep_a_later_one_out_and_say_for_whom():
    profile = Profile.load("reserve")
    for explains in (False, True):
        sched = Scheduler(ClusterState(nodes(1, 8)), profile)
        sched.framework.explains = explains
        sched.submit(one_task("a", 4), 0.0)
        sched.submit(one_task("big", 8), 0.0)
        sched.submit(one_task("c", 2, duration_s=500.0), 0.0)
        decision = sched.cycle(0.0)
        status = decision.stalled["c"]
        assert status.cause is Cause.RESERVATION
        if explains:
            assert status.reason == "reserved for job big: 0/1 nodes are available: 1 have their free GPUs reserved."


def test_the_cause_alone_costs_no_words_without_explains():
    sched = Scheduler(ClusterState(nodes(2, 4)), "fifo")
    sched.submit(one_task("a", 3), 0.0)
    sched.submit(one_task("b", 3), 0.0)
    sched.submit(one_task("c", 4), 0.0)
    assert sched.cycle(0.0).waiting["c"].reason == "does not fit now"


def test_explain_counts_afresh_and_says_behind_when_the_job_fits_now():
    sched = Scheduler(ClusterState(nodes(1, 4)), "fifo")
    sched.submit(one_task("a", 4), 0.0)
    sched.submit(one_task("b", 2), 0.0)
    sched.cycle(0.0)
    ctx = sched._cycle_context(1.0)
    b = sched.jobs["b"]
    assert explain(b, ctx, sched.framework.filter, None).reason == "0/1 nodes are available: 1 have too few free GPUs."
    sched.stopped("a", 10.0, JobState.COMPLETED)
    assert explain(b, sched._cycle_context(10.0), sched.framework.filter, None) is BEHIND
    held = Status(Code.WAIT, "quota: x", cause=Cause.QUOTA, hint="raise it")
    assert explain(b, ctx, sched.framework.filter, held) is held  # an admit plugin's answer is not asked again
    bare = explain(b, ctx, sched.framework.filter, replace(held, hint=""))
    assert (bare.reason, bare.hint) == ("quota: x", "starts when its tenant's or queue's running jobs end or the admin "
                                                    "raises the quota")


@pytest.mark.parametrize("stalled_first", [False, True])
def test_the_wait_book_keeps_an_examined_cause_over_a_stall(stalled_first: bool):
    book = WaitBook()
    book.queued("j", 0.0)
    fit, quota = Status(Code.WAIT, cause=Cause.FIT), Status(Code.WAIT, cause=Cause.QUOTA)
    if stalled_first:
        book.seen(5.0, {}, {"j": fit})  # not examined yet: the stall counts as fit
        book.seen(10.0, {"j": quota}, {})
    else:
        book.seen(5.0, {"j": quota}, {})
        book.seen(10.0, {}, {"j": fit})  # examined before: still held by quota
    book.left("j", 30.0)
    expected = {"order": 5.0, "fit": 5.0, "quota": 20.0} if stalled_first else {"quota": 25.0, "order": 5.0}
    assert book.by_cause_s("j", 99.0) == expected
