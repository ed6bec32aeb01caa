"""`trimtab serve`'s actuator of the world loop (world.py): a Decision carried out through the store and the
executors. A start commits its attempt and launches it once its GPUs are free (the device book); a preemption or a
resize stops the attempt's tasks with the grace of a stop (a resize is a restart on the new allocation). It cannot
load data (`prefetches`: serve has no data model)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sqlalchemy import select, update

from trimtab.cluster import Allocation
from trimtab.model import Job
from trimtab.policy import Decision, Reservation, Resize
from trimtab.serve.run.attempts import Attempt
from trimtab.serve.run.progress import LiveScaling
from trimtab.serve.store import JobRow, ResizeRow
from trimtab.world import Actuator

if TYPE_CHECKING:
    from trimtab.serve.daemon import Daemon

log = logging.getLogger("trimtab.serve")


class ServeActuator(Actuator):
    """Acts for one Daemon, under its lock (the loop runs inside `Daemon.step`)."""

    cannot = frozenset({"prefetches"})

    def __init__(self, daemon: Daemon) -> None:
        self.d = daemon
        self.reservations: list[Reservation] = []  # those of the latest cycle that ran (for `why`)

    def cycled(self, decision: Decision, seconds: float, now_s: float) -> None:
        for observe in self.d.cycle_observers:
            observe(seconds)

    def wake_at(self, time_s: float) -> None:
        """The loop thread runs a cycle every `tick_s`, and the Scheduler's cycle runs its plugins again once
        `time_s` is reached: a wake-up is late by at most `tick_s`."""
        if time_s <= self.d.clock():
            self.d.wake()

    def preempt(self, victims: list[str], now_s: float) -> None:
        with self.d.store.session() as s:
            for victim in victims:
                s.execute(update(JobRow).where(JobRow.id == int(victim)).values(
                    state="pending", preemptions=JobRow.preemptions + 1, reason="preempted"))
        for victim in victims:
            att = self.d.attempts.pop(int(victim))
            att.stop_reason = "preempted"
            if not att.launched:
                self.d.waiting_launch.remove(att)
            for run in att.live.values():
                self.d.executor.stop(run.run_id, self.d.grace_s)

    def start(self, starts: list[tuple[Job, Allocation]], now_s: float) -> None:
        with self.d.store.session() as s:
            for job, _alloc in starts:
                row = s.get(JobRow, int(job.id))
                assert row is not None
                row.state, row.attempts, row.reason = "running", row.attempts + 1, ""
                if row.first_start_s is None:
                    row.first_start_s = now_s
        with self.d.store.reader() as s:
            numbers = {job_id: attempts for job_id, attempts in s.execute(select(JobRow.id, JobRow.attempts).where(
                JobRow.id.in_([int(j.id) for j, _ in starts])))}
        for job, alloc in starts:
            att = Attempt(int(job.id), numbers[int(job.id)], alloc)
            self.d.attempts[att.job_id] = att
            self.d.waiting_launch.append(att)
        self.d.launch_waiting()

    def resize(self, resizes: list[Resize], now_s: float) -> None:
        """Carry out the cycle's resizes (already booked by the scheduler) as restarts: the job's current attempt
        is stopped with the grace of a preemption, and a new attempt on the new allocation launches once those
        tasks are gone and their GPUs free (told TRIMTAB_RESIZED=1 and the new WORLD_SIZE). Each is recorded."""
        with self.d.store.session() as s:
            for resize in resizes:
                row = s.get(JobRow, int(resize.job_id))
                assert row is not None
                row.attempts, row.resizes = row.attempts + 1, row.resizes + 1
                s.add(ResizeRow(job_id=row.id, t_s=now_s, from_tasks=resize.before.tasks,
                                to_tasks=resize.alloc.tasks, attempt=row.attempts))
                old = self.d.attempts[row.id]
                old.stop_reason = "resized"
                if not old.launched:
                    self.d.waiting_launch.remove(old)
                for run in old.live.values():
                    self.d.executor.stop(run.run_id, self.d.grace_s)
                scaling = self.d.scheduler.jobs[resize.job_id].scaling
                if isinstance(scaling, LiveScaling):
                    scaling.latest = None  # what it reported was at the old size (its curve keeps it)
                att = Attempt(row.id, row.attempts, resize.alloc, resized=True)
                self.d.attempts[row.id] = att
                self.d.waiting_launch.append(att)
                log.info("job %d resized from %d to %d tasks", row.id, resize.before.tasks, resize.alloc.tasks)
        self.d.launch_waiting()

    def save_reasons(self, decision: Decision) -> None:
        """Why each pending job waits after a cycle that ran, once applied (the loop's ReasonBook): the reasons
        that changed are written to the store, so a queue that waits for the same reasons costs no write per cycle."""
        pending = self.d.scheduler.pending()
        self.reservations = decision.reservations
        changed = self.d.reasons.unsaved(pending)
        if changed:
            with self.d.store.session() as s:
                for job_id, text in changed:
                    s.execute(update(JobRow).where(JobRow.id == int(job_id), JobRow.state == "pending")
                              .values(reason=text))
