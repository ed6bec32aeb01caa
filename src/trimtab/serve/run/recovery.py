"""Recovery after a start or a crash: the pending jobs queued again, the current attempts of running jobs
re-adopted with their tasks, strays (tasks of attempts no longer current) adopted only to be stopped, and the
tasks that never started closed in the store."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from trimtab.cluster import Allocation
from trimtab.model import Job, Resources
from trimtab.scheduler import Scheduler
from trimtab.serve.executors.base import Adoption, Executor
from trimtab.serve.run.attempts import Attempt, Run, job_of, milli_of, run_id_of
from trimtab.serve.run.devices import DeviceBook
from trimtab.serve.run.launch import Launcher
from trimtab.serve.store import JobRow, RunRow, Store


@dataclass(slots=True)
class Recovered:
    """What recovery hands the daemon: the current attempt of each job the scheduler now counts running, the
    adopted attempts whose tasks all ended while the daemon was down (to be finalized by the next step), the
    number of completed jobs, and counts for the start-up message."""

    attempts: dict[int, Attempt] = field(default_factory=dict)
    to_finalize: list[Attempt] = field(default_factory=list)
    completed_total: int = 0
    counts: Counter[str] = field(default_factory=Counter)


@dataclass(slots=True)
class Recovery:
    """One recovery over the store (`run`, called once by the daemon under its lock before its loop starts):
    jobs go to `scheduler`, adopted tasks to `devices`, tasks are asked of and stopped through `executor`."""

    store: Store
    scheduler: Scheduler
    executor: Executor
    devices: DeviceBook
    launcher: Launcher
    grace_s: float
    found: Recovered = field(default_factory=Recovered)
    _never_started: list[Run] = field(default_factory=list)

    def run(self, now_s: float) -> Recovered:
        counts = self.found.counts
        with self.store.session() as s:
            self.found.completed_total = len(s.scalars(select(JobRow.id).where(JobRow.state == "completed")).all())
            open_runs = self._open_runs(s, now_s)
            jobs = s.scalars(select(JobRow).where(JobRow.state.in_(("pending", "running")))
                             .order_by(JobRow.id)).all()
            for row in jobs:
                job = job_of(row)
                if row.state == "running":
                    current = s.scalars(select(RunRow).where(RunRow.job_id == row.id,
                                                             RunRow.attempt == row.attempts)).all()
                    if current and self._adopt_attempt(row, job, current):
                        continue
                    if not current:
                        counts["requeued"] += 1
                    row.state, row.reason = "pending", "requeued after a daemon restart"
                self.scheduler.submit(job, row.submit_s)
                counts["pending"] += 1
            held = {r.row_id for r in self.devices.runs.values()}
            for job_id, runs in open_runs.items():
                job_row = s.get(JobRow, job_id)
                assert job_row is not None
                for run in runs:
                    if run.id not in held:
                        self._adopt_stray(job_row, run)
        self._close_never_started(now_s)
        return self.found

    def _open_runs(self, s: Session, now_s: float) -> dict[int, list[RunRow]]:
        """The tasks the store says may still run, by job; those whose node left while we were down are closed."""
        open_runs: dict[int, list[RunRow]] = {}
        for run in s.scalars(select(RunRow).where(RunRow.state != "exited").order_by(RunRow.id)):
            if run.node not in self.scheduler.cluster.index:  # its node left: nothing to adopt
                run.state, run.outcome, run.end_s = "exited", "node-lost", now_s
                self.found.counts["lost with their node"] += 1
                continue
            open_runs.setdefault(run.job_id, []).append(run)
        return open_runs

    def _allocation_of(self, job: Job, runs: list[RunRow]) -> Allocation:
        """The allocation the tasks really hold (`runs` in the order of Allocation.gpu_idx), so the scheduler's
        book matches the processes (and checks that no GPU is over 1000 milli)."""
        index = self.scheduler.cluster.index
        per_node = Counter(r.node for r in runs)
        nodes = sorted(per_node, key=lambda n: index[n])
        gpu_idx = np.array([self.devices.gpu_index(r.node, g) for r in runs for g in r.gpu_ids], dtype=np.int64) \
            if job.task.wants_gpu else None
        return Allocation(np.array([index[n] for n in nodes]), np.array([per_node[n] for n in nodes]), job.task,
                          gpu_idx)

    def _adopt_attempt(self, row: JobRow, job: Job, runs: list[RunRow]) -> bool:
        """Re-adopt the current attempt of a running job. False if it never fully started (the job is queued
        again; tasks that did start are stopped)."""
        index = self.scheduler.cluster.index
        if any(r.node not in index for r in runs):
            return False  # a task's node is gone: the attempt is lost (its other tasks are stopped as strays)
        runs = sorted(runs, key=lambda r: (index[r.node], r.rank))
        alloc = self._allocation_of(job, runs)
        att = Attempt(row.id, row.attempts, alloc, launched=True)
        adopted: list[tuple[Run, Adoption]] = []
        for run in runs:
            if run.state == "exited":
                att.codes[run.rank] = run.exit_code
                continue
            live = Run(run_id_of(row.id, run.attempt, run.rank), att, run.rank, run.node, tuple(run.gpu_ids),
                       milli_of(row), run.id)
            adopted.append((live, self.executor.adopt(self.launcher.launch_of(row, live, run.log_path), run.handle)))
        never = [live for live, how in adopted if how is Adoption.NEVER_STARTED]
        for live, how in adopted:
            if how is not Adoption.NEVER_STARTED:
                self.devices.hold(live)
                self.found.counts["adopted" if how is Adoption.RUNNING else "ended while down"] += 1
        least = job.tasks if job.elastic is None else job.elastic.min_tasks  # a resized attempt has its own size
        if never or len(runs) < least:
            att.stop_reason = "restart"
            for live in att.live.values():
                self.executor.stop(live.run_id, 0.0)
            self._never_started.extend(never)
            return False
        self.scheduler.adopt(job, alloc, min(r.start_s for r in runs))
        self.found.attempts[row.id] = att
        self.found.counts["running"] += 1
        if row.cancel_requested:
            att.stop_reason = "cancelled"
            for live in att.live.values():
                self.executor.stop(live.run_id, self.grace_s)
        if not att.live:
            self.found.to_finalize.append(att)
        return True

    def _adopt_stray(self, row: JobRow, run: RunRow) -> None:
        """A task of an attempt that is no longer current (preempted, or of a finished job): adopt it only to
        stop it and to keep its GPUs until it has gone."""
        empty = np.array([], dtype=np.int64)
        att = Attempt(row.id, run.attempt, Allocation(empty, empty, Resources()), launched=True,
                      stop_reason="preempted")
        live = Run(run_id_of(row.id, run.attempt, run.rank), att, run.rank, run.node, tuple(run.gpu_ids),
                   milli_of(row), run.id)
        how = self.executor.adopt(self.launcher.launch_of(row, live, run.log_path), run.handle)
        if how is Adoption.NEVER_STARTED:
            self._never_started.append(live)
            return
        self.devices.hold(live)
        self.executor.stop(live.run_id, self.grace_s)
        self.found.counts["stopping"] += 1

    def _close_never_started(self, now_s: float) -> None:
        runs, self._never_started = self._never_started, []
        if runs:
            with self.store.session() as s:
                s.execute(update(RunRow).where(RunRow.id.in_([r.row_id for r in runs])).values(
                    state="exited", outcome="never-started", end_s=now_s))
