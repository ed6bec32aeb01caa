"""The usage book: what running jobs hold per tenant and per queue, in the dimensions quotas count.

Kept by the cycle as jobs start and stop; admission plugins read it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from trimtab.model import Job

if TYPE_CHECKING:
    from trimtab.policy import RunningJob

USAGE_DIMS = ("pods", "gpus", "cpu_milli", "mem_mib", "limit_cpu_milli", "limit_mem_mib", "gpu_milli")
GPU_MILLI_DIM = USAGE_DIMS.index("gpu_milli")  # GPU thousandths held: whole GPUs and shares alike


def usage_of(job: Job) -> np.ndarray:
    """What a running job counts against quotas, in the order of USAGE_DIMS."""
    t, lim = job.task, job.task_limits or job.task
    n = job.tasks
    return np.array([n, n * t.gpus, n * t.cpu_milli, n * t.mem_mib, n * lim.cpu_milli, n * lim.mem_mib,
                     n * t.gpu_milli_total], dtype=np.int64)


class UsageBook:
    """What running jobs hold, summed per tenant and per queue (`usage_of`), kept in step by the Framework as jobs
    start and stop, inside a cycle as well as between cycles. Plugins read it; only the Framework writes it."""

    def __init__(self) -> None:
        self.by_tenant: dict[str, np.ndarray] = {}
        self.by_queue: dict[str, np.ndarray] = {}
        self._jobs: dict[str, tuple[str, str, np.ndarray]] = {}
        self.removals = 0  # jobs taken off so far: while it stays put, usage only grows

    def __len__(self) -> int:
        return len(self._jobs)

    def tenant(self, name: str) -> np.ndarray:
        return self.by_tenant.get(name, _ZERO_USAGE)

    def queue(self, name: str) -> np.ndarray:
        return self.by_queue.get(name, _ZERO_USAGE)

    def add(self, job: Job) -> None:
        if job.id in self._jobs:
            return
        vec = usage_of(job)
        queue = job.queue or job.tenant
        self._jobs[job.id] = (job.tenant, queue, vec)
        self.by_tenant[job.tenant] = self.tenant(job.tenant) + vec
        self.by_queue[queue] = self.queue(queue) + vec

    def remove(self, job_id: str) -> None:
        entry = self._jobs.pop(job_id, None)
        if entry is not None:
            self.removals += 1
            tenant, queue, vec = entry
            self.by_tenant[tenant] = self.by_tenant[tenant] - vec
            self.by_queue[queue] = self.by_queue[queue] - vec

    def sync(self, running: Mapping[str, RunningJob]) -> None:
        """Catch up with jobs that started or stopped outside a cycle's view (e.g. re-adopted on restart)."""
        if len(self._jobs) == len(running) and all(j in running for j in self._jobs):
            return
        for job_id in [j for j in self._jobs if j not in running]:
            self.remove(job_id)
        for run in running.values():
            self.add(run.job)


_ZERO_USAGE = np.zeros(len(USAGE_DIMS), dtype=np.int64)
