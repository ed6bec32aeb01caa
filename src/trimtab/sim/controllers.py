"""The workload controllers of a simulated Kubernetes world: what brings an evicted job's pods back, and when
(model.PodBackoff, read from a batch/v1 Job). The rules and their sources: docs/kubernetes.md."""

from __future__ import annotations

from trimtab.model import Job


class PodRecreation:
    """Per controller record, the pods failed since its last success (they set the backoff) and the failures that
    count toward its limit."""

    def __init__(self) -> None:
        self.since_success: dict[str, int] = {}
        self.counted: dict[str, int] = {}

    def evicted(self, job: Job) -> float | None:
        """Book an eviction of `job`'s pods (its `pod_backoff` is set): the seconds until the controller has
        recreated them, or None when the eviction has passed its limit and the job has failed."""
        backoff = job.pod_backoff
        assert backoff is not None
        key, failed = (job.id, 1) if backoff.per_index else (backoff.record, job.tasks)
        since = self.since_success[key] = self.since_success.get(key, 0) + failed
        if backoff.counts:
            self.counted[key] = self.counted.get(key, 0) + failed
            if self.counted[key] > backoff.limit:
                return None
        return backoff.delay_s(since) + backoff.lag_s

    def succeeded(self, job: Job) -> None:
        """`job`'s pods succeeded: its record's backoff starts again from none (its count toward the limit
        stays)."""
        if job.pod_backoff is not None:
            self.since_success.pop(job.id if job.pod_backoff.per_index else job.pod_backoff.record, None)
