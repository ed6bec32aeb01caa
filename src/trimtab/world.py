"""The one world loop: a world's Scheduler cycles, timed, with every field of each Decision applied through the
world's Actuator (the seam), and the one reason book of its pending jobs.

Owns Actuator, WorldLoop and the retry rule (`after_failure`). The simulator acts through its event engine
(sim/run.py), `trimtab serve` through its executors and store (serve/run/actuator.py), `trimtab kube` through
bindings, evictions and status writes (kube/live.py). What each world cannot act on it declares in
`Actuator.cannot`; the loop logs and counts each such field a Decision carries (`WorldLoop.dropped`): none is
dropped silently."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from trimtab.cluster import Allocation
from trimtab.model import Job, JobState
from trimtab.policy import Decision, Resize
from trimtab.scheduler import Scheduler
from trimtab.waits import ReasonBook

log = logging.getLogger(__name__)

# The fields of a Decision a world acts on, in the order the loop applies them (preemptions before the starts that
# take their GPUs). The others are records: `evictions`, `waiting` and `stalled` go to the reason book and to the
# world's `cycled`; `reservations` are the Scheduler's own (it keeps them booked) and are shown by `why`.
ACTED = ("preemptions", "starts", "resizes", "prefetches", "wake_s")


def after_failure(failures: int, max_retries: int) -> JobState:
    """The one retry rule of the worlds that retry (the simulator, `trimtab serve`): after its `failures`-th
    failed attempt a job is queued again (PENDING) while `failures` <= `max_retries`, else it has FAILED. An
    attempt lost with its node or GPU is not the job's failure: the world requeues it at once, uncounted
    (failover). On Kubernetes a pod's retries are its controller's (a Job's `backoffLimit`)."""
    return JobState.PENDING if failures <= max_retries else JobState.FAILED


class Actuator:
    """How one world acts on a Decision. Each method is called only with a non-empty field, in ACTED order, once
    per cycle, after the Scheduler has booked it: the world carries it out (or queues it) and reports what
    happens later as Scheduler calls (`stopped`, `node_down`, ...).

    `cannot`: the ACTED fields this world cannot act on. The built-in worlds: the simulator acts on all;
    `trimtab serve` has no data model (`prefetches`); `trimtab kube` neither resizes running pods nor loads data
    (`resizes`, `prefetches`)."""

    cannot: frozenset[str] = frozenset()

    def preempt(self, victims: list[str], now_s: float) -> None:
        """Stop the running jobs `victims` (the Scheduler has queued them again)."""
        raise NotImplementedError

    def start(self, starts: list[tuple[Job, Allocation]], now_s: float) -> None:
        """Start each job on its allocation."""
        raise NotImplementedError

    def resize(self, resizes: list[Resize], now_s: float) -> None:
        """Restart each running job on its new allocation."""
        raise NotImplementedError

    def prefetch(self, prefetches: list[tuple[Job, np.ndarray]], now_s: float) -> None:
        """Start loading each job's dataset onto the nodes given."""
        raise NotImplementedError

    def wake_at(self, time_s: float) -> None:
        """Run a cycle again no later than `time_s` (it may be now)."""
        raise NotImplementedError

    def cycled(self, decision: Decision, seconds: float, now_s: float) -> None:
        """A cycle that ran the plugins took `seconds` of wall time (for the world's records). Called before its
        Decision is applied."""


class WorldLoop:
    """One world's Scheduler and Actuator. The world calls `cycle(now_s)` whenever it wants decisions; `reasons`
    (with `explains`, each pending job's reason in words) holds why each pending job waits after the latest cycle
    that ran, by the one rule of waits.py (noted once the Decision is applied); `ran` says whether the latest cycle
ran the plugins. `dropped` counts the fields a world could not act on, by name."""

    def __init__(self, scheduler: Scheduler, actuator: Actuator, explains: bool = False) -> None:
        self.actuator = actuator
        self.explains = explains
        self.reasons: ReasonBook | None = ReasonBook(lambda job: self.scheduler.shape(job)) if explains else None
        self.dropped: Counter[str] = Counter()
        self.ran = False
        self.scheduler = scheduler

    @property
    def scheduler(self) -> Scheduler:
        return self._scheduler

    @scheduler.setter
    def scheduler(self, scheduler: Scheduler) -> None:
        """The loop's Scheduler (a world replaces it when the cluster grows: `Scheduler.with_nodes`)."""
        scheduler.framework.explains = self.explains
        self._scheduler = scheduler

    def cycle(self, now_s: float) -> Decision:
        """Run one cycle at `now_s` and apply its Decision; returns it."""
        scheduler = self._scheduler
        ran = scheduler.cycles_run
        started = time.perf_counter()
        decision = scheduler.cycle(now_s)
        self.ran = scheduler.cycles_run != ran
        if self.ran:
            self.actuator.cycled(decision, time.perf_counter() - started, now_s)
        self.apply(decision, now_s)
        if self.ran and self.reasons is not None:
            self.reasons.note(decision, scheduler.pending())
        return decision

    def apply(self, decision: Decision, now_s: float) -> None:
        """Every ACTED field of `decision`, through the actuator (those it cannot act on: logged and counted)."""
        act = self.actuator
        fields: list[tuple[str, Sequence[Any], Callable[[Any, float], None]]] = [
            ("preemptions", decision.preemptions, act.preempt), ("starts", decision.starts, act.start),
            ("resizes", decision.resizes, act.resize), ("prefetches", decision.prefetches, act.prefetch)]
        for name, items, carry_out in fields:
            if not items:
                continue
            if name in act.cannot:
                if not self.dropped[name]:
                    log.warning("this world cannot act on %s; %d dropped (counted in `dropped`)", name, len(items))
                self.dropped[name] += len(items)
                continue
            carry_out(items, now_s)
        if decision.resizes and "resizes" not in act.cannot and any(r.shrinks for r in decision.resizes):
            act.wake_at(now_s)  # the GPUs a shrink freed go to the waiting jobs now
        if decision.wake_s is not None and decision.wake_s > now_s:
            act.wake_at(decision.wake_s)
