"""The waiting queue and the order keys it is sorted by: request shapes, the shape-indexed queue and its ordered
walks, the waiting jobs' key expiry, and the running jobs' order-key cache (ranked, with its expiry heap)."""

from __future__ import annotations

import bisect
import heapq
import math
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any

from trimtab.model import Job
from trimtab.policy import CycleContext, Plugin

Shape = tuple[Any, ...]
ShapeId = int  # a ShapeQueue's number for a Shape: hashed as an int wherever the cycle keeps shapes (sets, dicts)
Key = tuple[Any, ...]
Entry = tuple[tuple[Any, ...], int, str]  # (order key, arrival sequence, job id)
Ranked = tuple[tuple[Any, ...], float, str]  # (order key, start_s, job id) of a running job
OrderKey = Callable[[Job, CycleContext], tuple[Any, ...]]


def shape_of(job: Job, by_tenant: bool = True, by_priority: bool = True) -> Shape:
    """What makes two jobs interchangeable for a cycle: the gang size (and an elastic job's minimum), the task
    request and every placement constraint (with inter-pod affinity, also the pods' labels and namespace; for a
    job bound to start after a gang, that gang); with `by_tenant`, who asks (tenant, queue: admission and
    reservations depend on it); with `by_priority`, priority and preemption policy (preemption depends on them)."""
    shape: Shape = (job.tasks, job.task, job.gpu_models, tuple(sorted(job.node_selector.items())), job.tolerations,
                    job.node_affinity)
    if job.labels or job.pod_affinity:  # inter-pod terms: who the job is and where its namespace's pods run matter
        shape += (tuple(sorted(job.labels.items())), job.pod_affinity, job.tenant)
    if job.elastic is not None:  # it may start below its request (Plugin.start_tasks), down to its minimum
        shape += (job.elastic.min_tasks,)
    if job.after is not None:  # admitted once its gang has started: followers of other gangs must not wait with it
        shape += (job.after,)
    if by_tenant:
        shape += (job.tenant, job.queue)
    if by_priority:
        shape += (job.priority, job.preemption_policy)
    return shape


class ShapeQueue:
    """Pending jobs grouped by request shape, each group sorted by (order key, arrival). A cycle walks the groups'
    heads merged in key order; a group whose head could not start is skipped for the rest of the cycle, because a
    job of the same shape ordered later cannot start either. So a cycle costs O(shapes + starts), not O(queue).
    Shapes are known by number (ShapeId, the same for equal shapes over the queue's life): a shape tuple holds
    dataclasses whose hash is computed in Python, and the cycle looks shapes up several times per job."""

    def __init__(self, shape: Callable[[Job], Shape] = shape_of) -> None:
        self._shape_of = shape
        self._ids: dict[Shape, ShapeId] = {}
        self._groups: dict[ShapeId, list[Entry]] = {}
        self._where: dict[str, tuple[ShapeId, Entry]] = {}

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._where

    def shape(self, job: Job) -> ShapeId:
        """The number of `job`'s request shape."""
        ids = self._ids
        return ids.setdefault(self._shape_of(job), len(ids))

    def seq_of(self, job_id: str) -> int:
        return self._where[job_id][1][1]

    def members(self) -> Iterator[tuple[str, ShapeId]]:
        """Every pending job id with its shape, in the order they were added (queue order when keys are all
        equal, as under a dynamic order)."""
        return ((job_id, where[0]) for job_id, where in self._where.items())

    def add(self, job: Job, key: tuple[Any, ...], seq: int) -> ShapeId:
        """Queue `job` (not queued now) under `key` and arrival `seq`; returns its shape."""
        ids = self._ids
        shape = ids.setdefault(self._shape_of(job), len(ids))
        entry = (key, seq, job.id)
        bisect.insort(self._groups.setdefault(shape, []), entry)
        self._where[job.id] = (shape, entry)
        return shape

    def remove(self, job_id: str) -> None:
        shape, entry = self._where.pop(job_id)
        group = self._groups[shape]
        del group[bisect.bisect_left(group, entry)]
        if not group:
            del self._groups[shape]

    def ordered(self) -> Iterator[Entry]:
        """Every pending entry in queue order."""
        return heapq.merge(*self._groups.values())

    def walk(self, blocked: set[ShapeId], lifts: Callable[[ShapeId, Entry], Callable[[Key], Key]] | None = None,
             moved: Callable[[ShapeId], int] | None = None) -> Walk:
        """Entries in queue order for one cycle; a group is skipped from the moment its shape is in `blocked`
        (the caller adds a shape when its job cannot start, and may remove shapes). Entries may be removed
        (started) or added meanwhile. With `lifts`, each group's stored keys are mapped to the keys the groups are
        merged by, through `lifts(shape, entry)`, asked for each group when the walk starts and again whenever
        `moved(shape)` (a count that grows as the group's merge keys rise) has changed since."""
        return Walk(self._groups, blocked, lifts, moved)


class Walk:
    """One cycle's pass over a ShapeQueue (see `ShapeQueue.walk`). Heap items are (merge key, entry, shape), one
    per group. A group's lift is kept with the `moved` count it was asked at: a head popped with a count since
    changed is lifted again and pushed back (its merge key can only have risen, so the heap's order holds); keys
    that fell are taken in by `rekey`."""

    def __init__(self, groups: dict[ShapeId, list[Entry]], blocked: set[ShapeId],
                 lifts: Callable[[ShapeId, Entry], Callable[[Key], Key]] | None = None,
                 moved: Callable[[ShapeId], int] | None = None) -> None:
        self._groups = groups
        self._blocked = blocked
        self._lifts = lifts
        self._moved = moved
        self._stamp: dict[ShapeId, int] = {}  # the `moved` count each group's lift was asked at
        self.lift: dict[ShapeId, Callable[[Key], Key]] | None = None
        if lifts is None:
            self._heap = [(group[0], group[0], shape) for shape, group in groups.items()]
        else:
            self.lift = {}
            self._heap = [self._lifted(group[0], shape) for shape, group in groups.items()]
        heapq.heapify(self._heap)
        self._last: tuple[Entry, ShapeId] | None = None  # yielded; its group's next entry joins the heap lazily

    def _lifted(self, entry: Entry, shape: ShapeId) -> tuple[Any, Entry, ShapeId]:
        """The heap item of `entry` with its group lifted anew."""
        assert self._lifts is not None and self.lift is not None
        self.lift[shape] = self._lifts(shape, entry)
        if self._moved is not None:
            self._stamp[shape] = self._moved(shape)
        return self._merge_key(entry, shape), entry, shape

    def rekey(self) -> None:
        """Merge keys may have fallen (a job stopped): lift every group whose count moved, and sort again."""
        moved, stamp = self._moved, self._stamp
        if moved is not None:
            self._heap = [item if moved(item[2]) == stamp[item[2]] else self._lifted(item[1], item[2])
                          for item in self._heap]
            heapq.heapify(self._heap)

    def _merge_key(self, entry: Entry, shape: ShapeId) -> Any:
        if self.lift is None:
            return entry
        return self.lift[shape](entry[0]), entry[1]

    def __iter__(self) -> Walk:
        return self

    def __next__(self) -> tuple[Entry, ShapeId]:
        self._advance()
        heap = self._heap
        while heap:
            _, entry, shape = heapq.heappop(heap)
            if shape in self._blocked:
                continue
            if self._moved is not None and self._moved(shape) != self._stamp[shape]:
                heapq.heappush(heap, self._lifted(entry, shape))
                continue
            self._last = (entry, shape)
            return entry, shape
        raise StopIteration

    def _advance(self) -> None:
        if self._last is None:
            return
        entry, shape = self._last
        self._last = None
        group = self._groups.get(shape)
        if shape not in self._blocked and group:
            i = bisect.bisect_right(group, entry)
            if i < len(group):
                heapq.heappush(self._heap, (self._merge_key(group[i], shape), group[i], shape))

    def run(self, limit: int, accept: Callable[[Entry], bool]) -> list[Entry]:
        """The entries that follow the one just yielded with nothing of another shape between them in queue order,
        while `accept` holds, at most `limit`. They stay queued (and are yielded later unless removed)."""
        if self._last is None:
            return []
        entry, shape = self._last
        group = self._groups.get(shape, [])
        bound = self._heap[0][0] if self._heap else None
        out: list[Entry] = []
        i = bisect.bisect_right(group, entry)
        while i < len(group) and len(out) < limit and (bound is None or group[i] < bound) and accept(group[i]):
            out.append(group[i])
            i += 1
        return out


class CycleMoves:
    """The starts and stops of one cycle, counted by the groups of a dynamic order (`Plugin.key_group`) and in all:
    a dynamic key is asked again once a job it may depend on has started or stopped (as Volcano's allocate action
    orders the queues again after each job it places). `lowered`: a job stopped since the queue last looked, so
    some keys may have fallen."""

    def __init__(self) -> None:
        self.by_group: Counter[Hashable] = Counter()
        self.total = 0
        self.lowered = False

    def note(self, group: Hashable, stopped: bool) -> None:
        self.by_group[group] += 1
        self.total += 1
        self.lowered = self.lowered or stopped


class WaitingKeyExpiry:
    """When the order keys of waiting jobs change (a plugin's `pending_key_expires_s`, e.g. LAS aging): a heap of
    (time, queue seq, job id), so the queue moves just those jobs at that time and the scheduler wakes up for it."""

    def __init__(self, expires_s: Callable[[Job, CycleContext], float],
                 heap: list[tuple[float, int, str]] | None = None) -> None:
        self._expires_s = expires_s  # the profile's pending_key_expires_s (Framework)
        self._heap = [] if heap is None else heap

    def moved_to(self, expires_s: Callable[[Job, CycleContext], float]) -> WaitingKeyExpiry:
        """The same expiry times, later ones asked of `expires_s` (a scheduler that carries on from this one)."""
        return WaitingKeyExpiry(expires_s, self._heap)

    def note(self, job: Job, seq: int, ctx: CycleContext) -> None:
        """A job joined the queue as `seq` (or its key was just renewed): remember when its key changes."""
        expiry = self._expires_s(job, ctx)
        if expiry < math.inf:
            heapq.heappush(self._heap, (expiry, seq, job.id))

    def due(self, now_s: float) -> bool:
        return bool(self._heap) and self._heap[0][0] <= now_s

    def rekey(self, queue: ShapeQueue, jobs: Mapping[str, Job], ctx: CycleContext,
              order_key: OrderKey | None) -> list[ShapeId]:
        """Waiting jobs whose key changes by `ctx.now_s` are sorted again in `queue` under `order_key` (None: a
        dynamic order, which computes every key each cycle anyway) and their next change noted. Returns their
        shapes: the caller unblocks them (a job may now go before the head that was blocked)."""
        heap, shapes = self._heap, []
        while heap and heap[0][0] <= ctx.now_s:
            _, seq, job_id = heapq.heappop(heap)
            if job_id not in queue or queue.seq_of(job_id) != seq:
                continue  # stale: it started, was cancelled or queued again since
            job = jobs[job_id]
            shape = queue.shape(job)
            if order_key is not None:
                queue.remove(job_id)
                queue.add(job, order_key(job, ctx), seq)
            self.note(job, seq, ctx)
            shapes.append(shape)
        return shapes

    def next_s(self, queue: ShapeQueue) -> float | None:
        """The next time a queued job's key changes (None: never)."""
        heap = self._heap
        while heap and heap[0][2] not in queue:
            heapq.heappop(heap)  # stale: that job started or was cancelled
        return heap[0][0] if heap else None


class RunningKeys:
    """The order keys of running jobs, cached: `keys` by job id, and `ranked` as (key, start_s, job id) ascending, so
    the jobs ordered after a waiting job are a tail found by bisection (CycleContext.running_keys / running_ranked
    point at these two, which stay the same objects for the cache's life). A key is kept until the order plugins'
    `key_expires_s` (the earliest such time is a wake-up time). The parts of plugins with `dynamic_running_key`
    (SRTF, DRF) are computed again each cycle, once per group when each such plugin names one (`key_group`); the
    parts of the other plugins are then kept from the job's start, as their `key_expires_s` allows, unless they may
    expire (those are asked again each cycle too)."""

    def __init__(self, order: Sequence[Plugin]) -> None:
        self._order = list(order)
        self._expiring = [p for p in order if type(p).key_expires_s is not Plugin.key_expires_s]
        # the parts asked again every cycle when any part moves continuously (empty: keys kept until they expire)
        moves = any(p.dynamic_running_key for p in order)
        self._moving = [i for i, p in enumerate(order) if moves and (p.dynamic_running_key or p in self._expiring)]
        self._grouped = bool(self._moving) and all(type(order[i]).key_group is not Plugin.key_group
                                                   for i in self._moving)
        self.keys: dict[str, tuple[Any, ...]] = {}
        self.ranked: list[Ranked] = []
        self._entry: dict[str, Ranked] = {}  # each job's entry in `ranked`
        self._expiry: list[tuple[float, str]] = []  # heap of (expiry, job id)
        # with moving parts: each running job's key parts as computed at its start (grouped: the moving ones rewritten
        # with each refresh; ungrouped: only the kept ones are read again) and its group
        self._parts: dict[str, tuple[list[Any], tuple[Hashable, ...] | None]] = {}
        # grouped: the running jobs of each group, the groups' moving parts at the last refresh, and the groups a
        # job joined since (its key was computed then); the keys of the other groups change only with their parts
        self._members: dict[tuple[Hashable, ...], dict[str, None]] = {}
        self._moved: dict[tuple[Hashable, ...], list[Any]] = {}
        self._joined: set[tuple[Hashable, ...]] = set()

    def drop(self, job_id: str) -> None:
        """A job stopped running."""
        if self.keys.pop(job_id, None) is not None:
            ranked = self.ranked
            del ranked[bisect.bisect_left(ranked, self._entry.pop(job_id))]
            parts = self._parts.pop(job_id, None)
            if parts is not None and parts[1] is not None:
                members = self._members[parts[1]]
                del members[job_id]
                if not members:
                    del self._members[parts[1]]

    def cache(self, job: Job, ctx: CycleContext, rank: bool = True) -> None:
        """Compute a running job's key and when it expires; with `rank` False the caller re-sorts `ranked`."""
        if rank:
            self.drop(job.id)
        parts = [p.order_key(job, ctx) for p in self._order]
        if self._grouped:
            group = tuple([self._order[i].key_group(job) for i in self._moving])
            self._parts[job.id] = (parts, group)
            self._members.setdefault(group, {})[job.id] = None
            self._joined.add(group)
        elif self._moving:
            self._parts[job.id] = (parts, None)
        key = self.keys[job.id] = tuple(parts)
        entry = self._entry[job.id] = (key, ctx.running[job.id].start_s, job.id)
        if rank:
            bisect.insort(self.ranked, entry)
        expiry = math.inf
        for plugin in self._expiring:
            expiry = min(expiry, plugin.key_expires_s(job, ctx))
        if expiry < math.inf:
            heapq.heappush(self._expiry, (expiry, job.id))

    def refresh(self, ctx: CycleContext) -> None:
        """Bring the cache up to `ctx`: keys of jobs started outside a cycle, expired keys, stopped jobs."""
        if self._moving:
            self._refresh_moving(ctx)
            return
        if len(self.keys) != len(ctx.running):  # jobs started outside a cycle (e.g. re-adopted)
            for job_id, run in ctx.running.items():
                if job_id not in self.keys:
                    self.cache(run.job, ctx)
        heap = self._expiry
        expired = []
        while heap and heap[0][0] <= ctx.now_s:
            run = ctx.running.get(heapq.heappop(heap)[1])
            if run is not None:
                expired.append(run.job)
        one_by_one = len(expired) < 64  # many at once (a cohort crossing a threshold): one sort is cheaper
        for job in expired:
            self.cache(job, ctx, rank=one_by_one)
        if not one_by_one:
            self.ranked[:] = sorted(self._entry.values())
        if len(self.keys) > len(ctx.running):
            for job_id in [j for j in self.keys if j not in ctx.running]:
                self.drop(job_id)

    def _refresh_moving(self, ctx: CycleContext) -> None:
        """Every running job's moving parts asked again (grouped: once per group, and only the jobs of the groups
        whose parts changed or that a job joined get new keys); `ranked` re-sorted from its last order (keys that
        all move alike keep it nearly sorted)."""
        parts_of, running = self._parts, ctx.running
        if len(parts_of) != len(running):  # jobs started outside a cycle (e.g. re-adopted)
            for jid, run in running.items():
                if jid not in parts_of:
                    self.cache(run.job, ctx)
        fresh = self._grouped_entries(ctx) if self._grouped else self._column_entries(ctx)
        if fresh is not None:
            fresh.sort()
            self.ranked[:] = fresh

    def _column_entries(self, ctx: CycleContext) -> list[Ranked]:
        """Ungrouped: each moving plugin asked for all running jobs at once (in their last rank order), the kept
        parts read as columns, and keys and entries built by `zip` (no Python step per job beyond the plugins')."""
        order, moving, parts_of, running, ranked = self._order, self._moving, self._parts, ctx.running, self.ranked
        jids = [entry[2] for entry in ranked]
        jobs = [running[jid].job for jid in jids]
        asked = {i: order[i].running_order_keys(jobs, ctx) for i in moving}
        columns = [asked[i] if i in asked else [parts_of[jid][0][i] for jid in jids] for i in range(len(order))]
        keys = list(zip(*columns, strict=True))
        self.keys.update(zip(jids, keys, strict=True))
        fresh = list(zip(keys, [entry[1] for entry in ranked], jids, strict=True))
        self._entry.update(zip(jids, fresh, strict=True))
        return fresh

    def _grouped_entries(self, ctx: CycleContext) -> list[Ranked] | None:
        """Grouped: the moving parts asked once per group; the jobs of the groups whose parts changed (or that a job
        joined) get new keys. None: no key changed."""
        order, moving, parts_of, running = self._order, self._moving, self._parts, ctx.running
        by_group = {group: [order[i].order_key(running[next(iter(members))].job, ctx) for i in moving]
                    for group, members in self._members.items()}
        changed = [(jid, now) for group, now in by_group.items()
                   if group in self._joined or self._moved.get(group) != now for jid in self._members[group]]
        self._moved = by_group
        self._joined.clear()
        if not changed:
            return None
        entries = self._entry
        for jid, now in changed:
            parts = parts_of[jid][0]
            for i, part in zip(moving, now, strict=True):
                parts[i] = part
            key = self.keys[jid] = tuple(parts)
            entries[jid] = (key, entries[jid][1], jid)
        return [entries[entry[2]] for entry in self.ranked]

    def next_expiry_s(self) -> float | None:
        """When the next cached key of a running job expires (None: never)."""
        heap = self._expiry
        while heap and heap[0][1] not in self.keys:
            heapq.heappop(heap)  # stale: that job stopped
        return heap[0][0] if heap else None


class PendingView(Sequence[Job]):
    """The pending jobs in queue order as a read-only sequence, built only if a plugin reads it."""

    def __init__(self, queue: ShapeQueue, jobs: Mapping[str, Job]) -> None:
        self._queue, self._all = queue, jobs
        self._jobs: list[Job] | None = None

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[Job]:
        return (self._all[e[2]] for e in self._queue.ordered())

    def forget(self) -> None:
        """Read the queue afresh at the next index (the queue may have changed since)."""
        self._jobs = None

    def __getitem__(self, i):  # type: ignore[no-untyped-def, override]
        if self._jobs is None:
            self._jobs = list(self)
        return self._jobs[i]
