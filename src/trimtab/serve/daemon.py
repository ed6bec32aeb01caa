"""The serve daemon: the Scheduler driven by the wall clock, API events and executor events, with every accepted
submission and every state change committed to the store before it is acted on.

Owns the lock, the loop and the rules for attempts: a gang's attempt succeeds when every task exits 0; any other
exit ends the attempt, retried as the job's `retries` say; a task lost with its node ends the attempt too, which is
then requeued without counting against the retries (failover). Requests, recovery, the device book and launching are
its collaborators (requests.py, recovery.py, devices.py, launch.py)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import update

from trimtab.cluster import GPU_MILLI, ClusterState
from trimtab.model import JobState
from trimtab.plugins import default_registry
from trimtab.policy import Status
from trimtab.profile import Profile, Registry
from trimtab.scheduler import Scheduler
from trimtab.serve.defaults import DEFAULT_DATA_DIR, DEFAULT_PORT
from trimtab.serve.executors.base import Executor, ExecutorLost, TaskExit
from trimtab.serve.intake.feasible import Feasibility
from trimtab.serve.intake.limits import TenantLimits
from trimtab.serve.intake.requests import Requests
from trimtab.serve.run.actuator import ServeActuator
from trimtab.serve.run.attempts import Attempt
from trimtab.serve.run.devices import DeviceBook
from trimtab.serve.run.elastic import with_live_resizes
from trimtab.serve.run.gpus import Inventory
from trimtab.serve.run.identity import Identities
from trimtab.serve.run.launch import Launcher
from trimtab.serve.run.progress import LiveScaling, ProgressBook, nvml_utilisation, progress_path, telemetry_of
from trimtab.serve.run.recovery import Recovery
from trimtab.serve.store import JobRow, RunRow, SampleRow, Store, sqlite_url
from trimtab.waits import ReasonBook
from trimtab.why import explain
from trimtab.world import WorldLoop, after_failure

log = logging.getLogger("trimtab.serve")


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """How `trimtab serve` runs. `db_url` None: SQLite `trimtab.db` in `data_dir`. `gpus` / `cluster` declare
    virtual GPUs; with neither, NVML finds the real ones. `grace_s`: SIGTERM-to-SIGKILL delay of a stop.
    `backend` "ray" runs tasks on the Ray cluster at `ray_address`, whose nodes are then the inventory; the
    server joins it through the Ray node of this machine at `ray_node_ip` (Ray's choice if None).
    `tenant_limits`: every tenant's limits beyond GPUs unless the admin sets others for it (serve/intake/limits.py). Run
    as root, tasks run as their tenant's Unix user (`tenant_users` maps tenants to existing users; others get
    `trimtab-<tenant>`) unless `shared_identity` (see serve/run/identity.py)."""

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
    # Request limits (docs/security.md): a request over one is refused with a 4xx naming it.
    max_body_bytes: int = 1 << 20
    tenant_limits: TenantLimits = field(default_factory=TenantLimits)
    body_timeout_s: float = 5.0
    max_header_bytes: int = 16 << 10
    header_timeout_s: float = 5.0
    keepalive_timeout_s: int = 5
    metrics_public: bool = False  # /metrics without a token; loopback only
    tenant_users: dict[str, str] = field(default_factory=dict)
    shared_identity: bool = False

    @property
    def store_url(self) -> str:
        return self.db_url or sqlite_url(self.data_dir.expanduser() / "trimtab.db")


class Daemon:
    """The live world around one Scheduler. Every public method takes the daemon's lock, so the API's threads and
    the loop thread never interleave inside it; reads that need no scheduler state go to the store directly.

    `step()` is one turn of the loop: collect task exits, launch attempts whose GPUs are free, run a scheduling
    cycle, apply its preemptions and starts. `start()` runs `step()` every `tick_s` on a thread; tests may call
    `step()` themselves with a fake executor and a fake clock.

    Two books of GPUs: the scheduler's ClusterState (what the current attempts hold, by GPU index, shares in
    milli-GPU) decides placement, and the device book `devices` (what live processes hold, by device id, tasks
    of stopped attempts still draining included) decides when an attempt may launch. `requests` answers the API.

    A job held by the tenant quotas (GPUs, and the caps of `tenant_limits` on running tasks, CPU and memory) says
    why in its stored reason until it starts."""

    def __init__(self, store: Store, inventory: Inventory, executor: Executor, profile: Profile | str,
                 data_dir: Path, *, clock: Callable[[], float] = time.time, grace_s: float = 10.0,
                 tick_s: float = 0.05, sample_every_s: float = 10.0, registry: Registry | None = None,
                 tenant_limits: TenantLimits | None = None, identities: Identities | None = None) -> None:
        self.store = store
        self.executor = executor
        self.clock = clock
        self.grace_s = grace_s
        self.tick_s = tick_s
        self.sample_every_s = sample_every_s
        self.lock = threading.RLock()
        self.registry = registry or default_registry()
        base = profile if isinstance(profile, Profile) else Profile.load(profile)
        self.requests = Requests(self, tenant_limits or TenantLimits(), Feasibility(base.enabled("filter")))
        # the tenants' GPU quotas (whole GPUs, shares counted in milli-GPU) and caps on running tasks, CPU and
        # memory hold under every policy, read live
        self.profile = with_live_resizes(base, self.registry).with_admission(
            "quota", {"tenant_gpus": self.requests.quotas, "tenant_caps": self.requests.limits.caps})
        # every waiting job's reason in words (trimtab jobs, the API)
        self.actuator = ServeActuator(self)
        self.loop = WorldLoop(Scheduler(ClusterState(list(inventory.nodes)), self.profile, self.registry),
                              self.actuator, explains=True)
        self.cluster = self.scheduler.cluster
        self.devices = DeviceBook(inventory)
        self.launcher = Launcher(store, executor, self.devices, data_dir, clock, identities, self.requests.limits)
        self.attempts: dict[int, Attempt] = {}  # the current attempt of each job the scheduler counts running
        self.waiting_launch: list[Attempt] = []  # started by the scheduler, waiting for GPUs still draining
        self.cycle_observers: list[Callable[[float], None]] = []
        self.completed_total = 0
        self._failed_launches: list[TaskExit] = []
        self._pending_finalize: list[Attempt] = []  # adopted attempts whose tasks all ended while we were down
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_sample_s = 0.0
        self.progress = ProgressBook()  # what running jobs report (serve/run/progress.py), read every second
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

    def recover(self) -> dict[str, int]:
        """Rebuild the books from the store after a start or a crash: queue the pending jobs, re-adopt the tasks
        still running, treat vanished ones as failed attempts. Returns counts for the start-up message."""
        with self.lock:
            self.requests.load()
            found = Recovery(self.store, self.scheduler, self.executor, self.devices, self.launcher,
                             self.grace_s).run(self.clock())
            self.attempts.update(found.attempts)
            self._pending_finalize += found.to_finalize
            self.completed_total = found.completed_total
        self.wake()
        return dict(found.counts)

    def stop_for_cancel(self, job_id: int) -> str:
        """A running job was cancelled (committed by the caller): stop its attempt. Returns the job's state."""
        with self.lock:
            att = self.attempts[job_id]
            att.stop_reason = "cancelled"
            if not att.launched:
                self.waiting_launch.remove(att)
                self._finalize(att)
                return "cancelled"
            for run in att.live.values():
                self.executor.stop(run.run_id, self.grace_s)
            return "running"

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
                self.launch_waiting()
            decision = self.loop.cycle(now)
            if self.loop.ran:
                self.actuator.save_reasons(decision)
            if now - self._last_sample_s >= self.sample_every_s:
                self._sample(now)
            if self.progress.due(now):
                self._read_progress(now)

    def _node_changes(self) -> None:
        """Nodes the executor saw leave, come back or join (`Executor.node_changes`): a node gone takes no new work
        (its tasks' exits come through the executor's poll); a node that joins is taken from the executor's
        `inventory` into the cluster."""
        down, up = self.executor.node_changes()
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
        found = self.executor.inventory
        if found is None:
            raise RuntimeError(f"executor {self.executor.name} reports joined nodes but has no inventory")
        nodes = [node for node in found.nodes if node.name in names]
        if not nodes:
            return  # not nodes for the scheduler (e.g. without GPUs in a GPU cluster)
        self.loop.scheduler = self.scheduler.with_nodes(nodes, self.registry)
        self.cluster = self.scheduler.cluster
        self.devices.add_nodes(nodes, found)
        for node in nodes:
            log.warning("node %s joined the cluster with %d GPUs", node.name, len(self.devices.device_ids[node.name]))
        self.scheduler.changed()

    def _on_exits(self, exits: list[TaskExit], now_s: float) -> None:
        done: list[Attempt] = []
        with self.store.session() as s:
            for ex in exits:
                run = self.devices.release(ex.run_id)
                if run is None:
                    continue
                att = run.attempt
                att.live.pop(run.run_id, None)
                att.codes[run.rank] = ex.exit_code
                current = self.attempts.get(att.job_id) is att
                if current and ex.exit_code != 0 and not att.stop_reason:
                    att.stop_reason = "node-lost" if ex.lost else "failed"
                    att.failed_code, att.failed_detail = ex.exit_code, ex.detail
                    # a gang lives or dies whole: stop the other tasks
                    for other in att.live.values():
                        self.executor.stop(other.run_id, self.grace_s)
                outcome = att.stop_reason or ("completed" if ex.exit_code == 0 else "failed")
                s.execute(update(RunRow).where(RunRow.id == run.row_id).values(
                    state="exited", end_s=now_s, exit_code=ex.exit_code, outcome=outcome))
                if current and not att.live and len(att.codes) >= att.alloc.tasks:
                    done.append(att)
        for att in done:
            self._finalize(att)

    def _finalize(self, att: Attempt) -> None:
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
            elif att.stop_reason == "node-lost":  # the cluster's failure, not the job's: no retry is spent
                state = JobState.PENDING
                reason = f"attempt {att.number} lost its node ({att.failed_detail}); requeued"
            else:
                row.failures += 1
                reason = f"attempt {att.number} failed: exit code {failed_code}" if failed_code is not None \
                    else f"attempt {att.number} failed: a task was killed or vanished"
                if att.failed_detail:
                    reason = f"{reason} ({att.failed_detail})"
                state = after_failure(row.failures, row.max_retries)
            row.state, row.reason = str(state), reason
            row.exit_code = 0 if state is JobState.COMPLETED else failed_code
            if state.terminal:
                row.end_s = now
        del self.attempts[att.job_id]
        self.scheduler.stopped(str(att.job_id), now, state)
        if state is JobState.COMPLETED:
            self.completed_total += 1

    @property
    def scheduler(self) -> Scheduler:
        return self.loop.scheduler

    @property
    def reasons(self) -> ReasonBook:
        assert self.loop.reasons is not None
        return self.loop.reasons

    def _read_progress(self, now_s: float) -> None:
        """What the current attempts report (and, on NVML GPUs, their utilisation) into their jobs' LiveScaling;
        a change is worth a cycle, so the resize plugins see it."""
        current = [(att, self.scheduler.jobs.get(str(job_id))) for job_id, att in self.attempts.items()
                   if att.launched and att.live]
        if not current:
            return
        measured = nvml_utilisation(g for att, _ in current for run in att.live.values() for g in run.gpu_ids) \
            if self.devices.inventory.source == "nvml" else {}
        found = [(att, progress_path(self.launcher.identities.checkpoint_dir(job.tenant, att.job_id), att.number),
                  job.scaling)
                 for att, job in current if job is not None and isinstance(job.scaling, LiveScaling)]
        if self.progress.read(found, measured, now_s):
            self.scheduler.changed()

    def report_progress(self, job_id: int, report: dict[str, object]) -> dict[str, Any] | None:
        """A report the API received for a job (POST /v1/jobs/{id}/progress): taken in as its progress file's
        would be. Returns what it was counted against (attempt, GPUs), or None when the job runs no attempt."""
        with self.lock:
            att, job = self.attempts.get(job_id), self.scheduler.jobs.get(str(job_id))
            if att is None or not att.launched or job is None or not isinstance(job.scaling, LiveScaling):
                return None
            if job.scaling.observe(telemetry_of(report, att.alloc.gpus, self.clock())):
                self.scheduler.changed()
                self.wake()
            return {"id": job_id, "attempt": att.number, "gpus": att.alloc.gpus}

    def why(self, job_id: int) -> Status | None:
        """Why a pending job waits now and what would let it start (`why.explain` over the current books: the
        latest reason of an admit plugin, else the fit counted now); None when the scheduler does not queue it."""
        with self.lock:
            key = str(job_id)
            job = self.scheduler.jobs.get(key)
            if job is None or self.scheduler.state.get(key) is not JobState.PENDING:
                return None
            return explain(job, self.scheduler.context(self.clock()), self.scheduler.framework.filter,
                           self.reasons.latest(key), self.actuator.reservations)

    def launch_waiting(self) -> None:
        self._failed_launches += self.launcher.launch(self.waiting_launch, self.cluster)

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
            devices = self.devices.devices_json()
            nodes = []
            for i, node in enumerate(self.cluster.nodes):
                nodes.append({
                    "name": node.name, "gpu_model": node.gpu_model, "gpus": int(self.cluster.cap_gpus[i]),
                    "gpus_allocated": int(self.cluster.cap_gpus[i] - self.cluster.free_gpus[i]),
                    "healthy": bool(self.cluster.healthy[i]), "devices": devices[node.name],
                })
            return {"nodes": nodes, "queues": self._queues(), "gpus_total": self.cluster.total_gpus,
                    "gpus_allocated": self.cluster.allocated_gpus, "policy": self.profile.name,
                    "inventory": self.devices.inventory.source, "executor": self.executor.name,
                    "started_s": self.started_s}

    def telemetry(self) -> list[dict[str, Any]]:
        """Each running job for /metrics: job id, tenant, GPUs held now, and what it last reported or was measured
        at (serve/run/progress.py): samples per second, batch size, GPU utilisation (None or 0: not known)."""
        with self.lock:
            found = []
            for key, run in self.scheduler.running.items():
                seen = run.job.scaling.latest if isinstance(run.job.scaling, LiveScaling) else None
                found.append({"job": key, "tenant": run.job.tenant, "gpus": run.alloc.gpus,
                              "samples_per_s": seen and seen.samples_per_s, "batch_size": seen and seen.batch_size,
                              "gpu_util": seen and seen.gpu_util})
            return found

    def _queues(self) -> list[dict[str, Any]]:
        quotas = self.requests.quotas
        queues: dict[str, dict[str, Any]] = {}

        def queue(tenant: str) -> dict[str, Any]:
            return queues.setdefault(tenant, {"tenant": tenant, "pending": 0, "running": 0, "gpus_held": 0,
                                              "quota_gpus": quotas.get(tenant)})

        for job in self.scheduler.pending():
            queue(job.tenant)["pending"] += 1
        for run in self.scheduler.running.values():
            q = queue(run.job.tenant)
            q["running"] += 1
            q["gpus_held"] += run.alloc.gpu_milli / GPU_MILLI
        for tenant in quotas:
            queue(tenant)
        return sorted(queues.values(), key=lambda q: q["tenant"])
