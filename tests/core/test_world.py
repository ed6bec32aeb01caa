"""The one world loop (trimtab.world): it applies every field of a Decision through the world's actuator, in order,
and counts what a world cannot act on instead of dropping it silently."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from builders import job, nodes
from trimtab.cluster import Allocation, ClusterState
from trimtab.model import Resources
from trimtab.policy import Decision, Resize
from trimtab.scheduler import Scheduler
from trimtab.world import ACTED, Actuator, WorldLoop


class Recording(Actuator):
    def __init__(self, cannot: frozenset[str] = frozenset()) -> None:
        self.cannot = cannot
        self.calls: list[tuple[str, object]] = []

    def preempt(self, victims, now_s):  # type: ignore[no-untyped-def]
        self.calls.append(("preempt", list(victims)))

    def start(self, starts, now_s):  # type: ignore[no-untyped-def]
        self.calls.append(("start", [j.id for j, _ in starts]))

    def resize(self, resizes, now_s):  # type: ignore[no-untyped-def]
        self.calls.append(("resize", [r.job_id for r in resizes]))

    def prefetch(self, prefetches, now_s):  # type: ignore[no-untyped-def]
        self.calls.append(("prefetch", [j.id for j, _ in prefetches]))

    def wake_at(self, time_s):  # type: ignore[no-untyped-def]
        self.calls.append(("wake_at", time_s))

    def cycled(self, decision, seconds, now_s):  # type: ignore[no-untyped-def]
        self.calls.append(("cycled", seconds >= 0))


def _alloc(tasks: int) -> Allocation:
    return Allocation(np.array([0]), np.array([tasks]), Resources(gpus=1))


def test_a_preemption_is_applied_before_the_start_it_makes_room_for() -> None:
    scheduler = Scheduler(ClusterState(nodes(1, gpus=8)), "priority")
    act = Recording()
    loop = WorldLoop(scheduler, act)
    scheduler.submit(job("low", gpus=8, priority=0), 0.0)
    loop.cycle(0.0)
    scheduler.submit(job("high", gpus=8, priority=10), 5.0)
    act.calls.clear()
    loop.cycle(5.0)
    assert act.calls == [("cycled", True), ("preempt", ["low"]), ("start", ["high"])]
    act.calls.clear()
    loop.cycle(6.0)  # nothing changed: the plugins do not run, nothing is applied
    assert act.calls == [] and not loop.ran


def test_every_acted_field_reaches_the_actuator_and_a_shrink_wakes_the_loop_now() -> None:
    act = Recording()
    loop = WorldLoop(Scheduler(ClusterState(nodes(1)), "fifo"), act)
    decision = Decision(preemptions=["v"], starts=[(job("s"), _alloc(1))],
                        resizes=[Resize("e", _alloc(4), _alloc(2))], prefetches=[(job("p"), np.array([0]))],
                        wake_s=30.0)
    loop.apply(decision, 10.0)
    assert act.calls == [("preempt", ["v"]), ("start", ["s"]), ("resize", ["e"]), ("prefetch", ["p"]),
                         ("wake_at", 10.0), ("wake_at", 30.0)]
    assert ACTED == ("preemptions", "starts", "resizes", "prefetches", "wake_s")


def test_a_field_the_world_cannot_act_on_is_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    act = Recording(cannot=frozenset({"prefetches", "resizes"}))
    loop = WorldLoop(Scheduler(ClusterState(nodes(1)), "fifo"), act)
    decision = Decision(starts=[(job("s"), _alloc(1))], resizes=[Resize("e", _alloc(4), _alloc(2))],
                        prefetches=[(job("p"), np.array([0])), (job("q"), np.array([0]))])
    with caplog.at_level(logging.WARNING, logger="trimtab.world"):
        loop.apply(decision, 0.0)
        loop.apply(decision, 1.0)
    assert act.calls == [("start", ["s"]), ("start", ["s"])]  # no resize, no prefetch, no shrink wake-up
    assert loop.dropped == {"prefetches": 4, "resizes": 2}
    assert sum("cannot act on prefetches" in r.message for r in caplog.records) == 1  # once, then counted


def test_the_reason_book_holds_why_each_pending_job_waits_after_a_cycle() -> None:
    scheduler = Scheduler(ClusterState(nodes(1, gpus=8)), "fifo-backfill")
    loop = WorldLoop(scheduler, Recording(), explains=True)
    scheduler.submit(job("big", gpus=16), 0.0)
    loop.cycle(0.0)
    assert loop.reasons is not None
    assert loop.reasons.latest("big").reason.startswith("waiting for room for the gang's 16 members")
    assert WorldLoop(scheduler, Recording()).reasons is None  # a simulation keeps none (its WaitBook counts)


def test_the_retry_rule_retries_while_failures_are_within_the_retries() -> None:
    from trimtab.model import JobState
    from trimtab.world import after_failure

    assert [after_failure(n, 2) for n in (1, 2, 3)] == [JobState.PENDING, JobState.PENDING, JobState.FAILED]
    assert after_failure(1, 0) is JobState.FAILED
