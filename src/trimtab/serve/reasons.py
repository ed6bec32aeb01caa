"""ReasonBook: the live service's latest reason for each pending job, from the statuses its cycles give, and the
texts the store does not hold yet (it is written only when a job's reason changes, not every cycle).

The rule is the simulation's (waits.WaitBook, Decision's "why jobs wait"), with one addition that a live queue
needs: a job no cycle has examined takes the status the cycle gave the job of its request shape it skipped it
for (the cycle skips the rest of a shape once one of it is blocked, because they would get the same answer), so
a tenant's fourth job over its quota says "quota", not "behind a higher-priority job"."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from trimtab.model import Job
from trimtab.policy import Cause, Code, Decision, Status
from trimtab.why import BEHIND


class ReasonBook:
    """Kept by the daemon under its lock: `note` after every cycle that ran, `unsaved` for what to write."""

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
