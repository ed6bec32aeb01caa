"""The serve daemon: the Scheduler driven by the wall clock, API events and executor events, with every accepted
submission and every state change committed to the store before it is acted on.

Owns the live books (which task holds which GPU), recovery after a crash, and the rules for attempts: a gang's
attempt succeeds when every task exits 0; any other exit ends the attempt, retried as the job's `retries` say."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from trimtab.cluster import GPU_MILLI, Allocation, ClusterState
from trimtab.model import Job, JobState, Resources
from trimtab.plugins import default_registry
from trimtab.profile import Profile, Registry
from trimtab.scheduler import Scheduler
from trimtab.serve.defaults import DEFAULT_DATA_DIR, DEFAULT_PORT
from trimtab.serve.executors.base import Adoption, Executor, ExecutorLost, TaskExit, TaskLaunch
from trimtab.serve.gpus import Inventory
from trimtab.serve.quota import TenantQuota
from trimtab.serve.store import TERMINAL_STATES, JobRow, RunRow, SampleRow, Store, TenantRow, TokenRow, sqlite_url
from trimtab.serve.submission import JobSpec

log = logging.getLogger("trimtab.serve")


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """How `trimtab serve` runs. `db_url` None: SQLite `trimtab.db` in `data_dir`. `gpus` / `cluster` declare
    virtual GPUs; with neither, NVML finds the real ones. `grace_s`: SIGTERM-to-SIGKILL delay of a stop.
    `backend` "ray" runs tasks on the Ray cluster at `ray_address`, whose nodes are then the inventory; the
    server joins it through the Ray node of this machine at `ray_node_ip` (Ray's choice if None)."""

    data_dir: Path = DEFAULT_DATA_DIR
    db_url: str | None = None
    gpus: int | None = None
    cluster: str | None = None
    policy: str = "steady"
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    grace_s: float = 10.0
    backend: str = "local"
    ray_address: str | None = None
    ray_node_ip: str | None = None
    tick_s: float = 0.05
    sample_every_s: float = 10.0
    max_body_bytes: int = 1 << 20

    @property
    def store_url(self) -> str:
        return self.db_url or sqlite_url(self.data_dir.expanduser() / "trimtab.db")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a bearer token speaks for: the admin (every tenant) or one tenant."""

    admin: bool
    tenant: str | None

    def sees(self, tenant: str) -> bool:
        return self.admin or self.tenant == tenant


class ServeError(Exception):
    """A request the daemon refuses; `status` is the HTTP status the API answers with."""

    def __init__(self, status: int, message: str, field: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field


@dataclass(eq=False, slots=True)
class _Run:
    """One task that holds `milli` of each of its GPUs (GPU_MILLI: whole GPUs; less: a share of its one GPU)."""

    run_id: str
    attempt: _Attempt
    rank: int
    node: str
    gpu_ids: tuple[str, ...]
    milli: int = GPU_MILLI
    row_id: int = 0


@dataclass(eq=False, slots=True)
class _Attempt:
    """One attempt of a job: its allocation, its tasks once launched, and why it is being stopped, if it is."""

    job_id: int
    number: int
    alloc: Allocation
    launched: bool = False
    live: dict[str, _Run] = field(default_factory=dict)
    codes: dict[int, int | None] = field(default_factory=dict)
    stop_reason: str = ""  # "", "failed" (a task failed), "preempted", "cancelled", "restart"
    master_port: int = 0  # the gang's rendezvous port, one for all its tasks
    failed_code: int | None = None  # exit code of the task whose failure ended the attempt
    failed_detail: str = ""  # what the executor said about it (e.g. "could not start: ...")


class Daemon:
    """The live world around one Scheduler. Every public method takes the daemon's lock, so the API's threads and
    the loop thread never interleave inside it; reads that need no scheduler state go to the store directly.

    `step()` is one turn of the loop: collect task exits, launch attempts whose GPUs are free, run a scheduling
    cycle, apply its preemptions and starts. `start()` runs `step()` every `tick_s` on a thread; tests may call
    `step()` themselves with a fake executor and a fake clock.

    Two books of GPUs: the scheduler's ClusterState (what the current attempts hold, by GPU index, shares in
    milli-GPU) decides placement, and `held_milli` (what live processes hold, by device id, tasks of stopped
    attempts still draining included) decides when an attempt may launch: on exactly the GPUs the scheduler
    chose (`Allocation.gpu_idx`), once each has room for its share."""

    def __init__(self, store: Store, inventory: Inventory, executor: Executor, profile: Profile | str,
                 data_dir: Path, *, clock: Callable[[], float] = time.time, grace_s: float = 10.0,
                 tick_s: float = 0.05, sample_every_s: float = 10.0, registry: Registry | None = None) -> None:
        self.store = store
        self.inventory = inventory
        self.executor = executor
        self.data_dir = data_dir
        self.clock = clock
        self.grace_s = grace_s
        self.tick_s = tick_s
        self.sample_every_s = sample_every_s
        self.lock = threading.RLock()
        self.cluster = ClusterState(list(inventory.nodes))
        self.quotas: dict[str, int | None] = {}
        registry = self.registry = registry or default_registry()
        registry.register("tenant-quota", lambda: TenantQuota(self.quotas))
        base = profile if isinstance(profile, Profile) else Profile.load(profile)
        self.profile = base.model_copy(update={"admit": ["tenant-quota", *base.admit]})
        self.scheduler = Scheduler(self.cluster, self.profile, registry)
        # device i of a node is the scheduler's GPU index i on it
        self.device_ids: dict[str, tuple[str, ...]] = {n: tuple(d.id for d in devs)
                                                       for n, devs in inventory.devices.items()}
        self.device_index: dict[str, dict[str, int]] = {n: {d: i for i, d in enumerate(ids)}
                                                        for n, ids in self.device_ids.items()}
        self.held_milli: dict[str, dict[str, int]] = {n: dict.fromkeys(ids, 0) for n, ids in self.device_ids.items()}
        self.attempts: dict[int, _Attempt] = {}  # the current attempt of each job the scheduler counts running
        self.runs: dict[str, _Run] = {}  # every task that may still hold its GPUs, current attempt or not
        self.waiting_launch: list[_Attempt] = []  # started by the scheduler, waiting for GPUs still draining
        self.tokens: dict[str, Principal] = {}
        self.cycle_observers: list[Callable[[float], None]] = []
        self.completed_total = 0
        self._failed_launches: list[TaskExit] = []
        self._pending_finalize: list[_Attempt] = []  # adopted attempts whose tasks all ended while we were down
        self._never_started: list[_Run] = []
        self._cancelled_early: set[int] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_sample_s = 0.0
        self.started_s = clock()
        self.fatal: str | None = None  # why the loop stopped for good (the executor lost its tasks' world)
        self.on_fatal: Callable[[], None] | None = None  # called from the loop thread once `fatal` is set

    # -------------------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="trimtab-daemon", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Stop the loop; running tasks keep running and are adopted by the next daemon."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self.lock:
            self.executor.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except ExecutorLost as exc:  # nothing can be launched or watched any more: stop, loudly
                log.error("%s", exc)
                self.fatal = str(exc)
                self._stop.set()
                if self.on_fatal is not None:
                    self.on_fatal()
                return
            except Exception:  # a bug must be loud but must not kill the loop that keeps jobs running
                log.exception("daemon step failed")
            self._wake.wait(self.tick_s)
            self._wake.clear()

    def wake(self) -> None:
        self._wake.set()

    # -------------------------------------------------------------------------------------------- recovery

    def recover(self) -> dict[str, int]:
        """Rebuild the books from the store after a start or a crash: queue the pending jobs, re-adopt the tasks
        still running, treat vanished ones as failed attempts. Returns counts for the start-up message."""
        counts = Counter[str]()
        now = self.clock()
        with self.lock, self.store.session() as s:
            for tenant in s.scalars(select(TenantRow)):
                self.quotas[tenant.name] = tenant.quota_gpus
            for token in s.scalars(select(TokenRow)):
                self.tokens[token.digest] = Principal(token.admin, token.tenant)
            self.completed_total = len(s.scalars(select(JobRow.id).where(JobRow.state == "completed")).all())
            open_runs: dict[int, list[RunRow]] = {}
            for run in s.scalars(select(RunRow).where(RunRow.state != "exited").order_by(RunRow.id)):
                if run.node not in self.cluster.index:  # its node left while we were down: nothing to adopt
                    run.state, run.outcome, run.end_s = "exited", "node-gone", now
                    counts["lost with their node"] += 1
                    continue
                open_runs.setdefault(run.job_id, []).append(run)
            jobs = s.scalars(select(JobRow).where(JobRow.state.in_(("pending", "running")))
                             .order_by(JobRow.id)).all()
            for row in jobs:
                job = job_of(row)
                if row.state == "running":
                    current = s.scalars(select(RunRow).where(RunRow.job_id == row.id,
                                                             RunRow.attempt == row.attempts)).all()
                    if current and self._adopt_attempt(row, job, current, counts):
                        continue
                    if not current:
                        counts["requeued"] += 1
                    row.state, row.reason = "pending", "requeued after a daemon restart"
                self.scheduler.submit(job, row.submit_s)
                counts["pending"] += 1
            held = {r.row_id for r in self.runs.values()}
            for job_id, runs in open_runs.items():
                job_row = s.get(JobRow, job_id)
                assert job_row is not None
                for run in runs:
                    if run.id not in held:
                        self._adopt_stray(job_row, run, counts)
        self._close_never_started(now)
        self.wake()
        return dict(counts)

    def _adopt_attempt(self, row: JobRow, job: Job, runs: list[RunRow], counts: Counter[str]) -> bool:
        """Re-adopt the current attempt of a running job. False if it never fully started (the job is queued
        again; tasks that did start are stopped)."""
        index = self.cluster.index
        if any(r.node not in index for r in runs):
            return False  # a task's node is gone: the attempt is lost (its other tasks are stopped as strays)
        runs = sorted(runs, key=lambda r: (index[r.node], r.rank))  # the order of Allocation.gpu_idx
        per_node = Counter(r.node for r in runs)
        nodes = sorted(per_node, key=lambda n: index[n])
        # the GPUs the tasks really hold, so the scheduler's book matches the processes (and checks that no GPU
        # is over 1000 milli)
        gpu_idx = np.array([self._gpu_index(r.node, g) for r in runs for g in r.gpu_ids], dtype=np.int64) \
            if job.task.wants_gpu else None
        alloc = Allocation(np.array([index[n] for n in nodes]), np.array([per_node[n] for n in nodes]), job.task,
                           gpu_idx)
        att = _Attempt(row.id, row.attempts, alloc, launched=True)
        adopted: list[tuple[_Run, Adoption]] = []
        for run in runs:
            if run.state == "exited":
                att.codes[run.rank] = run.exit_code
                continue
            live = _Run(run_id_of(row.id, run.attempt, run.rank), att, run.rank, run.node, tuple(run.gpu_ids),
                        _milli_of(row), run.id)
            how = self.executor.adopt(self._launch_of(row, live, run.log_path), run.handle)
            adopted.append((live, how))
        never = [live for live, how in adopted if how is Adoption.NEVER_STARTED]
        for live, how in adopted:
            if how is Adoption.NEVER_STARTED:
                continue
            self._hold(live)
            counts["adopted" if how is Adoption.RUNNING else "ended while down"] += 1
        if never or len(runs) < job.tasks:
            att.stop_reason = "restart"
            for live in att.live.values():
                self.executor.stop(live.run_id, 0.0)
            self._never_started.extend(never)
            return False
        self.scheduler.adopt(job, alloc, min(r.start_s for r in runs))
        self.attempts[row.id] = att
        counts["running"] += 1
        if row.cancel_requested:
            att.stop_reason = "cancelled"
            for live in att.live.values():
                self.executor.stop(live.run_id, self.grace_s)
        if not att.live:
            self._pending_finalize.append(att)
        return True

    def _adopt_stray(self, row: JobRow, run: RunRow, counts: Counter[str]) -> None:
        """A task of an attempt that is no longer current (preempted, or of a finished job): adopt it only to
        stop it and to keep its GPUs until it has gone."""
        empty = np.array([], dtype=np.int64)
        att = _Attempt(row.id, run.attempt, Allocation(empty, empty, Resources()), launched=True,
                       stop_reason="preempted")
        live = _Run(run_id_of(row.id, run.attempt, run.rank), att, run.rank, run.node, tuple(run.gpu_ids),
                    _milli_of(row), run.id)
        how = self.executor.adopt(self._launch_of(row, live, run.log_path), run.handle)
        if how is Adoption.NEVER_STARTED:
            self._never_started.append(live)
            return
        self._hold(live)
        self.executor.stop(live.run_id, self.grace_s)
        counts["stopping"] += 1

    def _close_never_started(self, now_s: float) -> None:
        runs, self._never_started = self._never_started, []
        if runs:
            with self.store.session() as s:
                s.execute(update(RunRow).where(RunRow.id.in_([r.row_id for r in runs])).values(
                    state="exited", outcome="never-started", end_s=now_s))

    # -------------------------------------------------------------------------------------------- requests

    def principal(self, digest: str) -> Principal | None:
        return self.tokens.get(digest)

    def submit(self, spec: JobSpec, who: Principal) -> tuple[int, bool]:
        """Accept a job: check it, commit it, queue it. Returns (job id, created); created is False when the
        idempotency key names a job already accepted. Raises ServeError (nothing is stored then)."""
        tenant = self._tenant_for(spec, who)
        command = tuple(spec.command)
        problem = self.executor.validate(command)
        if problem:
            raise ServeError(422, problem, "command")
        self._check_fits(spec)
        quota = self.quotas.get(tenant)
        if quota is not None and spec.total_gpu_milli > quota * GPU_MILLI:
            raise ServeError(403, f"the job asks for {_gpus_text(spec.total_gpu_milli)} GPUs; tenant {tenant}'s "
                             f"quota is {quota}", "gpu_milli" if spec.gpu_milli else "gpus")
        now = self.clock()
        # The commit happens outside the daemon's lock (the loop and other requests go on meanwhile); the job is
        # handed to the scheduler only once it is durable. Its id is not yet known to anyone who could cancel it.
        try:
            with self.store.session() as s:
                if spec.idempotency_key is not None:
                    found = s.scalar(select(JobRow.id).where(JobRow.tenant == tenant,
                                                             JobRow.idempotency_key == spec.idempotency_key))
                    if found is not None:
                        return found, False
                row = JobRow(name=spec.name, tenant=tenant, user="", state="pending", priority=spec.priority,
                             priority_class=spec.priority_class or "", tasks=spec.tasks, gpus_per_task=spec.gpus,
                             gpu_milli=spec.gpu_milli,
                             cpu_milli=spec.cpu_milli, mem_mib=spec.mem_mib, gpu_models=list(spec.gpu_models),
                             node_selector=dict(spec.node_selector), command=list(command), env=dict(spec.env),
                             workdir=spec.workdir, max_retries=spec.retries, submit_s=now,
                             idempotency_key=spec.idempotency_key, cancel_requested=False, attempts=0, failures=0,
                             preemptions=0, reason="")
                s.add(row)
                s.flush()
                job_id = row.id
                job = job_of(row)
        except IntegrityError:  # the same idempotency key, submitted at the same moment: that job wins
            with self.store.reader() as s:
                found = s.scalar(select(JobRow.id).where(JobRow.tenant == tenant,
                                                         JobRow.idempotency_key == spec.idempotency_key))
            if found is None:
                raise
            return found, False
        with self.lock:
            if job_id in self._cancelled_early:
                self._cancelled_early.discard(job_id)
            else:
                self.scheduler.submit(job, now)
        self.wake()
        return job_id, True

    def _tenant_for(self, spec: JobSpec, who: Principal) -> str:
        if who.admin:
            return spec.tenant or "default"
        assert who.tenant is not None
        if spec.tenant is not None and spec.tenant != who.tenant:
            raise ServeError(403, f"a token of tenant {who.tenant} cannot submit for tenant {spec.tenant}",
                             "tenant")
        return who.tenant

    def _check_fits(self, spec: JobSpec) -> None:
        nodes = self.cluster.nodes
        total = self.cluster.total_gpus
        if spec.total_gpu_milli > total * GPU_MILLI:
            per_task = _gpus_text(spec.gpu_milli) if spec.gpu_milli else str(spec.gpus)
            raise ServeError(422, f"the job asks for {_gpus_text(spec.total_gpu_milli)} GPUs ({spec.tasks} x "
                             f"{per_task}); this server has {total}", "gpu_milli" if spec.gpu_milli else "gpus")
        if spec.gpus and spec.gpus > max(n.capacity.gpus for n in nodes):
            raise ServeError(422, f"a task asks for {spec.gpus} GPUs; the largest node has "
                             f"{max(n.capacity.gpus for n in nodes)}", "gpus")
        if spec.gpu_milli and total == 0:
            raise ServeError(422, "the job asks for a share of a GPU; this server has none", "gpu_milli")
        if spec.gpu_models and not set(spec.gpu_models) & {n.gpu_model for n in nodes}:
            raise ServeError(422, f"no node has a GPU model in {spec.gpu_models}", "gpu_models")

    def cancel(self, job_id: int, who: Principal) -> str:
        """Cancel a job: a pending one at once, a running one by stopping its tasks (it becomes cancelled when
        they have exited). Returns the job's state after the request."""
        with self.lock:
            now = self.clock()
            with self.store.session() as s:
                row = s.get(JobRow, job_id)
                if row is None or not who.sees(row.tenant):
                    raise ServeError(404, f"no job {job_id}")
                if row.state in TERMINAL_STATES:
                    raise ServeError(409, f"job {job_id} is already {row.state}")
                if row.state == "pending":
                    row.state, row.end_s, row.reason = "cancelled", now, "cancelled by request"
                    state = "cancelled"
                else:
                    row.cancel_requested = True
                    state = "running"
            key = str(job_id)
            if state == "cancelled":
                if not self.scheduler.cancel(key, now):
                    if key in self.scheduler.jobs:
                        raise RuntimeError(f"job {job_id} was pending in the store but not in the scheduler")
                    self._cancelled_early.add(job_id)  # committed by `submit`, not yet handed to the scheduler
                return state
            att = self.attempts[job_id]
            att.stop_reason = "cancelled"
            if not att.launched:
                self.waiting_launch.remove(att)
                self._finalize(att)
                return "cancelled"
            for run in att.live.values():
                self.executor.stop(run.run_id, self.grace_s)
            return state

    def create_token(self, tenant: str | None, name: str = "") -> str:
        from trimtab.serve.store import digest_of, new_token

        token = new_token()
        with self.lock, self.store.session() as s:
            if tenant is not None and s.get(TenantRow, tenant) is None:
                s.add(TenantRow(name=tenant, quota_gpus=None, created_s=self.clock()))
                self.quotas.setdefault(tenant, None)
            s.add(TokenRow(digest=digest_of(token), tenant=tenant, admin=tenant is None, name=name,
                           created_s=self.clock()))
            self.tokens[digest_of(token)] = Principal(tenant is None, tenant)
        return token

    def set_quota(self, tenant: str, quota_gpus: int | None) -> None:
        with self.lock, self.store.session() as s:
            row = s.get(TenantRow, tenant)
            if row is None:
                s.add(TenantRow(name=tenant, quota_gpus=quota_gpus, created_s=self.clock()))
            else:
                row.quota_gpus = quota_gpus
            self.quotas[tenant] = quota_gpus
            self.scheduler.changed()  # a raised quota may let a waiting job start
        self.wake()

    # -------------------------------------------------------------------------------------------- the loop

    def step(self) -> None:
        """One turn: exits, launches, a scheduling cycle, its preemptions and starts, a utilisation sample."""
        with self.lock:
            now = self.clock()
            self._node_changes()
            exits = self.executor.poll() + self._failed_launches
            self._failed_launches = []
            if exits:
                self._on_exits(exits, now)
            finals, self._pending_finalize = self._pending_finalize, []
            for att in finals:
                self._finalize(att)
            if self.waiting_launch:
                self._launch_waiting()
            ran = self.scheduler.cycles_run
            t0 = time.perf_counter()
            decision = self.scheduler.cycle(now)
            if self.scheduler.cycles_run != ran:
                seconds = time.perf_counter() - t0
                for observe in self.cycle_observers:
                    observe(seconds)
            if decision.preemptions or decision.starts:
                self._apply(decision.preemptions, decision.starts, now)
            if now - self._last_sample_s >= self.sample_every_s:
                self._sample(now)

    def _node_changes(self) -> None:
        """Nodes the executor saw leave, come back or join (an executor with a `node_changes()` method, e.g. Ray):
        a node gone takes no new work (its tasks' exits come through the executor's poll); a node that joins is
        taken from the executor's `inventory` into the cluster."""
        changes = getattr(self.executor, "node_changes", None)
        if changes is None:
            return
        down, up = changes()
        for name in down:
            if name in self.cluster.index:
                log.warning("node %s left the cluster", name)
                self.scheduler.node_down(name)
        joined = [name for name in up if name not in self.cluster.index]
        if joined:
            self._take_in(joined)
        for name in up:
            if name in self.cluster.index and name not in joined:
                log.warning("node %s is back", name)
                self.scheduler.node_up(name)

    def _take_in(self, names: list[str]) -> None:
        """Nodes that joined after the start: the scheduler carries on over the grown cluster (`with_nodes`)."""
        found: Inventory = self.executor.inventory  # type: ignore[attr-defined]
        nodes = [node for node in found.nodes if node.name in names]
        if not nodes:
            return  # not nodes for the scheduler (e.g. without GPUs in a GPU cluster)
        self.scheduler = self.scheduler.with_nodes(nodes, self.registry)
        self.cluster = self.scheduler.cluster
        devices = dict(self.inventory.devices)
        for node in nodes:
            devices[node.name] = found.devices[node.name]
            ids = self.device_ids[node.name] = tuple(d.id for d in found.devices[node.name])
            self.device_index[node.name] = {d: i for i, d in enumerate(ids)}
            self.held_milli[node.name] = dict.fromkeys(ids, 0)
            log.warning("node %s joined the cluster with %d GPUs", node.name, len(ids))
        self.inventory = Inventory((*self.inventory.nodes, *nodes), devices, self.inventory.source)
        self.scheduler.changed()

    def _on_exits(self, exits: list[TaskExit], now_s: float) -> None:
        done: list[_Attempt] = []
        with self.store.session() as s:
            for ex in exits:
                run = self.runs.pop(ex.run_id, None)
                if run is None:
                    continue
                self._release(run)
                att = run.attempt
                att.live.pop(run.run_id, None)
                att.codes[run.rank] = ex.exit_code
                outcome = att.stop_reason or ("completed" if ex.exit_code == 0 else "failed")
                s.execute(update(RunRow).where(RunRow.id == run.row_id).values(
                    state="exited", end_s=now_s, exit_code=ex.exit_code, outcome=outcome))
                current = self.attempts.get(att.job_id) is att
                if current and ex.exit_code != 0 and not att.stop_reason:
                    att.stop_reason, att.failed_code, att.failed_detail = "failed", ex.exit_code, ex.detail
                    # a gang lives or dies whole: stop the other tasks
                    for other in att.live.values():
                        self.executor.stop(other.run_id, self.grace_s)
                if current and not att.live and len(att.codes) >= att.alloc.tasks:
                    done.append(att)
        for att in done:
            self._finalize(att)

    def _finalize(self, att: _Attempt) -> None:
        """The current attempt of a job has no task left: commit the job's next state, then tell the scheduler."""
        now = self.clock()
        with self.store.session() as s:
            row = s.get(JobRow, att.job_id)
            assert row is not None
            codes = [att.codes.get(rank) for rank in range(att.alloc.tasks)]
            failed_code = att.failed_code
            if failed_code is None:
                failed_code = next((c for c in codes if c not in (0, None)), None)
            if row.cancel_requested or att.stop_reason == "cancelled":
                state, reason = JobState.CANCELLED, "cancelled by request"
            elif att.stop_reason == "" and all(c == 0 for c in codes):
                state, reason = JobState.COMPLETED, ""
            else:
                row.failures += 1
                reason = f"attempt {att.number} failed: exit code {failed_code}" if failed_code is not None \
                    else f"attempt {att.number} failed: a task was killed or vanished"
                if att.failed_detail:
                    reason = f"{reason} ({att.failed_detail})"
                state = JobState.PENDING if row.failures <= row.max_retries else JobState.FAILED
            row.state, row.reason = str(state), reason
            row.exit_code = 0 if state is JobState.COMPLETED else failed_code
            if state.terminal:
                row.end_s = now
        del self.attempts[att.job_id]
        self.scheduler.stopped(str(att.job_id), now, state)
        if state is JobState.COMPLETED:
            self.completed_total += 1

    def _apply(self, preemptions: list[str], starts: list[tuple[Job, Allocation]], now_s: float) -> None:
        with self.store.session() as s:
            for victim in preemptions:
                jid = int(victim)
                s.execute(update(JobRow).where(JobRow.id == jid).values(
                    state="pending", preemptions=JobRow.preemptions + 1, reason="preempted"))
            for job, _alloc in starts:
                row = s.get(JobRow, int(job.id))
                assert row is not None
                row.state, row.attempts, row.reason = "running", row.attempts + 1, ""
                if row.first_start_s is None:
                    row.first_start_s = now_s
        for victim in preemptions:
            att = self.attempts.pop(int(victim))
            att.stop_reason = "preempted"
            if not att.launched:
                self.waiting_launch.remove(att)
            for run in att.live.values():
                self.executor.stop(run.run_id, self.grace_s)
        with self.store.reader() as s:
            numbers = {job_id: attempts for job_id, attempts in s.execute(select(JobRow.id, JobRow.attempts).where(
                JobRow.id.in_([int(j.id) for j, _ in starts])))}
        for job, alloc in starts:
            att = _Attempt(int(job.id), numbers[int(job.id)], alloc)
            self.attempts[att.job_id] = att
            self.waiting_launch.append(att)
        self._launch_waiting()

    def _launch_waiting(self) -> None:
        """Launch the attempts whose GPUs are free now, in the order the scheduler started them. GPUs of a
        stopped task are free only once the executor reported it gone, so no GPU is ever given to two tasks."""
        ready: list[tuple[_Attempt, list[_Run]]] = []
        for att in list(self.waiting_launch):
            runs = self._assign(att)
            if runs is None:
                continue
            self.waiting_launch.remove(att)
            ready.append((att, runs))
        if not ready:
            return
        now = self.clock()
        with self.store.session() as s:
            rows = {r.id: r for r in s.scalars(select(JobRow).where(JobRow.id.in_([a.job_id for a, _ in ready])))}
            launches: list[tuple[_Run, TaskLaunch, RunRow]] = []
            for att, runs in ready:
                row = rows[att.job_id]
                for run in runs:
                    launch = self._launch_of(row, run, str(self._log_path(att.job_id, att.number, run.rank)))
                    run_row = RunRow(job_id=att.job_id, attempt=att.number, rank=run.rank, node=run.node,
                                     gpu_ids=list(run.gpu_ids), state="launching", handle=None, start_s=now,
                                     log_path=str(launch.log_path), outcome="")
                    s.add(run_row)
                    launches.append((run, launch, run_row))
                att.launched = True
            s.flush()
            for run, _launch, run_row in launches:
                run.row_id = run_row.id
        gangs: dict[_Attempt, list[tuple[_Run, TaskLaunch, RunRow]]] = {}
        for item in launches:
            gangs.setdefault(item[0].attempt, []).append(item)
        with self.store.session() as s:  # the rows above are committed before any process starts
            for gang in gangs.values():
                try:
                    self.executor.prepare_gang([launch for _, launch, _ in gang])
                except OSError as exc:
                    why = f"could not start: {exc}"
                    self._failed_launches += [TaskExit(run.run_id, 127, why) for run, _, _ in gang]
                    continue
                for run, launch, run_row in gang:
                    try:
                        handle = self.executor.launch(launch)
                    except OSError as exc:
                        self._failed_launches.append(TaskExit(run.run_id, 127, f"could not start: {exc}"))
                        continue
                    s.execute(update(RunRow).where(RunRow.id == run_row.id).values(state="running", handle=handle))

    def _assign(self, att: _Attempt) -> list[_Run] | None:
        """The tasks of an attempt on the GPUs the scheduler chose for them (`alloc.gpu_idx`), held from now on,
        or None while some of those GPUs lack room for their share because tasks of a stopped attempt still hold
        them (draining)."""
        alloc = att.alloc
        task = alloc.task
        per_task = (task.gpus or 1) if task.wants_gpu else 0
        milli = GPU_MILLI if task.gpus or task.mig else task.gpu_milli
        if per_task and alloc.gpu_idx is None:
            raise RuntimeError(f"job {att.job_id} was started without a GPU choice in its allocation")
        names = [self.cluster.nodes[int(i)].name for i in alloc.nodes]
        planned: list[tuple[str, tuple[str, ...]]] = []
        pos = 0
        for name, count in zip(names, alloc.counts.tolist(), strict=True):
            ids = self.device_ids[name]
            for _ in range(count):
                chosen = alloc.gpu_idx[pos:pos + per_task].tolist() if per_task else []  # type: ignore[index]
                pos += per_task
                planned.append((name, tuple(ids[g] for g in chosen)))
        wanted = Counter((name, gpu) for name, gpus in planned for gpu in gpus)
        if any(self.held_milli[name][gpu] + milli * times > GPU_MILLI for (name, gpu), times in wanted.items()):
            return None
        runs: list[_Run] = []
        for rank, (name, gpus) in enumerate(planned):
            run = _Run(run_id_of(att.job_id, att.number, rank), att, rank, name, gpus, milli)
            self._hold(run)
            runs.append(run)
        return runs

    def _hold(self, run: _Run) -> None:
        """Book the run's share of its GPUs; no GPU is ever booked beyond 1000 milli."""
        held = self.held_milli[run.node]
        for gpu in run.gpu_ids:
            if gpu not in held:
                raise RuntimeError(f"node {run.node} has no GPU {gpu}")
            if held[gpu] + run.milli > GPU_MILLI:
                raise RuntimeError(f"GPU {gpu} of node {run.node} holds {held[gpu]} milli; refusing to add "
                                   f"{run.milli} more")
        for gpu in run.gpu_ids:
            held[gpu] += run.milli
        self.runs[run.run_id] = run
        run.attempt.live[run.run_id] = run

    def _release(self, run: _Run) -> None:
        held = self.held_milli[run.node]
        for gpu in run.gpu_ids:
            held[gpu] -= run.milli

    def _gpu_index(self, node: str, gpu: str) -> int:
        index = self.device_index[node].get(gpu)
        if index is None:
            raise RuntimeError(f"the store records GPU {gpu} on node {node}, which this server does not have")
        return index

    def _launch_of(self, row: JobRow, run: _Run, log_path: str) -> TaskLaunch:
        att = run.attempt
        ranks_on_node = sorted(r.rank for r in self.runs.values() if r.attempt is att and r.node == run.node)
        local_rank = ranks_on_node.index(run.rank) if run.rank in ranks_on_node else 0
        checkpoint = self.data_dir / "checkpoints" / str(row.id)
        checkpoint.mkdir(parents=True, exist_ok=True)
        env = {
            **row.env,
            "CUDA_VISIBLE_DEVICES": ",".join(run.gpu_ids),
            "TRIMTAB_JOB_ID": str(row.id),
            "TRIMTAB_ATTEMPT": str(att.number),
            "TRIMTAB_CHECKPOINT_DIR": str(checkpoint),
            "RANK": str(run.rank),
            "LOCAL_RANK": str(local_rank),
            "WORLD_SIZE": str(row.tasks),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(att.master_port or _set_master_port(att)),
        }
        share = run.milli if run.milli < GPU_MILLI and run.gpu_ids else 0
        if share:
            env.update(self._share_env(run.node, run.gpu_ids[0], share))
        return TaskLaunch(run.run_id, row.id, att.number, run.rank, run.node, run.gpu_ids, tuple(row.command),
                          env, row.workdir, Path(log_path), self.data_dir / "runs" / run.run_id, share)

    def _share_env(self, node: str, gpu: str, milli: int) -> dict[str, str]:
        """MPS limits of a task holding `milli` of one GPU: its share of the GPU's threads, as a whole percent
        (rounded down, at least 1), and of its memory (left out when the GPU's memory is unknown). The task sees
        one GPU, which CUDA numbers 0 inside it: MPS reads the device in CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
        ("<device>=<limit>[,...]") as the client's device ordinal."""
        env = {"TRIMTAB_GPU_MILLI": str(milli), "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(max(1, milli // 10))}
        memory_mib = self.inventory.devices[node][self.device_index[node][gpu]].memory_mib
        if memory_mib:
            env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={memory_mib * milli // GPU_MILLI}M"
        return env

    def _log_path(self, job_id: int, attempt: int, rank: int) -> Path:
        return self.data_dir / "logs" / str(job_id) / f"attempt-{attempt}.rank-{rank}.log"

    def _sample(self, now_s: float) -> None:
        self._last_sample_s = now_s
        with self.store.session() as s:
            s.add(SampleRow(t_s=now_s, gpus_allocated=self.cluster.allocated_gpus,
                            gpus_total=self.cluster.total_gpus, pending=len(self.scheduler.context(now_s).pending),
                            running=len(self.scheduler.running), completed_total=self.completed_total))

    # -------------------------------------------------------------------------------------------- snapshots

    def snapshot(self) -> dict[str, Any]:
        """Queues, nodes and the GPU map as plain data (for the API, the dashboard and /metrics)."""
        with self.lock:
            holders: dict[tuple[str, str], list[dict[str, int]]] = {}
            for run in self.runs.values():
                for gpu in run.gpu_ids:
                    holders.setdefault((run.node, gpu), []).append({"job_id": run.attempt.job_id,
                                                                    "milli": run.milli})
            nodes = []
            for i, node in enumerate(self.cluster.nodes):
                devices = self.inventory.devices[node.name]
                nodes.append({
                    "name": node.name, "gpu_model": node.gpu_model, "gpus": int(self.cluster.cap_gpus[i]),
                    "gpus_allocated": int(self.cluster.cap_gpus[i] - self.cluster.free_gpus[i]),
                    "healthy": bool(self.cluster.healthy[i]),
                    "devices": [_device_json(d, holders.get((node.name, d.id), [])) for d in devices],
                })
            queues: dict[str, dict[str, Any]] = {}

            def queue(tenant: str) -> dict[str, Any]:
                return queues.setdefault(tenant, {"tenant": tenant, "pending": 0, "running": 0, "gpus_held": 0,
                                                  "quota_gpus": self.quotas.get(tenant)})

            for job in self.scheduler.pending():
                queue(job.tenant)["pending"] += 1
            for run in self.scheduler.running.values():
                q = queue(run.job.tenant)
                q["running"] += 1
                q["gpus_held"] += run.alloc.gpu_milli / GPU_MILLI
            for tenant in self.quotas:
                queue(tenant)
            return {"nodes": nodes, "queues": sorted(queues.values(), key=lambda q: q["tenant"]),
                    "gpus_total": self.cluster.total_gpus, "gpus_allocated": self.cluster.allocated_gpus,
                    "policy": self.profile.name, "inventory": self.inventory.source,
                    "executor": self.executor.name, "started_s": self.started_s}


def job_of(row: JobRow) -> Job:
    """The scheduler's view of a stored job."""
    return Job(id=str(row.id), submit_s=row.submit_s, tasks=row.tasks,
               task=Resources(row.gpus_per_task, row.cpu_milli, row.mem_mib, gpu_milli=row.gpu_milli),
               tenant=row.tenant, priority=row.priority, gpu_models=tuple(row.gpu_models),
               node_selector=dict(row.node_selector))


def _milli_of(row: JobRow) -> int:
    """What each task of the job holds of each of its GPUs."""
    return row.gpu_milli or GPU_MILLI


def _gpus_text(milli: int) -> str:
    return f"{milli // GPU_MILLI}" if milli % GPU_MILLI == 0 else f"{milli / GPU_MILLI:g}"


def _device_json(device: Any, holders: list[dict[str, int]]) -> dict[str, Any]:
    """A GPU for the API: `jobs` every job holding it with its share (one whole-GPU job, or shares), `job_id` the
    first of them (None: idle), `milli_allocated` their sum."""
    return {"id": device.id, "model": device.model, "memory_mib": device.memory_mib,
            "job_id": holders[0]["job_id"] if holders else None, "jobs": holders,
            "milli_allocated": sum(h["milli"] for h in holders)}


def run_id_of(job_id: int, attempt: int, rank: int) -> str:
    return f"{job_id}.{attempt}.{rank}"


def _set_master_port(att: _Attempt) -> int:
    """A port for the gang's rendezvous: free now, chosen by the kernel (a gang on this machine only)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        att.master_port = int(sock.getsockname()[1])
    return att.master_port
