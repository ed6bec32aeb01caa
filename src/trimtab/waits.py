"""WaitBook: the time each job waited, by the cause that held it (policy.Cause), from the statuses the cycles give.

Kept by the simulation's Recorder (per-job `wait_by_cause_s`, the tenants' `quota_blocked_s`); the live service
applies the same rule to each job's latest status (serve/daemon.py). The rule (Decision's "why jobs wait"): a job
joins the queue under ORDER (no cycle has examined it); each status a cycle gives it (`Decision.waiting`) starts
an interval of that status's cause if the cause changed; a cycle that stalls at it for want of a free GPU
(`Decision.stalled`) only replaces ORDER; a start, a cancellation or the end of the run closes the interval."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from trimtab.policy import Cause, Status

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
