"""Scheduler: owns the queue, the ClusterState and the Framework; turns events into Decisions.

No I/O, no wall clock, no global randomness: the world passes the time in and a seed at construction."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

import numpy as np

from trimtab.cluster import Allocation, ClusterState
from trimtab.cycle import Framework
from trimtab.model import Job, JobState, Node, Resources
from trimtab.policy import CycleContext, Decision, Observations, Plugin, RunningJob
from trimtab.profile import Profile, Registry
from trimtab.queue import CycleMoves, Entry, PendingView, ShapeId, ShapeQueue, WaitingKeyExpiry, Walk, shape_of

_ONE_GPU = Resources(gpus=1)


class Scheduler:
    """The one writer of scheduling state. The world calls `submit`, `stopped`, `cancel`, `node_down` / `node_up`
    as things happen and `cycle(now_s)` when it wants decisions, then applies the Decision it gets back (the
    Scheduler has already booked its starts and preemptions).

    `cycle` is cheap when nothing changed that could start a job: it returns an empty Decision without running the
    plugins (a `dirty` flag is raised by arrivals, stops, node changes and wake-up times)."""

    def __init__(self, cluster: ClusterState, profile: Profile | str, registry: Registry | None = None,
                 seed: int = 0) -> None:
        from trimtab.plugins import default_registry

        self.cluster = cluster
        self.profile = profile if isinstance(profile, Profile) else Profile.load(profile)
        self.framework = Framework(self.profile, registry or default_registry())
        self.rng = np.random.default_rng(seed)
        self.jobs: dict[str, Job] = {}
        self.state: dict[str, JobState] = {}
        self.running: dict[str, RunningJob] = {}
        self.prior_attained_gpu_s: dict[str, float] = {}
        self.prior_executed_s: dict[str, float] = {}
        by_tenant = bool(self.framework.admit) or any(p.shape_by_tenant for p in self.framework.plugins)
        by_priority = bool(self.framework.preempt)
        if self.framework.group_order:  # a shape lies within one group of the dynamic order plugins
            groups = self.framework.key_groups
            self._queue = ShapeQueue(lambda job: (*shape_of(job, by_tenant, by_priority), groups(job)))
        else:
            self._queue = ShapeQueue(lambda job: shape_of(job, by_tenant, by_priority))
        self._held: set[str] = set()  # pending jobs out of the queue until `resume` (retries backing off)
        self.failed_gpus = np.zeros(len(cluster), dtype=np.int64)  # GPUs out of service per node
        self._failed_gpu_holds: dict[int, list[Allocation]] = {}
        self._down = np.zeros(len(cluster), dtype=bool)  # nodes down (failed, cut off, left)
        self.drained = np.zeros(len(cluster), dtype=bool)  # nodes drained by a plugin (see `_update_drains`)
        self._drainers = [p for p in self.framework.plugins if type(p).drain is not Plugin.drain]
        self.observations = Observations()  # what the world observed (see `observe`)
        self._seq = itertools.count()
        self._dirty = True
        self._wake_s: float | None = None
        self.cycles_run = 0  # cycles that ran the plugins (the others found nothing changed)
        # shapes whose head could not start, carried to the next cycle until something is released: a cycle then
        # skips them without trying (issue: a long queue must not be rescanned on every arrival)
        self._blocked: set[ShapeId] = set()
        self.history: list[tuple[Job, float]] = []  # completed jobs and their run time, in completion order
        self._now_s = 0.0
        self._waiting_keys = WaitingKeyExpiry(self.framework.pending_key_expires_s)
        self._between: tuple[CycleContext, PendingView] | None = None  # see `context`

    # -------------------------------------------------------------------------------------------- events

    def submit(self, job: Job, now_s: float) -> None:
        """A new job arrives; it waits in the queue until a cycle starts it."""
        self._now_s = now_s
        if job.id in self.jobs:
            raise ValueError(f"job {job.id!r} was already submitted")
        self.jobs[job.id] = job
        self._enqueue(job, now_s)

    def adopt(self, job: Job, alloc: Allocation, start_s: float, executed_s: float = 0.0,
              attained_gpu_s: float = 0.0) -> None:
        """Take in a job that is already running on `alloc` since `start_s` (a live world re-adopting its tasks
        after a restart, or pods it finds bound): its resources are booked and it is treated like a job a cycle
        started. `executed_s` and `attained_gpu_s` are what it had to its credit before this run."""
        if job.id in self.jobs and self.state.get(job.id) is not JobState.PENDING:
            raise ValueError(f"job {job.id!r} is already known as {self.state[job.id]}")
        self.cluster.allocate(alloc)  # first: a job that does not fit is not taken in
        if job.id in self._queue:
            self._dequeue(job.id)
        self._held.discard(job.id)
        self.jobs[job.id] = job
        self.state[job.id] = JobState.RUNNING
        self.running[job.id] = RunningJob(job, alloc, start_s, executed_s, attained_gpu_s)
        self._dirty = True

    def stopped(self, job_id: str, now_s: float, state: JobState, executed_s: float | None = None,
                enqueue: bool = True) -> None:
        """A running job's attempt ended. `state` is COMPLETED, FAILED or CANCELLED for a terminal end, or PENDING
        to queue it again (a retry after a failure); `executed_s` is the run time it keeps (after checkpoint loss).
        With `enqueue` False a PENDING job is held out of the queue (a retry backing off) until `resume`."""
        run = self.running.pop(job_id, None)
        if run is None:
            raise ValueError(f"job {job_id!r} is not running")
        self.cluster.release(run.alloc)
        self.framework.forget(job_id)
        self._book_stop(run, now_s, executed_s)
        self.changed()
        if state is JobState.PENDING and not enqueue:
            self.state[job_id] = JobState.PENDING
            self._held.add(job_id)
        elif state is JobState.PENDING:
            self._enqueue(run.job, now_s)
        elif state.terminal:
            self.state[job_id] = state
            if state is JobState.COMPLETED:
                self.history.append((run.job, self.prior_executed_s[job_id]))
        else:
            raise ValueError(f"a stopped job goes to pending or a terminal state, not {state}")

    def resume(self, job_id: str, now_s: float) -> None:
        """A held job (see `stopped`) joins the queue again."""
        self._held.remove(job_id)
        self._enqueue(self.jobs[job_id], now_s)

    def credit(self, job_id: str, executed_s: float, attained_gpu_s: float | None = None) -> None:
        """Set the run time a preempted (now pending) job keeps, once the world knows its checkpoint loss, or that
        a resized (running) job carries into its new run; with `attained_gpu_s`, a pending job's attained service
        too (a live world's new leader taking over the credit its predecessor kept)."""
        if job_id in self.running:
            self.running[job_id].prior_executed_s = executed_s
            return
        if self.state.get(job_id) is not JobState.PENDING:
            raise ValueError(f"job {job_id!r} is not pending")
        self.prior_executed_s[job_id] = executed_s
        if attained_gpu_s is not None:
            self.prior_attained_gpu_s[job_id] = attained_gpu_s
        if self.framework.static_order:  # its key may depend on the progress it kept (srtf): sort it again
            self._dequeue(job_id)
            self._enqueue(self.jobs[job_id], self._now_s)
        elif self.framework.group_order:  # the same, keeping its place among equal keys
            seq, job = self._queue.seq_of(job_id), self.jobs[job_id]
            self._queue.remove(job_id)
            self._queue.add(job, self.framework.static_key(job, self.context(self._now_s)), seq)

    def cancel(self, job_id: str, now_s: float) -> bool:
        """Cancel a pending job (True), or say it is not pending (False: the world stops a running one)."""
        if self.state.get(job_id) is not JobState.PENDING:
            return False
        if job_id in self._held:
            self._held.remove(job_id)
        else:
            self._dequeue(job_id)
        self.state[job_id] = JobState.CANCELLED
        return True

    def hold(self, job_id: str) -> None:
        """A queued job leaves the queue, keeping its credit, until `resume` (a live world's job whose pods are
        gone for a while: a controller recreates them)."""
        if self.state.get(job_id) is not JobState.PENDING or job_id in self._held:
            raise ValueError(f"job {job_id!r} is not queued")
        self._dequeue(job_id)
        self._held.add(job_id)

    def replace(self, job: Job, now_s: float) -> None:
        """A pending job (queued or held) asks anew: it is queued as `job` (same id), keeping its credit."""
        if self.state.get(job.id) is not JobState.PENDING:
            raise ValueError(f"job {job.id!r} is not pending")
        self.forget(job.id, keep_credit=True)
        self.submit(job, now_s)

    def forget(self, job_id: str, keep_credit: bool = False) -> None:
        """Drop a pending or ended job from the books (a live world's job that is gone; its id may come again as a
        new job). Completed jobs stay in `history`."""
        state = self.state.get(job_id)
        if state is JobState.PENDING:
            if job_id in self._held:
                self._held.remove(job_id)
            else:
                self._dequeue(job_id)
        elif state is not None and not state.terminal:
            raise ValueError(f"job {job_id!r} is {state}")
        self.jobs.pop(job_id, None)
        self.state.pop(job_id, None)
        if not keep_credit:
            self.prior_attained_gpu_s.pop(job_id, None)
            self.prior_executed_s.pop(job_id, None)

    def node_down(self, name: str) -> list[str]:
        """A node fails: it takes no new work. Returns the running jobs that had tasks on it (the world stops
        them and reports each with `stopped`)."""
        node = self.cluster.index[name]
        self._down[node] = True
        self.cluster.set_health(node, False)
        # a list's `in` on Python ints: a numpy `in` per running job costs microseconds each
        return [jid for jid, run in self.running.items() if node in run.alloc.nodes.tolist()]

    def node_up(self, name: str) -> None:
        node = self.cluster.index[name]
        self._down[node] = False
        self.cluster.set_health(node, not self.drained[node])
        self.changed()

    def _update_drains(self, now_s: float) -> None:
        """Ask the plugins that drain nodes (`Plugin.drain(ctx) -> bool[n]`, True: drain) which nodes take no
        new work now. A drained node keeps its running jobs; it is out of reach of new ones (and of the free-GPU
        counts that preemption relies on) until no plugin drains it."""
        ctx = self.context(now_s)
        wanted = np.zeros(len(self.cluster), dtype=bool)
        for plugin in self._drainers:
            mask = plugin.drain(ctx)
            if mask is not None:
                wanted |= mask
        for node in np.flatnonzero(wanted != self.drained):
            self.drained[node] = wanted[node]
            self.cluster.set_health(int(node), not (wanted[node] or self._down[node]))
            self.changed()

    def observe(self, observations: Observations) -> None:
        """The world shares the record of what it observes (failures, speeds, cached data); plugins read it as
        `ctx.observations` from the next cycle on. The world keeps writing that record as things happen; observing
        alone makes no cycle run (the events that go with an observation, such as `node_down`, do)."""
        self.observations = observations

    def gpu_down(self, name: str) -> None:
        """One GPU of a node fails: the node keeps running with one GPU less. The GPU must be free (the world
        first stops the job that was using it)."""
        node = self.cluster.index[name]
        if self.cluster.free_gpus[node] < 1:
            raise ValueError(f"node {name} has no free GPU to take out of service")
        hold = Allocation(np.array([node]), np.array([1]), _ONE_GPU)
        self.cluster.allocate(hold)  # the cluster records which GPU; the same Allocation gives it back
        self._failed_gpu_holds.setdefault(node, []).append(hold)
        self.failed_gpus[node] += 1

    def gpu_up(self, name: str) -> None:
        """A failed GPU of a node is repaired."""
        node = self.cluster.index[name]
        if self.failed_gpus[node] < 1:
            raise ValueError(f"node {name} has no failed GPU")
        self.cluster.release(self._failed_gpu_holds[node].pop(0))
        self.failed_gpus[node] -= 1
        self.changed()

    def with_nodes(self, nodes: Sequence[Node], registry: Registry | None = None) -> Scheduler:
        """A scheduler over this one's nodes followed by `nodes` (nodes that joined) that carries on from this one:
        the same jobs running on the same allocations (node indices stay valid), the same queue in the same order
        with the same credit, history and random stream, the same nodes down and GPUs failed. Its plugins start
        afresh (their caches are of the old cluster) and read the carried books at the next cycle. Use the
        returned scheduler from then on; this one must not be used again."""
        old = self.cluster
        grown = Scheduler(ClusterState([*old.nodes, *nodes]), self.profile, registry)
        grown.rng, grown.history, grown._now_s = self.rng, self.history, self._now_s
        grown.jobs, grown.state = self.jobs, self.state
        grown.prior_attained_gpu_s, grown.prior_executed_s = self.prior_attained_gpu_s, self.prior_executed_s
        cluster, n = grown.cluster, len(old)
        for job_id, run in self.running.items():
            cluster.allocate(run.alloc)
            grown.running[job_id] = run
        for node, holds in self._failed_gpu_holds.items():
            for hold in holds:
                cluster.allocate(hold)
            grown._failed_gpu_holds[node] = list(holds)
        grown.failed_gpus[:n] = self.failed_gpus
        grown._down[:n] = self._down
        for node in np.flatnonzero(self._down):
            cluster.set_health(int(node), False)
        for key, seq, job_id in self._queue.ordered():  # the same key and seq: the same place in the queue
            grown._queue.add(self.jobs[job_id], key, seq)
        grown._held = self._held
        grown._waiting_keys = self._waiting_keys.moved_to(grown.framework.pending_key_expires_s)
        grown._seq = self._seq
        grown.cycles_run = self.cycles_run
        return grown

    # -------------------------------------------------------------------------------------------- cycle

    def cycle(self, now_s: float) -> Decision:
        """Run one scheduling cycle at `now_s` and book its starts and preemptions."""
        if self._drainers:
            self._update_drains(now_s)
        if self._waiting_keys.due(now_s):
            self._rekey_waiting(now_s)
        if self._wake_s is not None and now_s >= self._wake_s:
            self.changed()  # keys or time-bound answers may differ now
        if not self._dirty:
            return Decision(wake_s=self._wake_s)
        self.cycles_run += 1
        self._now_s = now_s
        ctx = self._cycle_context(now_s)
        blocked = self._blocked
        carried = set(blocked)  # blocked by earlier cycles: a preemption in this one releases GPUs for them
        unit_of = None
        moves: CycleMoves | None = None
        if self.framework.static_order:
            walk = self._queue.walk(blocked)
            queue: Iterator[tuple[tuple[Any, ...], Job, ShapeId]] = (
                (entry[0], self.jobs[entry[2]], shape) for entry, shape in walk)
            if self.profile.consolidate_window_s > 0:
                unit_of = self._unit_finder(walk)
        else:  # keys change between cycles: computed when the framework first asks for a job, after the plugins
            blocked = set()  # opened this cycle (drf's shares); blocked shapes are not carried over
            moves = CycleMoves()  # and within it, as jobs start and stop
            queue = self._grouped_queue(ctx, moves) if self.framework.group_order else self._sorted_queue(ctx, moves)

        def on_start(job: Job, alloc: Allocation) -> None:
            self._dequeue(job.id)
            self.state[job.id] = JobState.RUNNING
            self.running[job.id] = RunningJob(job, alloc, now_s, self.prior_executed_s.pop(job.id, 0.0),
                                              self.prior_attained_gpu_s.pop(job.id, 0.0))
            if moves is not None:
                moves.note(self.framework.key_groups(job), stopped=False)

        def on_preempt(job_id: str) -> None:
            blocked.difference_update(carried)
            carried.clear()
            if moves is not None:
                moves.note(self.framework.key_groups(self.running[job_id].job), stopped=True)
            run = self.running.pop(job_id)  # its allocation was released in the framework's Txn
            self._book_stop(run, now_s, None)
            self._enqueue(run.job, now_s)

        decision = self.framework.cycle(ctx, queue, blocked, on_start, on_preempt, unit_of)
        rekey_s = self._waiting_keys.next_s(self._queue)
        if rekey_s is not None and (decision.wake_s is None or rekey_s < decision.wake_s):
            decision.wake_s = rekey_s
        self._wake_s = decision.wake_s
        self._dirty = False
        # A blocked shape stays blocked while nothing is released: fewer free GPUs cannot help it. Not so after a
        # reservation (it is redrawn every cycle) or, under a preemptive profile, after starts (new victims).
        if decision.reservations or (self.framework.preempt and decision.starts):
            self._blocked = set()
        if decision.resizes:
            self._book_resizes(decision, now_s)
        return decision

    def _book_resizes(self, decision: Decision, now_s: float) -> None:
        """Running jobs the cycle resized: a new run from now on the new allocation, carrying what the old one
        attained (the world corrects the progress it kept with `credit`). A shrink frees GPUs for waiting jobs."""
        for resize in decision.resizes:
            run = self.running[resize.job_id]
            elapsed = now_s - run.start_s
            self.running[resize.job_id] = RunningJob(run.job, resize.alloc, now_s, run.prior_executed_s + elapsed,
                                                     run.prior_attained_gpu_s + run.alloc.gpus * elapsed)
        if any(resize.shrinks for resize in decision.resizes):
            self.changed()

    def _grouped_queue(self, ctx: CycleContext, moves: CycleMoves) -> Iterator[tuple[tuple[Any, ...], Job, ShapeId]]:
        """A grouped dynamic order (Framework.group_order): one key per shape, asked again once a job of its group
        started or stopped in this cycle; every waiting job in key order. The walk skips no shape: a preemption
        within the cycle may let a later job of a blocked shape start."""
        jobs, lift, key_groups = self.jobs, self.framework.group_lift, self.framework.key_groups
        group_of: dict[ShapeId, Hashable] = {}

        def lifts(shape: ShapeId, entry: Entry) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
            group_of[shape] = key_groups(jobs[entry[2]])
            return lift(jobs[entry[2]], ctx)

        walk = self._queue.walk(set(), lifts, lambda shape: moves.by_group[group_of[shape]])
        lifted = walk.lift
        assert lifted is not None
        while True:
            if moves.lowered:
                moves.lowered = False
                walk.rekey()
            entry, shape = next(walk, (None, -1))
            if entry is None:
                return
            yield lifted[shape](entry[0])[:-1], jobs[entry[2]], shape

    def _sorted_queue(self, ctx: CycleContext, moves: CycleMoves) -> Iterator[tuple[tuple[Any, ...], Job, ShapeId]]:
        """Any other dynamic order: every waiting job's key, in key order, each asked again once any job started
        or stopped in this cycle (the lowest key popped is asked again if it is stale: keys only rise as jobs
        start; after a stop, all are asked again)."""
        jobs, key = self.jobs, self.framework.order_key
        # (key, submit time, place in the queue, when the key was asked, job id, shape)
        heap = [(key(jobs[jid], ctx), jobs[jid].submit_s, i, 0, jid, shape)
                for i, (jid, shape) in enumerate(self._queue.members())]
        heapq.heapify(heap)
        while heap:
            if moves.lowered:
                moves.lowered = False
                heap = [(key(jobs[jid], ctx), submit_s, i, moves.total, jid, shape)
                        for _, submit_s, i, _, jid, shape in heap]
                heapq.heapify(heap)
            item = heapq.heappop(heap)
            if item[3] != moves.total:
                heapq.heappush(heap, (key(jobs[item[4]], ctx), *item[1:3], moves.total, *item[4:]))
                continue
            yield item[0], jobs[item[4]], item[5]

    def _unit_finder(self, walk: Walk) -> Callable[[Job, ShapeId], list[Job]]:
        """Task consolidation (Profile.consolidate_window_s): the jobs that may join `head`, just yielded by
        `walk`, in one unit: the single-task jobs of its tenant and shape that follow it in queue order, submitted
        within the window after it."""
        window_s, limit = self.profile.consolidate_window_s, self.profile.consolidate_max_jobs - 1
        jobs = self.jobs

        def unit_of(head: Job, shape: ShapeId) -> list[Job]:
            if head.pod_affinity is not None:  # its placement depends on where each of the others lands
                return []

            def joins(entry: Entry) -> bool:
                job = jobs[entry[2]]
                return job.tasks == 1 and job.tenant == head.tenant and abs(job.submit_s - head.submit_s) <= window_s

            return [jobs[entry[2]] for entry in walk.run(limit, joins)]

        return unit_of

    def changed(self) -> None:
        """Something outside the scheduler's books changed (resources released, a quota raised, a node back):
        the next cycle looks at every shape again."""
        self._blocked = set()
        self._dirty = True

    def context(self, now_s: float) -> CycleContext:
        """The context of plugin calls between cycles (order keys at arrival, drains): without the cycle's parts
        (order key and node mask of the profile, usage, running keys). One per time and observation record, kept
        (every arrival and requeue of a time asks for it): what it points to is the scheduler's live books, and
        its pending view is read afresh after each call."""
        if self._between is not None:
            ctx, view = self._between
            if ctx.now_s == now_s and ctx.observations is self.observations:
                view.forget()
                return ctx
        view = PendingView(self._queue, self.jobs)
        ctx = CycleContext(now_s, self.cluster, view, self.running, self.prior_attained_gpu_s, self.prior_executed_s,
                           self.rng, history=self.history, observations=self.observations)
        self._between = (ctx, view)
        return ctx

    def _cycle_context(self, now_s: float) -> CycleContext:
        """The complete context of a cycle, over the Framework's books (which the cycle keeps up to date)."""
        fw = self.framework

        def order_key(job: Job) -> tuple[Any, ...]:
            return fw.order_key(job, ctx)

        def node_mask(job: Job) -> np.ndarray:
            return fw.node_mask(job, ctx)

        ctx = CycleContext(now_s, self.cluster, PendingView(self._queue, self.jobs), self.running,
                           self.prior_attained_gpu_s, self.prior_executed_s, self.rng,
                           running_keys=fw.running_keys.keys, running_ranked=fw.running_keys.ranked,
                           order_key=order_key, usage=fw.usage, node_mask=node_mask, history=self.history,
                           observations=self.observations)
        return ctx

    def _rekey_waiting(self, now_s: float) -> None:
        """Waiting jobs whose order key changes now (a plugin's `pending_key_expires_s`) are sorted again."""
        order_key = self.framework.order_key if self.framework.static_order else None
        shapes = self._waiting_keys.rekey(self._queue, self.jobs, self.context(now_s), order_key)
        if shapes:
            self._blocked.difference_update(shapes)
            self._dirty = True

    def shape(self, job: Job) -> ShapeId:
        """The request shape the queue files `job` under: a cycle gives every job of one shape the same answer."""
        return self._queue.shape(job)

    def pending(self) -> list[Job]:
        """Pending jobs in queue order (for a static order) or arrival order."""
        return list(PendingView(self._queue, self.jobs))

    # -------------------------------------------------------------------------------------------- books

    def _enqueue(self, job: Job, now_s: float) -> None:
        self.state[job.id] = JobState.PENDING
        ctx = self.context(now_s)
        if self.framework.static_order:
            key = self.framework.order_key(job, ctx)
        else:
            key = self.framework.static_key(job, ctx) if self.framework.group_order else ()
        seq = next(self._seq)
        shape = self._queue.add(job, key, seq)
        self._waiting_keys.note(job, seq, ctx)
        self._blocked.discard(shape)  # it may go before the head that was blocked (or preempt for it)
        self._dirty = True

    def _dequeue(self, job_id: str) -> None:
        self._queue.remove(job_id)

    def _book_stop(self, run: RunningJob, now_s: float, executed_s: float | None) -> None:
        elapsed = now_s - run.start_s
        jid = run.job.id
        self.prior_attained_gpu_s[jid] = run.prior_attained_gpu_s + run.alloc.gpus * elapsed
        self.prior_executed_s[jid] = run.prior_executed_s + elapsed if executed_s is None else executed_s
