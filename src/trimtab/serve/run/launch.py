"""Launching attempts: the tasks of an attempt on the devices the scheduler chose, their rows committed to the
store before any process starts, each task's TaskLaunch (rank variables, CUDA and MPS environment, log path, the
tenant's Unix user and folders), and the tenants' logs held to their limits (serve/intake/limits.py)."""

from __future__ import annotations

import logging
import socket
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from trimtab.cluster import GPU_MILLI, ClusterState
from trimtab.serve.executors.base import Executor, TaskExit, TaskLaunch
from trimtab.serve.intake.limits import TenantLimits
from trimtab.serve.run.attempts import Attempt, Run, run_id_of
from trimtab.serve.run.devices import DeviceBook
from trimtab.serve.run.identity import Identities, TaskUser
from trimtab.serve.run.progress import progress_path
from trimtab.serve.store import TERMINAL_STATES, JobRow, RunRow, Store

_Launch = tuple[Run, TaskLaunch, RunRow]
log = logging.getLogger("trimtab.serve")
TRIM_EVERY_S = 60.0  # a tenant's logs are measured against its max_log_bytes at most this often


class Launcher:
    """Turns attempts the scheduler started into running tasks. Called by the daemon under its lock: `launch` for
    the attempts waiting for their GPUs, `launch_of` (also by recovery) for the TaskLaunch of one task.
    `identities` says which Unix user runs a tenant's tasks and where its folders are (default: the server's
    user for every tenant); `limits` each tenant's limits (default: the server's defaults), of which the launcher
    holds the logs' (`max_task_log_bytes` per task, `max_log_bytes` for all of a tenant's)."""

    def __init__(self, store: Store, executor: Executor, devices: DeviceBook, data_dir: Path,
                 clock: Callable[[], float], identities: Identities | None = None,
                 limits: Mapping[str, TenantLimits] | None = None) -> None:
        self.store = store
        self.executor = executor
        self.devices = devices
        self.data_dir = data_dir
        self.clock = clock
        self.identities = identities or Identities(data_dir)
        self.limits = limits
        self._trimmed_s: dict[str, float] = {}  # tenant -> when its logs were last measured

    def launch(self, waiting: list[Attempt], cluster: ClusterState) -> list[TaskExit]:
        """Launch the attempts of `waiting` whose GPUs are free now, in order, and take them off it. GPUs of a
        stopped task are free only once the executor reported it gone, so no GPU is ever given to two tasks.
        Returns the exits of tasks that could not start (the daemon treats them as the tasks' exits)."""
        ready: list[tuple[Attempt, list[Run]]] = []
        for att in list(waiting):
            runs = self.assign(att, cluster)
            if runs is not None:
                waiting.remove(att)
                ready.append((att, runs))
        if not ready:
            return []
        gangs: dict[Attempt, list[_Launch]] = {}
        launches, failed = self._record(ready)
        for item in launches:
            gangs.setdefault(item[0].attempt, []).append(item)
        with self.store.session() as s:  # the rows were committed by `_record` before any process starts
            for gang in gangs.values():
                try:
                    self.executor.prepare_gang([launch for _, launch, _ in gang])
                except OSError as exc:
                    failed += [TaskExit(run.run_id, 127, f"could not start: {exc}") for run, _, _ in gang]
                    continue
                for run, launch, run_row in gang:
                    try:
                        handle = self.executor.launch(launch)
                    except OSError as exc:
                        failed.append(TaskExit(run.run_id, 127, f"could not start: {exc}"))
                        continue
                    s.execute(update(RunRow).where(RunRow.id == run_row.id).values(state="running", handle=handle))
        return failed

    def _record(self, ready: list[tuple[Attempt, list[Run]]]) -> tuple[list[_Launch], list[TaskExit]]:
        """Commit a "launching" row for every task about to start; each run learns its row id. Returns the
        launches, and the exits of the tasks of attempts whose tenant has no Unix user and cannot get one."""
        now = self.clock()
        launches: list[_Launch] = []
        failed: list[TaskExit] = []
        with self.store.session() as s:
            rows = {r.id: r for r in s.scalars(select(JobRow).where(JobRow.id.in_([a.job_id for a, _ in ready])))}
            for tenant in {row.tenant for row in rows.values()}:
                self._trim_logs(s, tenant, now)
            for att, runs in ready:
                row = rows[att.job_id]
                att.launched = True
                try:
                    user = self.identities.user_of(row.tenant)
                    self.identities.prepare_tenant(row.tenant, user)
                except OSError as exc:
                    failed += [TaskExit(run.run_id, 127, f"could not start: {exc}") for run in runs]
                    continue
                for run in runs:
                    launch = self.launch_of(row, run, str(self.log_path(att.job_id, att.number, run.rank)), user)
                    run_row = RunRow(job_id=att.job_id, attempt=att.number, rank=run.rank, node=run.node,
                                     gpu_ids=list(run.gpu_ids), state="launching", handle=None, start_s=now,
                                     log_path=str(launch.log_path), outcome="")
                    s.add(run_row)
                    launches.append((run, launch, run_row))
            s.flush()
            for run, _launch, run_row in launches:
                run.row_id = run_row.id
        return launches, failed

    def assign(self, att: Attempt, cluster: ClusterState) -> list[Run] | None:
        """The tasks of an attempt on the GPUs the scheduler chose for them (`alloc.gpu_idx`), held from now on,
        or None while some of those GPUs lack room for their share because tasks of a stopped attempt still hold
        them (draining)."""
        alloc = att.alloc
        task = alloc.task
        per_task = (task.gpus or 1) if task.wants_gpu else 0
        milli = GPU_MILLI if task.gpus or task.mig else task.gpu_milli
        if per_task and alloc.gpu_idx is None:
            raise RuntimeError(f"job {att.job_id} was started without a GPU choice in its allocation")
        names = [cluster.nodes[int(i)].name for i in alloc.nodes]
        planned: list[tuple[str, tuple[str, ...]]] = []
        pos = 0
        for name, count in zip(names, alloc.counts.tolist(), strict=True):
            ids = self.devices.device_ids[name]
            for _ in range(count):
                chosen = alloc.gpu_idx[pos:pos + per_task].tolist() if per_task else []  # type: ignore[index]
                pos += per_task
                planned.append((name, tuple(ids[g] for g in chosen)))
        if not self.devices.has_room(Counter((name, gpu) for name, gpus in planned for gpu in gpus), milli):
            return None
        runs: list[Run] = []
        for rank, (name, gpus) in enumerate(planned):
            run = Run(run_id_of(att.job_id, att.number, rank), att, rank, name, gpus, milli)
            self.devices.hold(run)
            runs.append(run)
        return runs

    def launch_of(self, row: JobRow, run: Run, log_path: str, user: TaskUser | None = None) -> TaskLaunch:
        """What the executor is told to run for one task, as `user` (None: the server's user; recovery asks
        without one, to find a task already started): the job's command and environment, the rank variables,
        the devices it sees and, for a share of a GPU, its MPS limits. WORLD_SIZE is the attempt's (an elastic job
        runs at the size its latest resize gave it; it is told TRIMTAB_GPUS, and TRIMTAB_RESIZED=1 after a
        resize), TRIMTAB_PROGRESS_FILE where it may report its progress (serve/run/progress.py). It works in the
        job's `workdir`, else in its tenant's working folder; both that folder and the job's checkpoint folder
        are made by the executor, as the task's user."""
        att = run.attempt
        ranks_on_node = sorted(r.rank for r in self.devices.runs.values() if r.attempt is att and r.node == run.node)
        local_rank = ranks_on_node.index(run.rank) if run.rank in ranks_on_node else 0
        checkpoint = self.identities.checkpoint_dir(row.tenant, row.id)
        work = self.identities.work_dir(row.tenant)
        own = {"HOME": str(work), "USER": user.name, "LOGNAME": user.name} if user is not None else {}
        env = {
            **own,
            **row.env,
            "CUDA_VISIBLE_DEVICES": ",".join(run.gpu_ids),
            "TRIMTAB_JOB_ID": str(row.id),
            "TRIMTAB_ATTEMPT": str(att.number),
            "TRIMTAB_CHECKPOINT_DIR": str(checkpoint),
            "RANK": str(run.rank),
            "LOCAL_RANK": str(local_rank),
            "WORLD_SIZE": str(att.alloc.tasks),  # an elastic job's size now, not the size it asked for
            "TRIMTAB_PROGRESS_FILE": str(progress_path(checkpoint, att.number)),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(att.master_port or _set_master_port(att)),
        }
        if row.min_tasks is not None:  # elastic: the GPUs of the whole gang now, and whether a resize started it
            env["TRIMTAB_GPUS"] = str(att.alloc.gpus)
            if att.resized:
                env["TRIMTAB_RESIZED"] = "1"
        share = run.milli if run.milli < GPU_MILLI and run.gpu_ids else 0
        if share:
            env.update(self.devices.share_env(run.node, run.gpu_ids[0], share))
        return TaskLaunch(run.run_id, row.id, att.number, run.rank, run.node, run.gpu_ids, tuple(row.command),
                          env, row.workdir or str(work), Path(log_path), self.data_dir / "runs" / run.run_id, share,
                          user, (str(checkpoint), str(work)), self._limits_of(row.tenant).max_task_log_bytes)

    def _limits_of(self, tenant: str) -> TenantLimits:
        return self.limits[tenant] if self.limits is not None else TenantLimits()

    def _trim_logs(self, s: Session, tenant: str, now: float) -> None:
        """Hold `tenant`'s logs on disk to its max_log_bytes (at most every TRIM_EVERY_S): beyond it, remove the
        logs of its finished jobs, oldest first (the jobs and their runs are kept; a removed log reads empty)."""
        cap = self._limits_of(tenant).max_log_bytes
        if cap is None or now - self._trimmed_s.get(tenant, float("-inf")) < TRIM_EVERY_S:
            return
        self._trimmed_s[tenant] = now
        runs = s.execute(select(RunRow.log_path, JobRow.state).join(JobRow, JobRow.id == RunRow.job_id)
                         .where(JobRow.tenant == tenant).order_by(RunRow.job_id, RunRow.id)).all()
        sizes = [(Path(path), _size(Path(path)), state in TERMINAL_STATES) for path, state in runs]
        total = sum(size for _, size, _ in sizes)
        removed = 0
        for path, size, finished in sizes:
            if total <= cap:
                break
            if finished and size:
                path.unlink(missing_ok=True)
                total, removed = total - size, removed + size
        if removed:
            log.warning("tenant %s: removed %d bytes of its oldest finished jobs' logs (max_log_bytes %d)", tenant,
                        removed, cap)

    def log_path(self, job_id: int, attempt: int, rank: int) -> Path:
        return self.data_dir / "logs" / str(job_id) / f"attempt-{attempt}.rank-{rank}.log"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _set_master_port(att: Attempt) -> int:
    """A port for the gang's rendezvous: free now, chosen by the kernel (a gang on this machine only)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        att.master_port = int(sock.getsockname()[1])
    return att.master_port
