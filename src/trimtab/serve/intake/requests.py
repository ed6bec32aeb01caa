"""What the API asks of the daemon: who a token speaks for, submitting and cancelling jobs, tokens, tenant quotas
and limits. Each request is checked, committed to the store, then handed to the scheduler."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from trimtab.cluster import GPU_MILLI, ClusterState
from trimtab.model import Job
from trimtab.scheduler import Scheduler
from trimtab.serve.errors import ServeError
from trimtab.serve.executors.base import Executor
from trimtab.serve.intake.feasible import Feasibility
from trimtab.serve.intake.limits import TenantBook, TenantLimits
from trimtab.serve.intake.submission import JobSpec
from trimtab.serve.run.attempts import job_of
from trimtab.serve.run.launch import Launcher
from trimtab.serve.store import TERMINAL_STATES, JobRow, Store, TenantRow, TokenRow, digest_of, new_token

LAST_USED_RESOLUTION_S = 60.0  # a token's last use is written at most this often


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a bearer token speaks for: the admin (every tenant) or one tenant."""

    admin: bool
    tenant: str | None

    def sees(self, tenant: str) -> bool:
        return self.admin or self.tenant == tenant


class RequestHost(Protocol):
    """What requests need of the daemon: its lock (taken for anything that touches the scheduler), the store, the
    executor (to validate commands), the launcher (whose identities judge a workdir), the current scheduler and
    cluster (they change as nodes join), a way to wake its loop, and `stop_for_cancel` for a running job (returns
    the job's state after the request)."""

    lock: threading.RLock
    clock: Callable[[], float]
    store: Store
    executor: Executor
    scheduler: Scheduler
    cluster: ClusterState
    launcher: Launcher

    def wake(self) -> None: ...

    def stop_for_cancel(self, job_id: int) -> str: ...


class Requests:
    """The daemon's answers to the API. `quotas` (whole GPUs per tenant, None: no quota) and `limits.caps` (caps
    on what a tenant's running jobs hold beyond GPUs) are the live mappings the quota admission plugin reads;
    `limits` holds every tenant's limits (limits.py), `tokens` maps token digests to principals. All are loaded by
    `load`. `feasibility` checks submissions against the nodes with the policy's node filters."""

    def __init__(self, host: RequestHost, defaults: TenantLimits, feasibility: Feasibility) -> None:
        self.host = host
        self.quotas: dict[str, int | None] = {}
        self.limits = TenantBook(defaults)
        self.tokens: dict[str, Principal] = {}
        self.feasibility = feasibility
        self._used_s: dict[str, float] = {}  # token digest -> when its use was last written to the store
        self._cancelled_early: set[int] = set()  # committed by `submit`, cancelled before the scheduler had it
        self._pending_lock = threading.Lock()  # a tenant's pending jobs counted and the new one committed at once

    def load(self) -> None:
        """Tenants' quotas, limits and tokens from the store (at start)."""
        with self.host.store.reader() as s:
            for tenant in s.scalars(select(TenantRow)):
                self.quotas[tenant.name] = tenant.quota_gpus
                if tenant.limits:
                    self.limits.set(tenant.name, tenant.limits)
            for token in s.scalars(select(TokenRow)):
                self.tokens[token.digest] = Principal(token.admin, token.tenant)

    def principal(self, digest: str) -> Principal | None:
        """Who the token with this digest speaks for (None: no such token). Notes its use in the store, at most
        once a minute per token, so `list_tokens` can tell stale tokens."""
        who = self.tokens.get(digest)
        if who is not None:
            now = self.host.clock()
            if now - self._used_s.get(digest, float("-inf")) >= LAST_USED_RESOLUTION_S:
                self._used_s[digest] = now
                with self.host.store.session() as s:
                    s.execute(update(TokenRow).where(TokenRow.digest == digest).values(last_used_s=now))
        return who

    def submit(self, spec: JobSpec, who: Principal) -> tuple[int, bool]:
        """Accept a job: check it, commit it, queue it. Returns (job id, created); created is False when the
        idempotency key names a job already accepted with the same definition (409 when it differs). Raises
        ServeError (nothing is stored then)."""
        tenant = self._tenant_for(spec, who)
        problem = self.host.executor.validate(tuple(spec.command))
        if problem:
            raise ServeError(422, problem, "command")
        problem = self.host.launcher.identities.workdir_problem(spec.workdir)
        if problem:
            raise ServeError(422, problem, "workdir")
        limits = self.limits[tenant]
        refused = limits.refusal(spec, tenant, who.admin)
        if refused is not None:
            raise refused
        self._check_fits(spec)
        quota = self.quotas.get(tenant)
        if quota is not None and spec.total_gpu_milli > quota * GPU_MILLI:
            raise ServeError(403, f"the job asks for {_gpus_text(spec.total_gpu_milli)} GPUs; tenant {tenant}'s "
                             f"quota is {quota}", "gpu_milli" if spec.gpu_milli else "gpus")
        row = _row_of(spec, tenant, self.host.clock())
        refused = self.feasibility.refusal(job_of(row), self.host.cluster.nodes)
        if refused is not None:
            raise refused
        # The commit happens outside the daemon's lock (the loop and other requests go on meanwhile); the job is
        # handed to the scheduler only once it is durable. Its id is not yet known to anyone who could cancel it.
        try:
            if limits.max_pending_jobs is None:
                job_id, job = self._commit(row, limits.max_pending_jobs)
            else:
                with self._pending_lock:
                    job_id, job = self._commit(row, limits.max_pending_jobs)
        except IntegrityError:  # the same idempotency key, submitted at the same moment: that job wins
            found = self._idempotent(row)
            if found is None:
                raise
            return found, False
        if job is None:
            return job_id, False
        with self.host.lock:
            if job_id in self._cancelled_early:
                self._cancelled_early.discard(job_id)
            else:
                self.host.scheduler.submit(job, row.submit_s)
        self.host.wake()
        return job_id, True

    def _commit(self, row: JobRow, max_pending_jobs: int | None) -> tuple[int, Job | None]:
        """Store the job: (its id, the scheduler's view of it), or (the id, None) when the idempotency key names
        a job already accepted. Raises ServeError 429 when its tenant has `max_pending_jobs` pending already."""
        with self.host.store.session() as s:
            if row.idempotency_key is not None:
                found = self._idempotent(row)
                if found is not None:
                    return found, None
            if max_pending_jobs is not None:
                pending = s.scalar(select(func.count()).select_from(JobRow).where(
                    JobRow.tenant == row.tenant, JobRow.state == "pending")) or 0
                if pending >= max_pending_jobs:
                    raise ServeError(429, f"tenant {row.tenant} has {pending} pending jobs; its max_pending_jobs is "
                                     f"{max_pending_jobs} (submit again once some have started)")
            s.add(row)
            s.flush()
            return row.id, job_of(row)

    def _idempotent(self, row: JobRow) -> int | None:
        """The job accepted before under `row`'s tenant and idempotency key, or None; ServeError 409 naming the
        first field that differs when that job's definition is not `row`'s (a key reused for another job)."""
        with self.host.store.reader() as s:
            found = s.scalar(select(JobRow).where(JobRow.tenant == row.tenant,
                                                  JobRow.idempotency_key == row.idempotency_key))
            if found is None:
                return None
            differs = next((c for c in _DEFINITION if getattr(found, c) != getattr(row, c)), None)
            if differs is not None:
                raise ServeError(409, f"idempotency key {row.idempotency_key!r} was used for job {found.id}, "
                                 f"whose {differs} differs: a key names one job", "idempotency_key")
            return found.id

    def _tenant_for(self, spec: JobSpec, who: Principal) -> str:
        if who.admin:
            return spec.tenant or "default"
        assert who.tenant is not None
        if spec.tenant is not None and spec.tenant != who.tenant:
            raise ServeError(403, f"a token of tenant {who.tenant} cannot submit for tenant {spec.tenant}",
                             "tenant")
        return who.tenant

    def _check_fits(self, spec: JobSpec) -> None:
        nodes = self.host.cluster.nodes
        total = self.host.cluster.total_gpus
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
        with self.host.lock:
            now = self.host.clock()
            with self.host.store.session() as s:
                row = s.get(JobRow, job_id)
                if row is None or not who.sees(row.tenant):
                    raise ServeError(404, f"no job {job_id}")
                if row.state in TERMINAL_STATES:
                    raise ServeError(409, f"job {job_id} is already {row.state}")
                if row.state != "pending":
                    row.cancel_requested = True
                    running = True
                else:
                    row.state, row.end_s, row.reason = "cancelled", now, "cancelled by request"
                    running = False
            if running:
                return self.host.stop_for_cancel(job_id)
            key = str(job_id)
            if not self.host.scheduler.cancel(key, now):
                if key in self.host.scheduler.jobs:
                    raise RuntimeError(f"job {job_id} was pending in the store but not in the scheduler")
                self._cancelled_early.add(job_id)  # committed by `submit`, not yet handed to the scheduler
            return "cancelled"

    def create_token(self, tenant: str | None, name: str = "") -> str:
        """A new token for `tenant` (None: an admin token); the tenant is created without a quota if new."""
        token = new_token()
        with self.host.lock, self.host.store.session() as s:
            if tenant is not None and s.get(TenantRow, tenant) is None:
                s.add(TenantRow(name=tenant, quota_gpus=None, created_s=self.host.clock()))
                self.quotas.setdefault(tenant, None)
            s.add(TokenRow(digest=digest_of(token), tenant=tenant, admin=tenant is None, name=name,
                           created_s=self.host.clock()))
            self.tokens[digest_of(token)] = Principal(tenant is None, tenant)
        return token

    def set_limits(self, tenant: str, changes: Mapping[str, Any]) -> TenantLimits:
        """Change a tenant's limits (field -> value; None: back to the server's default) and commit them; returns
        its limits now. Raises ServeError 422 for a value the limits refuse."""
        with self.host.lock, self.host.store.session() as s:
            overrides = {**self.limits.overrides.get(tenant, {}), **changes}
            overrides = {k: v for k, v in overrides.items() if v is not None}
            try:
                limits = self.limits.set(tenant, overrides)
            except ValueError as exc:
                field, _, _ = str(exc).partition(":")
                raise ServeError(422, str(exc), field) from None
            row = s.get(TenantRow, tenant)
            if row is None:
                s.add(TenantRow(name=tenant, quota_gpus=None, created_s=self.host.clock(), limits=overrides))
                self.quotas.setdefault(tenant, None)
            else:
                row.limits = overrides
            self.host.scheduler.changed()  # a raised cap may let a waiting job start
        self.host.wake()
        return limits

    def list_tokens(self) -> list[dict[str, Any]]:
        """Every token but never its secret: id, tenant (None for the admin token), admin, name, created_s,
        last_used_s."""
        with self.host.store.reader() as s:
            return [{"id": t.id, "tenant": t.tenant, "admin": t.admin, "name": t.name, "created_s": t.created_s,
                     "last_used_s": t.last_used_s} for t in s.scalars(select(TokenRow).order_by(TokenRow.id))]

    def revoke_token(self, token_id: int) -> dict[str, Any]:
        """Delete a tenant token: from now on it gets 401. ServeError 404 for no such token, 409 for the admin
        token (the one way in for the operator; it lives in the data dir's admin.token)."""
        with self.host.lock, self.host.store.session() as s:
            row = s.get(TokenRow, token_id)
            if row is None:
                raise ServeError(404, f"no token {token_id}", "token_id")
            if row.admin:
                raise ServeError(409, f"token {token_id} is the admin token, which cannot be revoked", "token_id")
            s.delete(row)
            self.tokens.pop(row.digest, None)
            self._used_s.pop(row.digest, None)
            return {"id": token_id, "tenant": row.tenant, "revoked": True}

    def set_quota(self, tenant: str, quota_gpus: int | None) -> None:
        with self.host.lock, self.host.store.session() as s:
            row = s.get(TenantRow, tenant)
            if row is None:
                s.add(TenantRow(name=tenant, quota_gpus=quota_gpus, created_s=self.host.clock()))
            else:
                row.quota_gpus = quota_gpus
            self.quotas[tenant] = quota_gpus
            self.host.scheduler.changed()  # a raised quota may let a waiting job start
        self.host.wake()


# what a submission defines (the columns `_row_of` fills from the spec): a reused idempotency key must repeat them
_DEFINITION = ("name", "priority", "priority_class", "tasks", "gpus_per_task", "gpu_milli", "cpu_milli", "mem_mib",
               "gpu_models", "node_selector", "tolerations", "affinity", "labels", "command", "env", "workdir",
               "max_retries", "min_tasks", "max_tasks", "target_gpu_util")


def _row_of(spec: JobSpec, tenant: str, now_s: float) -> JobRow:
    """The store's row of an accepted submission, not yet added."""
    return JobRow(name=spec.name, tenant=tenant, user="", state="pending", priority=spec.priority,
                  priority_class=spec.priority_class or "", tasks=spec.tasks, gpus_per_task=spec.gpus,
                  gpu_milli=spec.gpu_milli, cpu_milli=spec.cpu_milli, mem_mib=spec.mem_mib,
                  gpu_models=list(spec.gpu_models), node_selector=dict(spec.node_selector),
                  tolerations=spec.tolerations, affinity=spec.affinity, labels=dict(spec.labels),
                  command=list(spec.command), env=dict(spec.env), workdir=spec.workdir, max_retries=spec.retries,
                  submit_s=now_s, idempotency_key=spec.idempotency_key, cancel_requested=False, attempts=0,
                  failures=0, preemptions=0, reason="", min_tasks=spec.min_tasks, max_tasks=spec.max_tasks,
                  target_gpu_util=spec.target_gpu_util, resizes=0)


def _gpus_text(milli: int) -> str:
    return f"{milli // GPU_MILLI}" if milli % GPU_MILLI == 0 else f"{milli / GPU_MILLI:g}"
