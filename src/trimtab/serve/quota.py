"""Tenant quotas as an admit plugin: a job waits while its tenant's running jobs plus it would exceed the tenant's
GPU quota. Added by the daemon to whatever policy it serves, so the policy itself runs unchanged."""

from __future__ import annotations

from collections.abc import Mapping

from trimtab.framework import Code, CycleContext, Plugin, Status
from trimtab.model import Job


class TenantQuota(Plugin):
    """admit: WAIT when `held + job.gpus > quota` for the job's tenant. `held` is the GPUs of the tenant's running
    jobs, counted in `open`, plus those of its jobs admitted earlier in the same cycle, so one cycle never
    overshoots (a job admitted but then not placed may hold back a later job of its tenant until the next cycle).
    `quotas` is read live: the daemon updates the mapping in place."""

    def __init__(self, quotas: Mapping[str, int | None]) -> None:
        self.quotas = quotas
        self._held: dict[str, int] = {}

    def open(self, ctx: CycleContext) -> None:
        held: dict[str, int] = {}
        for run in ctx.running.values():
            held[run.job.tenant] = held.get(run.job.tenant, 0) + run.alloc.gpus
        self._held = held

    def admit(self, job: Job, ctx: CycleContext) -> Status:
        quota = self.quotas.get(job.tenant)
        if quota is None:
            return Status.ok()
        held = self._held.get(job.tenant, 0)
        if held + job.gpus > quota:
            return Status(Code.WAIT, f"tenant {job.tenant} holds {held} of its {quota} GPUs", self.name)
        self._held[job.tenant] = held + job.gpus  # later jobs of this cycle see what this one will take
        return Status.ok()
