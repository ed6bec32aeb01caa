"""One scheduling cycle: the plugins of a Profile asked point by point (admit, order, filter, score, place,
preempt, backfill); ClusterState changes only through Txns, so a gang is placed whole or not at all."""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Hashable, Iterable
from dataclasses import replace
from typing import Any

import numpy as np

from trimtab.cluster import Allocation
from trimtab.model import Job
from trimtab.policy import _DOES_NOT_FIT, _OK, _ONE_TASK, CycleContext, Decision, Plugin, Status
from trimtab.profile import PluginRef, Profile, Registry, _split_ref
from trimtab.usage import UsageBook

# ------------------------------------------------------------------------------------------------- framework


class Framework:
    """Plugins instantiated from a Profile, and the cycle that runs them."""

    def __init__(self, profile: Profile, registry: Registry) -> None:
        self.profile = profile
        instances: dict[str, Plugin] = {}

        def get(ref: PluginRef) -> Plugin:
            name, args = _split_ref(ref)
            if name not in instances:
                instances[name] = registry.create(name, {**profile.args.get(name, {}), **args})
            elif args:
                raise ValueError(f"profile {profile.name}: arguments for {name!r} given twice")
            return instances[name]

        self.admit = [get(r) for r in profile.admit]
        self.order = [get(r) for r in profile.order]
        self.filter = [get(r) for r in profile.filter]
        self.score = [(get(n), w) for n, w in profile.score.items() if w > 0]
        self.placer = get(profile.place)
        self.preempt = [get(r) for r in profile.preempt]
        self.backfill = [get(r) for r in profile.backfill]
        self.plugins: list[Plugin] = list(instances.values())
        self.static_order = all(p.static_order for p in self.order)
        # a dynamic order whose changing parts are shared by groups of jobs (see Plugin.key_group) is kept sorted
        # within groups (not with waiting jobs' keys changing at announced times)
        self._grouped = [i for i, p in enumerate(self.order) if not p.static_order]
        self.group_order = (not self.static_order
                            and all(type(self.order[i]).key_group is not Plugin.key_group for i in self._grouped)
                            and all(type(p).pending_key_expires_s is Plugin.pending_key_expires_s
                                    for p in self.order))
        # order plugins whose keys may expire, of running / waiting jobs (the others keep Plugin's "never")
        self._expiring = [p for p in self.order if type(p).key_expires_s is not Plugin.key_expires_s]
        self._pending_expiring = [p for p in self.order
                                  if type(p).pending_key_expires_s is not Plugin.pending_key_expires_s]
        self.dynamic_running_keys = any(p.dynamic_running_key for p in self.order)
        self._running_keys: dict[str, tuple[Any, ...]] = {}
        # the same as (key, start_s, job id), sorted, and each job's entry in it
        self._ranked: list[tuple[tuple[Any, ...], float, str]] = []
        self._rank_entry: dict[str, tuple[tuple[Any, ...], float, str]] = {}
        self._key_expiry: list[tuple[float, str]] = []  # heap of (expiry, job id) for cached running keys
        self.keeps_usage = any(p.needs_usage for p in self.plugins)
        self.usage = UsageBook()
        self.placements_tried = 0  # calls of the place plugin (one per job, or one per consolidated unit)

    def forget(self, job_id: str) -> None:
        """A job stopped running: drop its cached key and its usage."""
        self._drop_running_key(job_id)
        if self.keeps_usage:
            self.usage.remove(job_id)

    def _drop_running_key(self, job_id: str) -> None:
        if self._running_keys.pop(job_id, None) is not None:
            ranked = self._ranked
            del ranked[bisect.bisect_left(ranked, self._rank_entry.pop(job_id))]

    def _cache_running_key(self, job: Job, ctx: CycleContext, rank: bool = True) -> None:
        """Compute a running job's key and when it expires; with `rank` False the caller re-sorts `_ranked`."""
        if rank:
            self._drop_running_key(job.id)
        key = self._running_keys[job.id] = self.order_key(job, ctx)
        entry = self._rank_entry[job.id] = (key, ctx.running[job.id].start_s, job.id)
        if rank:
            bisect.insort(self._ranked, entry)
        expiry = math.inf
        for plugin in self._expiring:
            expiry = min(expiry, plugin.key_expires_s(job, ctx))
        if expiry < math.inf:
            heapq.heappush(self._key_expiry, (expiry, job.id))

    def _refresh_running_keys(self, ctx: CycleContext) -> None:
        if self.dynamic_running_keys:
            self._running_keys = {jid: self.order_key(run.job, ctx) for jid, run in ctx.running.items()}
            self._rank_entry = {jid: (key, ctx.running[jid].start_s, jid) for jid, key in self._running_keys.items()}
            self._ranked = sorted(self._rank_entry.values())
            return
        if len(self._running_keys) != len(ctx.running):  # jobs started outside a cycle (e.g. re-adopted)
            for job_id, run in ctx.running.items():
                if job_id not in self._running_keys:
                    self._cache_running_key(run.job, ctx)
        heap = self._key_expiry
        expired = []
        while heap and heap[0][0] <= ctx.now_s:
            run = ctx.running.get(heapq.heappop(heap)[1])
            if run is not None:
                expired.append(run.job)
        one_by_one = len(expired) < 64  # many at once (a cohort crossing a threshold): one sort is cheaper
        for job in expired:
            self._cache_running_key(job, ctx, rank=one_by_one)
        if not one_by_one:
            self._ranked = sorted(self._rank_entry.values())
        if len(self._running_keys) > len(ctx.running):
            for job_id in [j for j in self._running_keys if j not in ctx.running]:
                self._drop_running_key(job_id)

    def order_key(self, job: Job, ctx: CycleContext) -> tuple[Any, ...]:
        return tuple([p.order_key(job, ctx) for p in self.order])

    def key_groups(self, job: Job) -> tuple[Hashable, ...]:
        """The groups of `job` under the order's dynamic plugins (group_order)."""
        return tuple(self.order[i].key_group(job) for i in self._grouped)

    def static_key(self, job: Job, ctx: CycleContext) -> tuple[Any, ...]:
        """The order key of a waiting job with the dynamic plugins' parts left out (None), then its submit time:
        how the jobs of one group are sorted (group_order)."""
        grouped = self._grouped
        return (*[None if i in grouped else p.order_key(job, ctx) for i, p in enumerate(self.order)], job.submit_s)

    def group_lift(self, job: Job, ctx: CycleContext) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
        """For the group of `job`: a static key (see `static_key`) -> the full order key and submit time."""
        parts = [(i, self.order[i].order_key(job, ctx)) for i in self._grouped]

        def lift(key: tuple[Any, ...]) -> tuple[Any, ...]:
            full = list(key)
            for i, part in parts:
                full[i] = part
            return tuple(full)

        return lift

    def pending_key_expires_s(self, job: Job, ctx: CycleContext) -> float:
        expiry = math.inf
        for plugin in self._pending_expiring:
            expiry = min(expiry, plugin.pending_key_expires_s(job, ctx))
        return expiry

    def node_mask(self, job: Job, ctx: CycleContext) -> np.ndarray:
        """Nodes that every filter allows for `job`, whatever is free on them now."""
        mask = np.ones(len(ctx.cluster), dtype=bool)
        for plugin in self.filter:
            mask &= plugin.filter(job, ctx)
        return mask

    def feasible(self, job: Job, ctx: CycleContext) -> np.ndarray:
        """Tasks of `job` that fit on each node now, 0 where a filter fails."""
        fit = ctx.cluster.fit_counts(job.task)
        for plugin in self.filter:
            fit[~plugin.filter(job, ctx)] = 0
        return fit

    def scores(self, job: Job, ctx: CycleContext) -> np.ndarray:
        total = np.zeros(len(ctx.cluster), dtype=np.float64)
        for plugin, weight in self.score:
            total += weight * plugin.score(job, ctx)
        return total

    def try_place(self, job: Job, ctx: CycleContext) -> Allocation | None:
        fit = self.feasible(job, ctx)
        if int(np.minimum(fit, job.tasks).sum()) < job.tasks:
            return None
        return self._place(job, ctx, fit)

    def _place(self, job: Job, ctx: CycleContext, fit: np.ndarray) -> Allocation | None:
        self.placements_tried += 1
        alloc = self.placer.place(job, ctx, fit, self.scores(job, ctx))
        if alloc is not None and (alloc.tasks != job.tasks or (alloc.counts > fit[alloc.nodes]).any()):
            raise RuntimeError(f"place plugin {self.placer.name!r} returned an infeasible allocation for {job.id}")
        return alloc

    def cycle(self, ctx: CycleContext, queue: Iterable[tuple[tuple[Any, ...], Job, Any]], blocked: set[Any],
              on_start: Callable[[Job, Allocation], None], on_preempt: Callable[[str], None],
              unit_of: Callable[[Job, Any], list[Job]] | None = None) -> Decision:
        """One scheduling cycle over `queue`: the pending jobs with their order keys and request shapes, lowest key
        first. When a job cannot start, its shape goes into `blocked`, and the queue may skip the jobs of that
        shape ordered after it (they cannot start either: same request, fewer GPUs left).

        Jobs are taken in order; each is placed whole inside a Txn or not at all. A job that does not fit may
        preempt running jobs ordered after it (victims are stopped only if the job then fits), and may reserve
        (later jobs keep off the reserved GPUs). The cycle ends early once no GPU is free and no running job is
        ordered after the next job, because nothing later in the queue could start. A job stopped in this cycle
        does not start again in it. `on_start` / `on_preempt` let the Scheduler update its books as each answer
        is committed.

        With `unit_of` (task consolidation), a single-task job that may start asks it for the jobs that follow it
        in the queue and may join it in one unit (see `_start_unit`)."""
        decision = Decision()
        cluster = ctx.cluster
        ctx.order_key = lambda job: self.order_key(job, ctx)
        ctx.node_mask = lambda job: self.node_mask(job, ctx)
        if self.keeps_usage:
            self.usage.sync(ctx.running)
            ctx.usage = self.usage
        for plugin in self.plugins:  # before running keys are refreshed: keys may read per-cycle state (drf)
            plugin.open(ctx)
        if self.preempt:
            self._refresh_running_keys(ctx)
            ctx.running_keys = self._running_keys
            ctx.running_ranked = self._ranked
        reserved = np.zeros(len(cluster), dtype=np.int64)
        reserved_total = 0
        reserved_from_s = math.inf  # earliest start of a node reservation: jobs done by then may use its GPUs
        worst_running = ctx.running_ranked[-1][0] if ctx.running_ranked else None
        fail_gpus = math.inf  # the smallest job whose preemption attempt failed in this cycle
        has_admit, has_preempt, has_backfill = bool(self.admit), bool(self.preempt), bool(self.backfill)
        for key, job, shape in queue:
            # EASY backfill: a job expected to end before the earliest reservation starts does not delay it
            ends_in_time = reserved_total > 0 and ctx.now_s + ctx.remaining_s(job) <= reserved_from_s
            free_for_job = cluster.free_gpus_total - (0 if ends_in_time else reserved_total)
            outranks = worst_running is not None and key < worst_running
            may_preempt = (has_preempt and outranks and job.gpus < fail_gpus
                           and job.preemption_policy != "Never")
            if free_for_job <= 0 and job.gpus > 0 and not may_preempt:
                if not outranks or fail_gpus <= 1 or not has_preempt:
                    break  # no job after this one can start or preempt either
                blocked.add(shape)
                continue
            if decision.preemptions and job.id in decision.preemptions:
                continue
            if has_admit:
                status = self._admit(job, ctx)
                if not status.success:
                    decision.waiting[job.id] = status
                    blocked.add(shape)  # the same shape asks the same of the same tenant and queue
                    continue
            if unit_of is not None and job.tasks == 1 and not reserved_total and job.gpus <= free_for_job:
                members = unit_of(job, shape)
                if members and self._start_unit([job, *members], ctx, decision, on_start):
                    continue
            alloc = None
            if job.gpus <= free_for_job:
                if reserved_total and not ends_in_time:
                    cluster.free_gpus -= reserved  # reserved GPUs are out of reach of later jobs
                    try:
                        alloc = self.try_place(job, ctx)
                    finally:
                        cluster.free_gpus += reserved
                else:
                    alloc = self.try_place(job, ctx)
            if alloc is None and may_preempt:
                alloc = self._preempt_for(job, ctx, decision, on_preempt)
                if alloc is None:
                    fail_gpus = job.gpus
            if alloc is not None:
                with cluster.txn() as txn:
                    txn.allocate(alloc)
                    txn.commit()
                decision.starts.append((job, alloc))
                on_start(job, alloc)
                if reserved_total and ends_in_time:  # it took reserved GPUs it gives back in time
                    np.minimum(reserved, cluster.free_gpus, out=reserved)
                    reserved_total = int(reserved.sum())
                if self.keeps_usage:
                    self.usage.add(job)
                if has_preempt:
                    self._cache_running_key(job, ctx)
                continue
            blocked.add(shape)
            decision.waiting[job.id] = _DOES_NOT_FIT
            if not has_backfill:
                continue
            reservation = next((r for p in self.backfill if (r := p.backfill(job, ctx)) is not None), None)
            if reservation is not None:
                decision.reservations.append(reservation)
                if reservation.nodes is None:
                    break  # strict head-of-line: nothing ordered after this job may start
                reserved[reservation.nodes] += reservation.gpus
                reserved_total = int(reserved.sum())
                reserved_from_s = min(reserved_from_s, reservation.start_s)
        wakes = [w for p in self.plugins if (w := p.close(ctx, decision)) is not None]
        while self._key_expiry and self._key_expiry[0][1] not in self._running_keys:
            heapq.heappop(self._key_expiry)  # stale: that job stopped
        if self._key_expiry:
            wakes.append(self._key_expiry[0][0])
        decision.wake_s = min(wakes) if wakes else None
        return decision

    def _start_unit(self, unit: list[Job], ctx: CycleContext, decision: Decision,
                    on_start: Callable[[Job, Allocation], None]) -> bool:
        """Task consolidation: start the longest prefix of `unit` (single-task jobs of one request shape, in queue
        order, the first already admitted) that is admitted and fits, placed as one gang of that many tasks, then
        booked job by job. False, with nothing started, when fewer than two would start: the caller goes on with
        the first job alone."""
        first, admitted = unit[0], unit[:1]
        counted: list[Job] = []  # in the usage book while the next ones are admitted
        for job in unit[1:]:  # admission in queue order, each seeing the usage of the ones before it
            if job.id in decision.preemptions:
                break
            if self.admit:
                if self.keeps_usage:
                    self.usage.add(admitted[-1])
                    counted.append(admitted[-1])
                if not self._admit(job, ctx).success:
                    break
            admitted.append(job)
        for job in counted:
            self.usage.remove(job.id)
        fit = self.feasible(first, ctx)
        n = min(len(admitted), int(np.minimum(fit, len(admitted)).sum()))
        if n < 2:
            return False
        gang = self._place(replace(first, tasks=n), ctx, fit)
        if gang is None:
            return False
        with ctx.cluster.txn() as txn:  # taken as one gang: the cluster records which GPUs each task holds
            txn.allocate(gang)
            txn.commit()
        nodes = np.repeat(gang.nodes, gang.counts)
        per_task = 0 if gang.gpu_idx is None else len(gang.gpu_idx) // n
        for k, job in enumerate(admitted[:n]):  # each job holds (and later gives back) its own task's share
            alloc = Allocation(nodes[k:k + 1], _ONE_TASK, first.task,
                               None if gang.gpu_idx is None else gang.gpu_idx[k * per_task:(k + 1) * per_task],
                               None if gang.mig_start is None else gang.mig_start[k:k + 1])
            decision.starts.append((job, alloc))
            on_start(job, alloc)
            if self.keeps_usage:
                self.usage.add(job)
            if self.preempt:
                self._cache_running_key(job, ctx)
        return True

    def _admit(self, job: Job, ctx: CycleContext) -> Status:
        for plugin in self.admit:
            status = plugin.admit(job, ctx)
            if not status.success:
                return status
        return _OK

    def _preempt_for(self, job: Job, ctx: CycleContext, decision: Decision,
                     on_preempt: Callable[[str], None]) -> Allocation | None:
        started = {j.id for j, _ in decision.starts}
        for plugin in self.preempt:
            victims = plugin.preempt(job, ctx)
            if not victims or any(ctx.running[v].start_s == ctx.now_s and v in started for v in victims):
                continue  # a job started in this very cycle is never stopped by it
            with ctx.cluster.txn() as txn:
                for victim in victims:
                    txn.release(ctx.running[victim].alloc)
                ctx.releasing = frozenset(victims)
                try:
                    alloc = self.try_place(job, ctx)
                finally:
                    ctx.releasing = frozenset()
                if alloc is None:
                    continue  # the Txn discards the tentative releases
                txn.commit()
            for victim in victims:
                decision.preemptions.append(victim)
                on_preempt(victim)
                self.forget(victim)
            return alloc
        return None
