"""Tenant quotas as an admit plugin: a job waits while its tenant's running jobs plus it would exceed the tenant's
GPU quota. Added by the daemon to whatever policy it serves, so the policy itself runs unchanged."""

from __future__ import annotations

from collections.abc import Mapping

from trimtab.cluster import GPU_MILLI
from trimtab.model import Job
from trimtab.policy import Cause, Code, CycleContext, Plugin, Status


class TenantQuota(Plugin):
    """admit: WAIT when `held + job's GPUs > quota` for the job's tenant, counted in milli-GPU (a share of 500 is
    half a GPU of the quota). `held` is what the tenant's running jobs hold, counted in `open`, plus what its jobs
    admitted earlier in the same cycle ask for, so one cycle never overshoots (a job admitted but then not placed
    may hold back a later job of its tenant until the next cycle). `quotas` (whole GPUs) is read live: the daemon
    updates the mapping in place."""

    def __init__(self, quotas: Mapping[str, int | None]) -> None:
        self.quotas = quotas
        self._held_milli: dict[str, int] = {}

    def open(self, ctx: CycleContext) -> None:
        held: dict[str, int] = {}
        for run in ctx.running.values():
            held[run.job.tenant] = held.get(run.job.tenant, 0) + run.alloc.gpu_milli
        self._held_milli = held

    def admit(self, job: Job, ctx: CycleContext) -> Status:
        quota = self.quotas.get(job.tenant)
        if quota is None:
            return Status.ok()
        held = self._held_milli.get(job.tenant, 0)
        wants = job.tasks * job.task.gpu_milli_total
        if held + wants > quota * GPU_MILLI:
            return Status(Code.WAIT, f"tenant {job.tenant} holds {held / GPU_MILLI:g} of its {quota} GPUs",
                          self.name, Cause.QUOTA)
        self._held_milli[job.tenant] = held + wants  # later jobs of this cycle see what this one will take
        return Status.ok()
