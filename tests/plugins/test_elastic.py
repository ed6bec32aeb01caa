"""The resize plugins (plugins/elastic.py): grow into idle GPUs, shrink for a waiting job, hysteresis."""

from __future__ import annotations

import pytest

from builders import job, nodes
from trimtab.cluster import ClusterState
from trimtab.model import Elastic, Job, JobState, LinearScaling
from trimtab.profile import Profile
from trimtab.scheduler import Scheduler


def elastic_job(jid: str, tasks: int, low: int, high: int, resize_s: float = 30.0, **kw: object) -> Job:
    return job(jid, tasks, scaling=LinearScaling(), elastic=Elastic(low, high, resize_s), duration_s=10_000.0, **kw)


def scheduler(profile: Profile | str = "elastic", gpus: int = 8) -> Scheduler:
    return Scheduler(ClusterState(nodes(1, gpus)), profile)


def by_priority(**shrink: object) -> Profile:
    """Priority order (so a later job may outrank an elastic one), no preemption, the two resize plugins."""
    return Profile(name="t", order=["priority", "fifo"], resize=["elastic-shrink", "elastic-grow"],
                   args={"elastic-shrink": {"min_interval_s": 60, **shrink},
                         "elastic-grow": {"min_interval_s": 60, "repay": 1.0}})


def test_grow_fills_idle_gpus_once_the_interval_passed() -> None:
    s = scheduler(by_priority())
    s.submit(elastic_job("a", 2, 1, 8), 0.0)
    first = s.cycle(0.0)
    assert [j.id for j, _ in first.starts] == ["a"] and not first.resizes
    assert first.wake_s == 60.0  # the interval since its start ends then
    assert not s.cycle(30.0).resizes  # nothing changed, not due yet
    grown = s.cycle(60.0)
    assert [(r.job_id, r.before.tasks, r.alloc.tasks) for r in grown.resizes] == [("a", 2, 8)]
    assert s.running["a"].alloc.tasks == 8 and s.running["a"].start_s == 60.0
    assert s.cluster.free_gpus_total == 0


def test_grow_stays_within_the_range() -> None:
    s = scheduler(by_priority())
    s.submit(elastic_job("a", 2, 1, 5), 0.0)
    s.cycle(0.0)
    assert [r.alloc.tasks for r in s.cycle(60.0).resizes] == [5]
    assert s.cluster.free_gpus_total == 3


def test_no_grow_whose_gain_does_not_repay_the_restart() -> None:
    s = scheduler(by_priority())
    s.submit(elastic_job("a", 2, 1, 8, resize_s=1000.0), 0.0)  # 60 s run, 75% faster: saves 45 s < 1000 s
    s.cycle(0.0)
    assert not s.cycle(60.0).resizes
    assert s.running["a"].alloc.tasks == 2


def test_fixed_jobs_are_never_resized() -> None:
    s = scheduler(by_priority())
    s.submit(job("a", 2, duration_s=10_000.0), 0.0)
    s.cycle(0.0)
    decision = s.cycle(600.0)
    assert not decision.resizes and s.cluster.free_gpus_total == 6


def test_shrink_makes_room_for_a_job_ordered_first() -> None:
    s = scheduler(by_priority())
    s.submit(elastic_job("a", 8, 2, 8), 0.0)
    s.cycle(0.0)
    s.submit(job("b", 4, submit_s=100.0, priority=1, duration_s=100.0), 100.0)
    decision = s.cycle(100.0)
    assert [(r.job_id, r.alloc.tasks) for r in decision.resizes] == [("a", 4)]
    assert not decision.starts  # the GPUs it freed are b's in the next cycle
    assert [j.id for j, _ in s.cycle(100.0).starts] == ["b"]  # the world's next cycle at once
    assert s.running["a"].alloc.tasks == 4 and s.cluster.free_gpus_total == 0


def test_shrink_waits_for_the_interval_and_the_minimum() -> None:
    s = scheduler(by_priority())
    s.submit(elastic_job("a", 8, 6, 8), 0.0)
    s.cycle(0.0)
    s.submit(job("b", 4, submit_s=10.0, priority=1), 10.0)
    early = s.cycle(10.0)
    assert not early.resizes and early.wake_s == 60.0
    assert not s.cycle(60.0).resizes  # a may give back 2 GPUs only: b still would not fit
    assert s.running["a"].alloc.tasks == 8


def test_shrink_refused_when_the_loss_outweighs_the_gain() -> None:
    s = scheduler(by_priority(max_loss=0.2))  # b needs half of a: a loses 0.5 of its speedup
    s.submit(elastic_job("a", 8, 2, 8), 0.0)
    s.cycle(0.0)
    s.submit(job("b", 4, submit_s=100.0, priority=1), 100.0)
    assert not s.cycle(100.0).resizes


def test_shrink_spares_jobs_ordered_before_the_waiting_one() -> None:
    s = scheduler(by_priority())
    s.submit(elastic_job("a", 8, 2, 8, priority=2), 0.0)
    s.cycle(0.0)
    s.submit(job("b", 4, submit_s=100.0, priority=1), 100.0)
    assert not s.cycle(100.0).resizes


def below(**grow: object) -> Profile:
    """FIFO, no preemption, elastic-grow sizing starts below the request."""
    return Profile(name="t", order=["fifo"], resize=["elastic-grow"],
                   args={"elastic-grow": {"min_interval_s": 60, "repay": 1.0, "start_below": True, **grow}})


class TwoGpusAtMost:
    """A job that gains nothing beyond 2 GPUs."""

    def throughput(self, gpus: int, nodes: int) -> float:
        return float(min(gpus, 2))


def test_start_below_the_request_on_what_is_free() -> None:
    s = scheduler(below())
    s.submit(job("fixed", 5, duration_s=1_000.0), 0.0)
    s.submit(elastic_job("a", 6, 2, 8), 0.0)
    first = s.cycle(0.0)
    assert [(j.id, alloc.tasks) for j, alloc in first.starts] == [("fixed", 5), ("a", 3)]
    assert s.cluster.free_gpus_total == 0 and s.running["a"].alloc.tasks == 3
    s.stopped("fixed", 1_000.0, JobState.COMPLETED)
    assert [(r.job_id, r.alloc.tasks) for r in s.cycle(1_000.0).resizes] == [("a", 8)]  # grown later


def test_no_start_below_without_the_arg_or_under_the_minimum() -> None:
    for profile, low in ((by_priority(), 2), (below(), 4)):
        s = scheduler(profile)
        s.submit(job("fixed", 5, duration_s=1_000.0), 0.0)
        s.submit(elastic_job("a", 6, low, 8), 0.0)
        decision = s.cycle(0.0)
        assert [j.id for j, _ in decision.starts] == ["fixed"] and "a" in decision.waiting
        assert s.cluster.free_gpus_total == 3


def test_start_below_sized_by_the_scaling_model() -> None:
    s = scheduler(below())
    s.submit(job("fixed", 2, duration_s=1_000.0), 0.0)
    s.submit(job("a", 8, scaling=TwoGpusAtMost(), elastic=Elastic(1, 8, 30.0), duration_s=10_000.0), 0.0)
    s.cycle(0.0)
    assert s.running["a"].alloc.tasks == 2  # 6 fit, but a third GPU would gain nothing
    assert s.cluster.free_gpus_total == 4


def test_start_below_leaves_fixed_jobs_alone() -> None:
    s = scheduler(below())
    s.submit(job("fixed", 5, duration_s=1_000.0), 0.0)
    s.submit(job("b", 6, duration_s=1_000.0), 0.0)
    decision = s.cycle(0.0)
    assert [j.id for j, _ in decision.starts] == ["fixed"] and "b" in decision.waiting


@pytest.mark.parametrize("name", ["elastic", "steady"])
def test_builtin_profiles_resize(name: str) -> None:
    profile = Profile.load(name)
    assert profile.resize == ["elastic-shrink", "elastic-grow"]
    assert profile.args["elastic-grow"]["start_below"] is True


def test_start_below_behind_a_fixed_job_of_the_same_request() -> None:
    s = scheduler(below())
    s.submit(job("fixed", 5, duration_s=1_000.0), 0.0)
    s.submit(job("b", 6, submit_s=1.0, duration_s=1_000.0), 1.0)  # cannot start: its request's shape is blocked
    s.submit(elastic_job("a", 6, 2, 8, submit_s=2.0), 2.0)  # the same request, but it may start smaller
    decision = s.cycle(2.0)
    assert [(j.id, alloc.tasks) for j, alloc in decision.starts] == [("fixed", 5), ("a", 3)]


def test_start_below_keeps_off_reserved_gpus_even_when_it_would_end_in_time() -> None:
    profile = Profile(name="t", order=["fifo"], backfill=[{"reserve": {"min_gpus": 8}}], resize=["elastic-grow"],
                      args={"elastic-grow": {"start_below": True}})
    s = scheduler(profile)
    s.submit(job("r", 4, duration_s=1_000.0), 0.0)
    s.submit(job("big", 8, submit_s=1.0, duration_s=1_000.0), 1.0)  # reserves the 4 free GPUs from t=1000
    s.submit(job("a", 6, submit_s=2.0, scaling=LinearScaling(), elastic=Elastic(1, 8, 30.0), duration_s=10.0), 2.0)
    decision = s.cycle(2.0)
    assert [j.id for j, _ in decision.starts] == ["r"] and decision.reservations
    assert "a" in decision.waiting and s.cluster.free_gpus_total == 4  # on 4 GPUs it could overrun the reservation
