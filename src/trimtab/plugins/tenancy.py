"""Tenancy plugins: who may use how much of the cluster, and in what order tenants are served.

quota (ResourceQuota hard limits per namespace, Volcano queue capability, guarantee and deserved shares with
borrowing and reclaim), drf (weighted dominant-resource fair share with decayed usage), reservation (operators'
windows) and delay (wait a bounded time for a gang's placement on one node or rack)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from trimtab.cluster import GPU_MILLI
from trimtab.model import Job
from trimtab.plugins.victims import fewest_victims
from trimtab.policy import Cause, Code, CycleContext, Decision, Plugin, Status
from trimtab.usage import GPU_MILLI_DIM, USAGE_DIMS, usage_of

_NO_LIMIT = np.iinfo(np.int64).max


def _queue_of(job: Job) -> str:
    return job.queue or job.tenant


class Quota(Plugin):
    """Admission by ResourceQuota and by queue, and reclaim of borrowed capacity.

    admit: a job waits (Code.WAIT, never dropped) while starting it would take its namespace over any hard limit
    of a ResourceQuota there (pods, requests.cpu/memory, limits.cpu/memory, requests.nvidia.com/gpu), or its
    queue over its capability. Each queue deserves a share of the healthy GPUs by weight among the queues that have
    known: the queues listed, and with `tenant_queues` every namespace (a queue of weight 1 once a job of it is
    seen), or the GPUs its Queue's `deserved` says, and at least its `guarantee`. This is the queue's nominal
    share; with `borrowing` a queue may run beyond it on idle GPUs, without it it waits. The GPUs guaranteed to
    other queues are never lent (Volcano's capacity plugin: a queue's real capability is the cluster less the
    others' guarantees).

    preempt (reclaim): a job whose queue stays within its deserved share after it starts may stop jobs of queues
    that run beyond theirs (reclaimable queues only), newest first, never taking a lender below its share: the
    eligible jobs are the newest of each lender up to its GPUs beyond its share, all of one level, handed to the
    one victim search (plugins/victims.py).

    `tenant_gpus` (the serve daemon's per-tenant quotas, whole GPUs, None: no limit) is read live, as the caller
    changes it in place: a job waits while its tenant's running jobs plus it would hold more than the quota,
    counted in milli-GPU (a share of 500 is half a GPU of it). Running jobs count once placed, so a job of the same
    cycle that was admitted but not placed holds nothing back. `tenant_caps` (the serve daemon's caps beyond GPUs,
    read live the same way: tenant -> (usage dimension of USAGE_DIMS, the most its running jobs may hold, the
    limit's name) triples, e.g. ("pods", 16, "max_running_tasks")) holds a job the same way, its reason naming the
    limit."""

    needs_usage: ClassVar[bool] = True

    def __init__(self, quotas: Sequence[Mapping[str, Any]] = (), queues: Sequence[Mapping[str, Any]] = (),
                 borrowing: bool = True, tenant_queues: bool = False,
                 tenant_gpus: Mapping[str, int | None] | None = None,
                 tenant_caps: Mapping[str, tuple[tuple[str, int, str], ...]] | None = None) -> None:
        self.hard: dict[str, list[tuple[str, np.ndarray]]] = {}
        for q in quotas:
            vec = np.array([_NO_LIMIT if q.get(k) is None else int(q[k]) for k in USAGE_DIMS], dtype=np.int64)
            self.hard.setdefault(str(q["namespace"]), []).append((str(q.get("name", "quota")), vec))
        self.weight: dict[str, int] = {str(q["name"]): int(q.get("weight", 1)) for q in queues}
        self.capability: dict[str, int] = {str(q["name"]): int(q["capability_gpus"]) for q in queues
                                           if q.get("capability_gpus") is not None}
        self.reclaimable: dict[str, bool] = {str(q["name"]): bool(q.get("reclaimable", True)) for q in queues}
        self.deserved_spec: dict[str, int] = {str(q["name"]): int(q["deserved_gpus"]) for q in queues
                                              if q.get("deserved_gpus") is not None}
        self.guarantee: dict[str, int] = {str(q["name"]): int(q["guarantee_gpus"]) for q in queues
                                          if q.get("guarantee_gpus")}
        self._healthy_gpus = 0
        self.borrowing = borrowing
        self.tenant_queues = tenant_queues
        self.tenant_gpus = tenant_gpus
        self.tenant_caps = tenant_caps
        self.deserved: dict[str, float] = {}
        # requests held this cycle; usage only grows until a job stops, so they stay held until then
        self._held: dict[tuple[object, ...], Status] = {}
        self._held_at: tuple[float, int] = (-1.0, -1)

    @property
    def shares(self) -> bool:
        return bool(self.weight) or self.tenant_queues

    def open(self, ctx: CycleContext) -> None:
        if not self.shares:
            return
        if self.tenant_queues:
            for queue in ctx.usage.by_queue:
                self.weight.setdefault(queue, 1)
        self._share_out(ctx)

    def _share_out(self, ctx: CycleContext) -> None:
        """Each queue's deserved GPUs: its `deserved` where the Queue says, else its weight's share of the healthy
        GPUs the explicit ones leave; at least its guarantee."""
        healthy_gpus = self._healthy_gpus = int(ctx.cluster.cap_gpus[ctx.cluster.healthy].sum())
        by_weight = {q: w for q, w in self.weight.items() if q not in self.deserved_spec}
        total_w = sum(by_weight.values())
        left = max(healthy_gpus - sum(self.deserved_spec.values()), 0)
        self.deserved = {q: left * w / total_w for q, w in by_weight.items()} if total_w else {}
        self.deserved.update({q: float(d) for q, d in self.deserved_spec.items() if q in self.weight})
        for q, g in self.guarantee.items():
            if q in self.deserved:
                self.deserved[q] = max(self.deserved[q], float(g))

    def admit(self, job: Job, ctx: CycleContext) -> Status:
        if self.tenant_queues and _queue_of(job) not in self.weight:
            self.weight[_queue_of(job)] = 1
            self._share_out(ctx)
        if self._held_at != (ctx.now_s, ctx.usage.removals):
            self._held_at = (ctx.now_s, ctx.usage.removals)
            self._held.clear()
        key: tuple[object, ...] = (job.tenant, job.queue, job.tasks, job.task, job.task_limits)
        if self.tenant_gpus is not None:  # a held answer stands only while the tenant's quota does
            key = (*key, self.tenant_gpus.get(job.tenant))
        if self.tenant_caps is not None:
            key = (*key, self.tenant_caps.get(job.tenant))
        status = self._held.get(key)
        if status is None:
            status = self._check(job, ctx)
            if not status.success:
                self._held[key] = status
        return status

    def _check(self, job: Job, ctx: CycleContext) -> Status:
        if self.tenant_gpus is not None:
            status = self._check_tenant_gpus(job, ctx)
            if not status.success:
                return status
        if self.tenant_caps is not None:
            status = self._check_tenant_caps(job, ctx)
            if not status.success:
                return status
        quotas = self.hard.get(job.tenant, ())
        need = usage_of(job) if quotas else None
        for name, hard in quotas:
            after = ctx.usage.tenant(job.tenant) + need
            over = np.flatnonzero(after > hard)
            if over.size:
                dim, would = USAGE_DIMS[int(over[0])], int(after[over[0]])
                return Status(Code.WAIT, f"quota: ResourceQuota {job.tenant}/{name}: {dim} would be {would} > "
                              f"{int(hard[over[0]])}", self.name, Cause.QUOTA,
                              f"starts when {job.tenant}'s running jobs free enough {dim} or the admin raises "
                              f"{name}'s {dim} to {would}")
        queue = _queue_of(job)
        used = int(ctx.usage.queue(queue)[1])
        reserved = sum(self.guarantee.values()) - self.guarantee.get(queue, 0)  # others' guarantees: never lent
        if reserved and used + job.gpus > self._healthy_gpus - reserved:
            short = used + job.gpus + reserved - self._healthy_gpus
            return Status(Code.WAIT, f"quota: queue {queue} holds {used} GPUs; {reserved} of the cluster's "
                          f"{self._healthy_gpus} are guaranteed to other queues", self.name, Cause.QUOTA,
                          f"starts when queue {queue}'s running jobs free {short} GPUs")
        cap = self.capability.get(queue)
        if cap is not None and used + job.gpus > cap:
            return Status(Code.WAIT, f"quota: queue {queue} holds {used} of its capability of {cap} GPUs", self.name,
                          Cause.QUOTA, f"starts when queue {queue}'s running jobs free {used + job.gpus - cap} GPUs "
                          f"or the admin raises its capability to {used + job.gpus}")
        if self.shares and not self.borrowing and queue in self.deserved \
                and used + job.gpus > self.deserved[queue] + 1e-9:
            return Status(Code.WAIT, f"quota: queue {queue} holds {used} of its deserved {self.deserved[queue]:.1f} "
                          "GPUs (no borrowing)", self.name, Cause.QUOTA,
                          f"starts when queue {queue}'s running jobs end or its weight is raised")
        return Status.ok()

    def _check_tenant_gpus(self, job: Job, ctx: CycleContext) -> Status:
        assert self.tenant_gpus is not None
        quota = self.tenant_gpus.get(job.tenant)
        if quota is None:
            return Status.ok()
        held_milli = int(ctx.usage.tenant(job.tenant)[GPU_MILLI_DIM])
        after_milli = held_milli + job.tasks * job.task.gpu_milli_total
        if after_milli > quota * GPU_MILLI:
            need = (after_milli - held_milli) / GPU_MILLI
            hint = (f"needs {need:g} GPU{'s' if need > 1 else ''}: starts when {job.tenant}'s running jobs "
                    f"free {(after_milli - quota * GPU_MILLI) / GPU_MILLI:g} or the admin raises the quota to "
                    f"{math.ceil(after_milli / GPU_MILLI)}")
            return Status(Code.WAIT, f"quota: {job.tenant} holds {held_milli / GPU_MILLI:g} of {quota} GPUs",
                          self.name, Cause.QUOTA, hint)
        return Status.ok()

    def _check_tenant_caps(self, job: Job, ctx: CycleContext) -> Status:
        assert self.tenant_caps is not None
        caps = self.tenant_caps.get(job.tenant, ())
        if not caps:
            return Status.ok()
        held, need = ctx.usage.tenant(job.tenant), usage_of(job)
        for dim, cap, name in caps:
            i = USAGE_DIMS.index(dim)
            if held[i] + need[i] > cap:
                return Status(Code.WAIT, f"tenant {job.tenant}: {name} is {cap}; its running jobs hold {int(held[i])} "
                              f"and this job asks for {int(need[i])} more", self.name, Cause.QUOTA)
        return Status.ok()

    def preempt(self, job: Job, ctx: CycleContext) -> list[str] | None:
        if not self.shares:
            return None
        queue = _queue_of(job)
        if int(ctx.usage.queue(queue)[1]) + job.gpus > self.deserved.get(queue, 0.0) + 1e-9:
            return None  # the job would itself run on borrowed GPUs: it may not reclaim
        over = {q: int(ctx.usage.queue(q)[1]) - d for q, d in self.deserved.items()
                if q != queue and self.reclaimable.get(q, True) and int(ctx.usage.queue(q)[1]) > d}
        ranked = sorted(((run.start_s, jid, _queue_of(run.job), run.alloc.gpus) for jid, run in ctx.running.items()
                         if _queue_of(run.job) in over), reverse=True)
        eligible: list[tuple[int, str]] = []
        for _, jid, q, gpus in ranked:
            if over[q] - gpus < 0:
                continue  # with the newer ones, it would take the lender below its deserved share
            over[q] -= gpus
            eligible.append((0, jid))
        return fewest_victims(job, ctx, eligible)


class Drf(Plugin):
    """Dominant-resource fair share: a job's key is its group's dominant share (the largest of its GPU, CPU and
    memory shares of the healthy cluster) divided by the group's weight; lower goes first. Groups are queues (a
    job's queue, else its namespace). With `half_life_s` > 0 the share is the usage decayed by that half-life (as
    Slurm's fair-share), the current share breaking ties, so a group that used much recently waits behind one that
    did not. Keys change as usage does: the queue is ordered again each cycle, and a queue's key is asked again
    after each start or stop of one of its jobs within a cycle, so queues that ask at once share the GPUs by weight
    (Volcano's allocate action orders the queues again after each job it places). Queues given `deserved` GPUs
    weigh that share of the cluster."""

    static_order: ClassVar[bool] = False
    dynamic_running_key: ClassVar[bool] = True
    needs_usage: ClassVar[bool] = True

    def __init__(self, weights: Mapping[str, float] | None = None, half_life_s: float = 0.0,
                 deserved: Mapping[str, int] | None = None) -> None:
        self.weights = {str(k): float(v) for k, v in (weights or {}).items()}
        self.deserved = {str(k): int(v) for k, v in (deserved or {}).items() if int(v) > 0}
        if any(w <= 0 for w in self.weights.values()):
            raise ValueError("drf weights must be positive")
        if half_life_s < 0:
            raise ValueError("drf half_life_s must be >= 0")
        self.half_life_s = float(half_life_s)
        self._decayed: dict[str, float] = {}  # integral of share x 2^(-age / half-life), in seconds
        self._last_s: float | None = None
        self._share: dict[str, float] = {}  # each queue's share when the cycle opened (for the decay)
        self._cap = (1.0, 1.0, 1.0)  # GPUs, CPU millicores and memory MiB of the healthy nodes

    def open(self, ctx: CycleContext) -> None:
        cl = ctx.cluster
        h = cl.healthy
        self._cap = (float(max(int(cl.cap_gpus[h].sum()), 1)), float(max(int(cl.cap_cpu_milli[h].sum()), 1)),
                     float(max(int(cl.cap_mem_mib[h].sum()), 1)))
        if self.half_life_s > 0:  # the decay integrates each queue's share since the last cycle
            cap = np.array(self._cap, dtype=np.float64)
            previous = self._share
            by_queue = ctx.usage.by_queue  # every queue's share in one division
            shares = (np.array(list(by_queue.values()))[:, 1:4] / cap).max(axis=1).tolist() if by_queue else []
            self._share = dict(zip(by_queue, shares, strict=True))
            dt = 0.0 if self._last_s is None else max(ctx.now_s - self._last_s, 0.0)
            decay = 2.0 ** (-dt / self.half_life_s)
            for q in set(self._decayed) | set(previous):
                self._decayed[q] = self._decayed.get(q, 0.0) * decay + previous.get(q, 0.0) * dt
        self._last_s = ctx.now_s

    def kept(self) -> dict[str, Any]:
        if self.half_life_s <= 0 or self._last_s is None:
            return {}
        return {"decayed": {q: round(v, 3) for q, v in self._decayed.items()}, "share": dict(self._share),
                "last_s": self._last_s}

    def keep_on(self, kept: Mapping[str, Any]) -> None:
        if self.half_life_s > 0 and kept:
            self._decayed = {str(q): float(v) for q, v in (kept.get("decayed") or {}).items()}
            self._share = {str(q): float(v) for q, v in (kept.get("share") or {}).items()}
            self._last_s = float(kept["last_s"]) if kept.get("last_s") is not None else None

    def key_group(self, job: Job) -> str:
        return _queue_of(job)

    def _weight(self, queue: str) -> float:
        """The queue's weight; with deserved GPUs given (Volcano's capacity plugin, whose queue order is allocated /
        deserved), its share of the cluster: deserved / GPUs, and the others share what those leave by weight."""
        if not self.deserved:
            return self.weights.get(queue, 1.0)
        if queue in self.deserved:
            return self.deserved[queue] / self._cap[0]
        left = max(1.0 - sum(self.deserved.values()) / self._cap[0], 1e-9)
        others = sum(w for q, w in self.weights.items() if q not in self.deserved) or 1.0
        return left * self.weights.get(queue, 1.0) / others

    def order_key(self, job: Job, ctx: CycleContext) -> tuple[float, float]:
        queue = _queue_of(job)
        w = self._weight(queue)
        used, cap = ctx.usage.queue(queue), self._cap  # now: jobs started in this cycle count
        share = max(float(used[1]) / cap[0], float(used[2]) / cap[1], float(used[3]) / cap[2]) / w
        if self.half_life_s > 0:
            return (round(self._decayed.get(queue, 0.0) / (self.half_life_s / math.log(2)) / w, 9), share)
        return (round(share, 9), 0.0)


class Reservation(Plugin):
    """Operators' reservations (trimtab.io/v1 Reservation): during [start_s, end_s) the reserved GPUs are kept for
    the holder (a namespace, or one job by id). A reservation naming nodes keeps other jobs off those nodes (filter);
    one naming a GPU count (of a model) holds back that many free GPUs from other jobs, minus what the holder already
    uses (admit). Wakes the scheduler at every window edge.

    `unused_gpu_s[name]` books the reserved capacity the holder left unused (GPU-seconds): for a count, the
    reserved GPUs its running jobs do not use; for named nodes, their GPUs left free."""

    shape_by_tenant: ClassVar[bool] = True  # only the holder may use the reserved GPUs
    filter_reason: ClassVar[str] = "are reserved for others"

    def __init__(self, reservations: Sequence[Mapping[str, Any]] = ()) -> None:
        self.reservations = [dict(r) for r in reservations]
        self._active: list[dict[str, Any]] = []
        self.unused_gpu_s: dict[str, float] = {str(r["name"]): 0.0 for r in self.reservations}
        self._unused_now: dict[str, int] = {}  # unused GPUs per reservation since the last cycle
        self._since_s = 0.0

    @staticmethod
    def _holds(r: Mapping[str, Any], job: Job) -> bool:
        return (bool(r.get("job")) and r["job"] == job.id) or (bool(r.get("tenant")) and r["tenant"] == job.tenant
                                                                and not r.get("job"))

    def open(self, ctx: CycleContext) -> None:
        for name, gpus in self._unused_now.items():
            self.unused_gpu_s[name] += gpus * max(ctx.now_s - self._since_s, 0.0)
        self._unused_now = {}
        self._active = [r for r in self.reservations if r["start_s"] <= ctx.now_s < r["end_s"]]

    def filter(self, job: Job, ctx: CycleContext) -> np.ndarray:
        mask = np.ones(len(ctx.cluster), dtype=bool)
        for r in self._active:
            if r.get("nodes") and not self._holds(r, job):
                for name in r["nodes"]:
                    if name in ctx.cluster.index:
                        mask[ctx.cluster.index[name]] = False
        return mask

    def admit(self, job: Job, ctx: CycleContext) -> Status:
        held = 0
        for r in self._active:
            if r.get("nodes") or self._holds(r, job) or not r.get("gpus"):
                continue
            holder_used = self._holder_gpus(r, ctx)
            held += max(int(r["gpus"]) - holder_used, 0)
        if held and ctx.cluster.free_gpus_total - job.gpus < held:
            return Status(Code.WAIT, f"reserved: {held} free GPUs are reserved for others", self.name,
                          Cause.RESERVATION, "starts when the reservation window ends or its holders use it")
        return Status.ok()

    @staticmethod
    def _holder_gpus(r: Mapping[str, Any], ctx: CycleContext) -> int:
        model = r.get("gpu_model") or ""
        return sum(run.alloc.gpus for run in ctx.running.values()
                   if Reservation._holds(r, run.job)
                   and (not model or ctx.cluster.nodes[int(run.alloc.nodes[0])].gpu_model == model))

    def close(self, ctx: CycleContext, decision: Decision) -> float | None:
        self._since_s = ctx.now_s
        for r in self._active:
            if r.get("nodes"):
                idx = [ctx.cluster.index[n] for n in r["nodes"] if n in ctx.cluster.index]
                self._unused_now[str(r["name"])] = int(ctx.cluster.free_gpus[idx].sum())
            else:
                self._unused_now[str(r["name"])] = max(int(r["gpus"]) - self._holder_gpus(r, ctx), 0)
        edges: Iterable[float] = (t for r in self.reservations for t in (r["start_s"], r["end_s"])
                                  if t > ctx.now_s and math.isfinite(t))
        return min(edges, default=None)


class Delay(Plugin):
    """admit: a gang (more than one task) that could run on one node (or one rack, `scope: rack`) of the nodes
    its filters allow, but cannot right now while it can fit spread out, waits up to `max_delay_s` after its
    submission for the better placement; then it takes what it can get. A gang too large for any one node (rack)
    and a gang that does not fit anyway are never held. Wakes the scheduler when a held gang's wait runs out."""

    def __init__(self, max_delay_s: float = 600.0, scope: str = "node") -> None:
        if scope not in ("node", "rack"):
            raise ValueError(f"delay scope must be node or rack, got {scope!r}")
        if max_delay_s < 0:
            raise ValueError("delay max_delay_s must be >= 0")
        self.max_delay_s = float(max_delay_s)
        self.scope = scope
        self._wake_s = math.inf

    def open(self, ctx: CycleContext) -> None:
        self._wake_s = math.inf

    def _best(self, counts: np.ndarray, ctx: CycleContext) -> int:
        if self.scope == "node":
            return int(counts.max(initial=0))
        return int(np.bincount(ctx.cluster.rack_idx, weights=counts).max(initial=0))

    def admit(self, job: Job, ctx: CycleContext) -> Status:
        until_s = job.submit_s + self.max_delay_s
        if job.tasks <= 1 or ctx.now_s >= until_s:
            return Status.ok()
        cl = ctx.cluster
        allowed = cl.healthy if ctx.node_mask is None else cl.healthy & ctx.node_mask(job)
        per_task = max(job.task.gpus, 1)
        cap = np.where(allowed, cl.cap_gpus // per_task if job.task.gpus else job.tasks, 0)
        fit = np.minimum(np.where(allowed, cl.fit_counts(job.task), 0), job.tasks)
        if self._best(cap, ctx) < job.tasks or self._best(fit, ctx) >= job.tasks or int(fit.sum()) < job.tasks:
            return Status.ok()
        self._wake_s = min(self._wake_s, until_s)
        return Status(Code.WAIT, f"waiting until {until_s:.0f} s for one {self.scope}", self.name, Cause.LOCALITY)

    def close(self, ctx: CycleContext, decision: Decision) -> float | None:
        return self._wake_s if math.isfinite(self._wake_s) else None


PLUGINS = {"quota": Quota, "drf": Drf, "reservation": Reservation, "delay": Delay}
