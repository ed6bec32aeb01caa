"""Backfill plugins: what a job that cannot start holds back from the jobs after it.

strict: nothing after a blocked job may start (head-of-line FIFO, as in Tiresias's simulator)."""

from __future__ import annotations

from trimtab.framework import CycleContext, Plugin, Reservation
from trimtab.model import Job


class Strict(Plugin):
    """The first job that cannot start blocks every job ordered after it."""

    def backfill(self, job: Job, ctx: CycleContext) -> Reservation | None:
        return Reservation(job.id, None, None, ctx.now_s)


PLUGINS = {"strict": Strict}
