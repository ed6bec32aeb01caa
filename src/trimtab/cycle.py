"""One scheduling cycle as phases (open, admit, allocate, preempt, start, reserve, close) over one CycleBooks
record; the plugins of a Profile asked point by point. ClusterState changes only through Txns (a gang whole)."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from trimtab.cluster import Allocation
from trimtab.model import Job
from trimtab.policy import (
    _DOES_NOT_FIT,
    _NO_FREE_GPU,
    _OK,
    _ONE_TASK,
    _RESERVED,
    CycleContext,
    Decision,
    Eviction,
    Plugin,
    Resize,
    Status,
    check_points,
)
from trimtab.profile import PluginRef, Profile, Registry, _split_ref
from trimtab.queue import RunningKeys
from trimtab.usage import UsageBook
from trimtab.why import fit_status

OnStart = Callable[[Job, Allocation], None]
OnPreempt = Callable[[str], None]
UnitOf = Callable[[Job, Any], list[Job]]


@dataclass(slots=True)
class CycleBooks:
    """The mutable state of one cycle, kept by its phases: what it decided so far, the shapes it blocked, the
    Scheduler's callbacks, the GPUs reserved per node (and their total, and the earliest reservation start), the
    worst running job's key when the cycle opened, and the jobs whose preemption attempt failed (see Plugin.preempt)."""

    ctx: CycleContext
    blocked: set[Any]  # shapes whose later jobs the queue may skip
    on_start: OnStart
    on_preempt: OnPreempt
    unit_of: UnitOf | None
    reserved: np.ndarray  # GPUs reserved per node: out of reach of the jobs ordered after the reservations
    worst_running: tuple[Any, ...] | None  # the highest order key of a running job (None: no candidate victim)
    decision: Decision = field(default_factory=Decision)
    reserved_total: int = 0
    reserved_from_s: float = math.inf  # earliest start of a node reservation: jobs done by then may use its GPUs
    fail_gpus: float = math.inf  # GPUs of the smallest job whose preemption attempt failed in this cycle
    # (tasks, GPUs per task) of every such job: a later job asking as many tasks of as many GPUs or more fails too
    failed: list[tuple[int, int]] = field(default_factory=list)


class Framework:
    """Plugins instantiated from a Profile (checked: each plugin implements the points it is listed at), the
    books the cycle keeps between cycles (running jobs' keys, usage), and the cycle that runs them."""

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
        self.resize = [get(r) for r in profile.resize]
        self.start_below = [p for p in self.resize if p.sizes_starts]  # Plugin.start_tasks
        self.plugins: list[Plugin] = list(instances.values())
        # the plugins that do something when a cycle opens or closes (the others keep Plugin's no-op), in order
        self._openers = [p for p in self.plugins if type(p).open is not Plugin.open]
        self._closers = [p for p in self.plugins if type(p).close is not Plugin.close]
        check_points(profile.name, {"admit": self.admit, "order": self.order, "filter": self.filter,
                                     "score": [p for p, _ in self.score], "place": [self.placer],
                                     "preempt": self.preempt, "backfill": self.backfill, "resize": self.resize})
        self.static_order = all(p.static_order for p in self.order)
        # a dynamic order whose changing parts are shared by groups of jobs (see Plugin.key_group) is kept sorted
        # within groups (not with waiting jobs' keys changing at announced times)
        self._grouped = [i for i, p in enumerate(self.order) if not p.static_order]
        self.group_order = (not self.static_order
                            and all(type(self.order[i]).key_group is not Plugin.key_group for i in self._grouped)
                            and all(type(p).pending_key_expires_s is Plugin.pending_key_expires_s
                                    for p in self.order))
        # order plugins whose keys may expire, of running / waiting jobs (the others keep Plugin's "never")
        self._pending_expiring = [p for p in self.order
                                  if type(p).pending_key_expires_s is not Plugin.pending_key_expires_s]
        self.running_keys = RunningKeys(self.order)
        # under a static order, the job the cycle is visiting and its queue key: the key its order plugins gave
        # (a waiting job's key holds between its expiry times, which the Scheduler handles before the cycle), so
        # `order_key` answers the preempt plugins' question for it without asking the plugins again
        self._visiting: tuple[Job | None, tuple[Any, ...]] = (None, ())
        self._has_preempt = bool(self.preempt)
        self._keys_moved = False  # a start or stop in this cycle may have moved running keys (dynamic order)
        self.keeps_usage = any(p.needs_usage for p in self.plugins)
        self.usage = UsageBook()
        self.placements_tried = 0  # calls of the place plugin (one per job, or one per consolidated unit)
        # the world wants each waiting job's reason in words (why.fit_status), not only its cause: the live service
        self.explains = False

    def forget(self, job_id: str) -> None:
        """A job stopped running: drop its cached key and its usage."""
        self.running_keys.drop(job_id)
        if self.keeps_usage:
            self.usage.remove(job_id)

    def order_key(self, job: Job, ctx: CycleContext) -> tuple[Any, ...]:
        visiting, key = self._visiting
        if job is visiting:
            return key
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

    # ------------------------------------------------------------------------------------------------- the cycle

    def cycle(self, ctx: CycleContext, queue: Iterable[tuple[tuple[Any, ...], Job, Any]], blocked: set[Any],
              on_start: OnStart, on_preempt: OnPreempt, unit_of: UnitOf | None = None) -> Decision:
        """One scheduling cycle over `queue`: the pending jobs with their order keys and request shapes, lowest key
        first. `ctx` is complete (Scheduler.cycle builds it over this Framework's running keys and usage book).
        When a job cannot start, its shape goes into `blocked`, and the queue may skip the jobs of that shape
        ordered after it (they cannot start either: same request, fewer GPUs left).

        Jobs are taken in order; each is placed whole inside a Txn or not at all. A job that does not fit may
        preempt running jobs ordered after it (victims are stopped only if the job then fits), and may reserve
        (later jobs keep off the reserved GPUs). The cycle ends early once no GPU is free and no running job is
        ordered after the next job, because nothing later in the queue could start. A job stopped in this cycle
        does not start again in it. `on_start` / `on_preempt` let the Scheduler update its books as each answer
        is committed.

        With `unit_of` (task consolidation), a single-task job that may start asks it for the jobs that follow it
        in the queue and may join it in one unit (see `_start_unit`)."""
        books = self._open(ctx, blocked, on_start, on_preempt, unit_of)
        static_order = self.static_order
        try:
            for key, job, shape in queue:
                if static_order:
                    self._visiting = (job, key)
                if not self._visit(books, key, job, shape):
                    break
        finally:
            self._visiting = (None, ())
        return self._close(books)

    def _open(self, ctx: CycleContext, blocked: set[Any], on_start: OnStart, on_preempt: OnPreempt,
              unit_of: UnitOf | None) -> CycleBooks:
        """Phase open: the usage book caught up, every plugin opened, then the running jobs' keys refreshed."""
        if self.keeps_usage:
            self.usage.sync(ctx.running)
        for plugin in self._openers:  # before running keys are refreshed: keys may read per-cycle state (drf)
            plugin.open(ctx)
        if self.preempt:
            self.running_keys.refresh(ctx)
        ranked = ctx.running_ranked
        return CycleBooks(ctx, blocked, on_start, on_preempt, unit_of, np.zeros(len(ctx.cluster), dtype=np.int64),
                          ranked[-1][0] if ranked else None)

    def _visit(self, books: CycleBooks, key: tuple[Any, ...], job: Job, shape: Any) -> bool:
        """One job in queue order, through the phases admit, allocate (consolidated or alone), preempt, allocate
        below the request (an elastic job, when a resize plugin sizes starts), start or reserve. False: the cycle
        ends here (nothing ordered after this job can start)."""
        ctx, decision, reserved_total = books.ctx, books.decision, books.reserved_total
        if self._keys_moved:
            self._fresh_running_keys(books)
        # EASY backfill: a job expected to end before the earliest reservation starts does not delay it
        ends_in_time = reserved_total > 0 and ctx.now_s + ctx.remaining_s(job) <= books.reserved_from_s
        free_for_job = ctx.cluster.free_gpus_total - (0 if ends_in_time else reserved_total)
        outranks = books.worst_running is not None and key < books.worst_running
        may_preempt = (self._has_preempt and outranks
                       and (job.gpus < books.fail_gpus or not _fails_like(job, books.failed))
                       and job.preemption_policy != "Never")
        if free_for_job <= 0 and job.gpus > 0 and not may_preempt:
            decision.stalled[job.id] = self._blocked_status(books, job, ends_in_time, _NO_FREE_GPU, False)
            if not outranks or books.fail_gpus <= 1 or not self._has_preempt:
                return False  # no job after this one can start or preempt either
            books.blocked.add(shape)
            return True
        if decision.preemptions and job.id in decision.preemptions:
            return True
        if self.admit:
            status = self._admit(job, ctx)
            if not status.success:
                decision.waiting[job.id] = status
                books.blocked.add(shape)  # the same shape asks the same of the same tenant and queue
                return True
        if books.unit_of is not None and job.tasks == 1 and not reserved_total and job.gpus <= free_for_job:
            members = books.unit_of(job, shape)
            if members and self._start_unit([job, *members], books):
                return True
        alloc = self._allocate(books, job, ends_in_time) if job.gpus <= free_for_job else None
        if alloc is None and may_preempt:
            alloc = self._preempt_for(job, books)
            if alloc is None:
                books.fail_gpus = min(books.fail_gpus, job.gpus)
                books.failed.append((job.tasks, job.task.gpus))
        if alloc is None and job.elastic is not None and self.start_below:
            alloc = self._allocate_below(books, job)
        if alloc is not None:
            self._start(books, job, alloc, ends_in_time)
            return True
        books.blocked.add(shape)
        decision.waiting[job.id] = self._blocked_status(books, job, ends_in_time, _DOES_NOT_FIT,
                                                        job.gpus <= free_for_job)
        return self._reserve(books, job) if self.backfill else True

    def _blocked_status(self, books: CycleBooks, job: Job, ends_in_time: bool, no_room: Status,
                        tried: bool) -> Status:
        """Why `job` cannot start in this cycle when no admit plugin holds it: RESERVATION when it would fit but for
        the GPUs reserved for jobs ahead of it, else FIT (`no_room`). With `explains`, the status says it in words
        (why.fit_status); without, one of the shared statuses (the causes alone: a simulation counts them), and
        the filters are asked again only for a job whose placement was `tried` under the hold (they have answered
        for it in this cycle already; asking them of another job could change what they remember). A job not
        tried for want of free GPUs outside the reservations waits for the reservations when GPUs enough are free."""
        ctx = books.ctx
        held = books.reserved if books.reserved_total and not ends_in_time else None
        if self.explains:
            holders = [r.job_id for r in books.decision.reservations]
            return fit_status(job, ctx, self.filter, held, holders) or Status(
                no_room.code, f"no placement found by {self.placer.name}", cause=no_room.cause)
        if held is None or job.gpus > ctx.cluster.free_gpus_total:
            return no_room
        if not tried or int(np.minimum(self.feasible(job, ctx), job.tasks).sum()) >= job.tasks:
            return _RESERVED  # it would fit but for the hold: one more fit count, only under a reservation
        return no_room

    def _admit(self, job: Job, ctx: CycleContext) -> Status:
        """Phase admit: the first non-success of the `admit` plugins."""
        for plugin in self.admit:
            status = plugin.admit(job, ctx)
            if not status.success:
                return status
        return _OK

    def _allocate(self, books: CycleBooks, job: Job, ends_in_time: bool) -> Allocation | None:
        """Phase allocate: where the job would go now, the reserved GPUs out of its reach unless it ends before
        the reservations start."""
        ctx = books.ctx
        if books.reserved_total and not ends_in_time:
            with ctx.cluster.txn() as txn:  # discarded: the hold ends with the placement attempt
                txn.hold_gpus(books.reserved)
                return self.try_place(job, ctx)
        return self.try_place(job, ctx)

    def _allocate_below(self, books: CycleBooks, job: Job) -> Allocation | None:
        """Phase allocate, below the request: an elastic job that cannot start whole starts on the number of tasks
        the first `start_tasks` answer gives (Plugin.start_tasks), placed as one gang of that many tasks, the
        reserved GPUs always out of its reach (its expected end is at its request's speed: on fewer GPUs it could
        overrun a reservation it backfilled). None: fewer than its minimum fit, no answer, or no placement."""
        assert job.elastic is not None
        ctx = books.ctx
        with ctx.cluster.txn() as txn:  # discarded: the hold ends with the placement attempt
            if books.reserved_total:
                txn.hold_gpus(books.reserved)
            fit = self.feasible(job, ctx)
            room = min(int(np.minimum(fit, job.tasks).sum()), job.tasks - 1)
            if room < job.elastic.min_tasks:
                return None
            for plugin in self.start_below:
                tasks = plugin.start_tasks(job, ctx, room)
                if tasks is not None:
                    return self._place(replace(job, tasks=tasks), ctx, fit)
        return None

    def _preempt_for(self, job: Job, books: CycleBooks) -> Allocation | None:
        """Phase preempt: the first `preempt` plugin answer whose victims, released tentatively in a Txn, let the
        job fit (the plugins then see a context whose `releasing` names them); the victims are booked as stopped and
        the preemption recorded (`Decision.evictions`). None: no answer works (nothing changed)."""
        ctx, decision = books.ctx, books.decision
        for plugin in self.preempt:
            victims = plugin.preempt(job, ctx)
            if not victims or any(ctx.running[v].start_s == ctx.now_s and v in {j.id for j, _ in decision.starts}
                                  for v in victims):
                continue  # a job started in this very cycle is never stopped by it
            idle_before = ctx.cluster.free_gpus.copy()
            with ctx.cluster.txn() as txn:
                for victim in victims:
                    txn.release(ctx.running[victim].alloc)
                alloc = self.try_place(job, replace(ctx, releasing=frozenset(victims)))
                if alloc is None:
                    continue  # the Txn discards the tentative releases
                txn.commit()
            taken = alloc.counts * alloc.task.gpus
            decision.evictions.append(Eviction(job.id, tuple(victims), sum(ctx.running[v].alloc.gpus for v in victims),
                                               int(np.maximum(taken - idle_before[alloc.nodes], 0).sum())))
            for victim in victims:
                decision.preemptions.append(victim)
                books.on_preempt(victim)
                self.forget(victim)
            self._keys_moved = not self.static_order
            return alloc
        return None

    def _start(self, books: CycleBooks, job: Job, alloc: Allocation, ends_in_time: bool) -> None:
        """Phase start: apply the allocation and book the start; a job that ends in time may have taken reserved
        GPUs, which shrinks the reservations to what is free."""
        cluster = books.ctx.cluster
        with cluster.txn() as txn:
            txn.allocate(alloc)
            txn.commit()
        books.decision.starts.append((job, alloc))
        books.on_start(job, alloc)
        if books.reserved_total and ends_in_time:  # it took reserved GPUs it gives back in time
            np.minimum(books.reserved, cluster.free_gpus, out=books.reserved)
            books.reserved_total = int(books.reserved.sum())
        self._book_running(job, books.ctx)

    def _book_running(self, job: Job, ctx: CycleContext) -> None:
        if self.keeps_usage:
            self.usage.add(job)
        if self._has_preempt:
            self.running_keys.cache(job, ctx)
            self._keys_moved = not self.static_order

    def _fresh_running_keys(self, books: CycleBooks) -> None:
        """Under a dynamic order, a start or stop in this cycle may have moved running jobs' keys (drf: their
        queue's share): asked again before the next job reads them, and at the cycle's close."""
        self._keys_moved = False
        self.running_keys.refresh(books.ctx)
        ranked = books.ctx.running_ranked
        books.worst_running = ranked[-1][0] if ranked else None

    def _reserve(self, books: CycleBooks, job: Job) -> bool:
        """Phase reserve (backfill): the first `backfill` answer for a job that cannot start is kept. False: it
        reserves the whole cluster (strict head-of-line), so the cycle ends."""
        reservation = next((r for p in self.backfill if (r := p.backfill(job, books.ctx)) is not None), None)
        if reservation is None:
            return True
        books.decision.reservations.append(reservation)
        if reservation.nodes is None:
            return False  # strict head-of-line: nothing ordered after this job may start
        books.reserved[reservation.nodes] += reservation.gpus
        books.reserved_total = int(books.reserved.sum())
        books.reserved_from_s = min(books.reserved_from_s, reservation.start_s)
        return True

    def _close(self, books: CycleBooks) -> Decision:
        """Phase close: every plugin's close; the earliest wake-up asked (or running key expiry) is `wake_s`."""
        decision = books.decision
        for plugin in self.resize:
            self._apply_resizes(plugin.resize(books.ctx, decision), books)
        if self._keys_moved:
            self._fresh_running_keys(books)
        wakes = [w for p in self._closers if (w := p.close(books.ctx, decision)) is not None]
        expiry_s = self.running_keys.next_expiry_s()
        if expiry_s is not None:
            wakes.append(expiry_s)
        decision.wake_s = min(wakes) if wakes else None
        return decision

    def _apply_resizes(self, resizes: list[Resize], books: CycleBooks) -> None:
        """Phase resize: each answer applied in a Txn (an infeasible one is a bug: the Txn raises) and recorded;
        the job's cached key is dropped (the next cycle computes it over its new allocation). Its usage stays: the
        usage book counts a job at the size it asked for."""
        for resize in resizes:
            with books.ctx.cluster.txn() as txn:
                txn.release(resize.before)
                txn.allocate(resize.alloc)
                txn.commit()
            books.decision.resizes.append(resize)
            self.running_keys.drop(resize.job_id)

    def _start_unit(self, unit: list[Job], books: CycleBooks) -> bool:
        """Task consolidation: start the longest prefix of `unit` (single-task jobs of one request shape, in queue
        order, the first already admitted) that is admitted and fits, placed as one gang of that many tasks, then
        booked job by job. False, with nothing started, when fewer than two would start: the caller goes on with
        the first job alone."""
        ctx, first = books.ctx, unit[0]
        admitted = self._admit_unit(unit, ctx, books.decision)
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
            books.decision.starts.append((job, alloc))
            books.on_start(job, alloc)
            self._book_running(job, ctx)
        return True

    def _admit_unit(self, unit: list[Job], ctx: CycleContext, decision: Decision) -> list[Job]:
        """The longest prefix of `unit` that is admitted in queue order, each job seeing the usage of the ones
        before it (booked for the question only)."""
        admitted = unit[:1]
        counted: list[Job] = []  # in the usage book while the next ones are admitted
        for job in unit[1:]:
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
        return admitted


def _fails_like(job: Job, failed: list[tuple[int, int]]) -> bool:
    """Does a job whose preemption attempt failed in this cycle ask no more than `job` (as many tasks or fewer,
    each of as many GPUs or fewer)? Then `job` would fail too (the contract of Plugin.preempt)."""
    return any(job.tasks >= tasks and job.task.gpus >= gpus for tasks, gpus in failed)
