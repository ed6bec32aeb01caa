"""The one rule of why a job waits, kept two ways: WaitBook, the time each job waited by the cause that held it
(policy.Cause), and ReasonBook, each pending job's latest reason (the live worlds: `trimtab serve`'s stored
reasons, `trimtab kube`'s pod conditions, both through the world loop, world.py).

The rule (Decision's "why jobs wait"): a job joins the queue under ORDER (no cycle has examined it); each status a
cycle gives it (`Decision.waiting`) replaces its cause; a cycle that stalls at it for want of a free GPU
(`Decision.stalled`) only replaces ORDER; a start, a cancellation or the end of the run closes the interval.
WaitBook is kept by the simulation's Recorder (per-job `wait_by_cause_s`, the tenants' `quota_blocked_s`).
ReasonBook adds what a live queue needs: a job no cycle has examined takes the status the cycle gave the job of its
request shape it skipped it for (the cycle skips the rest of a shape once one of it is blocked, because they would
get the same answer), so a tenant's fourth job over its quota says "quota", not "behind a higher-priority job";
and a preempted job says for whom."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from types import MappingProxyType

from trimtab.model import Job
from trimtab.policy import Cause, Code, Decision, Status
from trimtab.why import BEHIND

NO_STATUSES: Mapping[str, Status] = MappingProxyType({})


class WaitBook:
    """Open intervals (pending job -> its cause and since when) and closed sums (job -> cause -> seconds). Costs
    one dict look-up per status a cycle gives, nothing for the jobs it does not reach."""

    def __init__(self) -> None:
        self._open: dict[str, tuple[Cause, float]] = {}
        self._closed: dict[str, dict[Cause, float]] = {}

    def queued(self, job_id: str, now_s: float) -> None:
        """The job joined the queue (submitted, preempted, or to be retried)."""
        self._open[job_id] = (Cause.ORDER, now_s)

    def left(self, job_id: str, now_s: float) -> None:
        """The job left the queue (it started, or was cancelled while waiting)."""
        cause, since = self._open.pop(job_id)
        book = self._closed.setdefault(job_id, {})
        book[cause] = book.get(cause, 0.0) + now_s - since

    def seen(self, now_s: float, waiting: Mapping[str, Status], stalled: Mapping[str, Status] = NO_STATUSES) -> None:
        """The statuses of one cycle that ran (Decision.waiting, Decision.stalled)."""
        open_ = self._open
        for job_id, status in waiting.items():
            current = open_.get(job_id)
            if current is None:
                open_[job_id] = (status.cause, now_s)
            elif current[0] is not status.cause:
                self.left(job_id, now_s)
                open_[job_id] = (status.cause, now_s)
        for job_id, status in stalled.items():
            current = open_.get(job_id)
            if current is not None and current[0] is Cause.ORDER and status.cause is not Cause.ORDER:
                self.left(job_id, now_s)
                open_[job_id] = (status.cause, now_s)

    def closed_s(self, job_id: str, cause: Cause) -> float:
        """Seconds `job_id` waited under `cause` in intervals that have ended."""
        return self._closed.get(job_id, {}).get(cause, 0.0)

    def by_cause_s(self, job_id: str, end_s: float) -> dict[str, float]:
        """Seconds waited per cause (non-zero ones, in Cause order), an open interval counted up to `end_s`."""
        total = dict(self._closed.get(job_id, {}))
        current = self._open.get(job_id)
        if current is not None:
            total[current[0]] = total.get(current[0], 0.0) + max(end_s - current[1], 0.0)
        return {str(cause): total[cause] for cause in Cause if total.get(cause)}

    def report(self, job_ids: Sequence[str], end_s: float) -> tuple[list[dict[str, float]], dict[str, float]]:
        """For a run's JSON: per job of `job_ids`, its `by_cause_s` up to `end_s`, and their sums over all jobs
        (seconds rounded to 6 decimals)."""
        per_job = [self.by_cause_s(job_id, end_s) for job_id in job_ids]
        totals: dict[str, float] = {}
        for waited in per_job:
            for cause, seconds in waited.items():
                totals[cause] = totals.get(cause, 0.0) + seconds
                waited[cause] = round(seconds, 6)
        return per_job, {cause: round(totals[cause], 6) for cause in map(str, Cause) if cause in totals}


class ReasonBook:
    """Kept by a world loop: `note` after every cycle that ran, `unsaved` for what to write."""

    def __init__(self, shape: Callable[[Job], Hashable]) -> None:
        self.shape = shape  # the scheduler's request shape of a job
        self._latest: dict[str, Status] = {}
        self._saved: dict[str, str] = {}  # job -> the reason text the store holds

    def latest(self, job_id: str) -> Status:
        """The latest status of a pending job (BEHIND when no cycle has said anything of it)."""
        return self._latest.get(job_id, BEHIND)

    def note(self, decision: Decision, pending: Sequence[Job]) -> None:
        """The statuses of a cycle that ran, for the jobs pending after it in queue order (the others are
        forgotten)."""
        previous, latest = self._latest, {}
        by_shape: dict[Hashable, Status] = {}  # the first examined job of each shape: the one the others wait on
        unexamined: list[Job] = []
        for job in pending:
            status = decision.waiting.get(job.id)
            if status is not None:
                by_shape.setdefault(self.shape(job), status)
            else:
                status = previous.get(job.id)
                if status is None and job.id in decision.stalled:
                    status = decision.stalled[job.id]
            if status is None:
                unexamined.append(job)
            else:
                latest[job.id] = status
        if by_shape:
            for job in unexamined:
                status = by_shape.get(self.shape(job))
                if status is not None:
                    latest[job.id] = status
        for eviction in decision.evictions:
            for victim in eviction.victims:
                latest[victim] = Status(Code.WAIT, f"preempted for job {eviction.job_id}; behind it in the queue",
                                        cause=Cause.ORDER, hint=BEHIND.hint)
        self._latest = latest
        ids = {job.id for job in pending}
        self._saved = {job_id: text for job_id, text in self._saved.items() if job_id in ids}

    def unsaved(self, pending: Sequence[Job]) -> list[tuple[str, str]]:
        """(job id, reason text) of the pending jobs whose reason the store does not hold yet; marked saved."""
        out = []
        for job in pending:
            text = self.latest(job.id).reason
            if self._saved.get(job.id) != text:
                self._saved[job.id] = text
                out.append((job.id, text))
        return out
