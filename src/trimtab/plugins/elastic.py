"""Resize plugins for elastic jobs (`Job.elastic`): elastic-shrink (a waiting job takes GPUs from elastic jobs
above their minimum when their loss is smaller than its gain) and elastic-grow (idle GPUs go to the running
elastic jobs with the highest marginal goodput per GPU). Both keep a resize hysteresis: a minimum interval between
resizes of one job, and a grow only when its expected gain repays the job's restart cost. See docs/elastic.md.

Goodput is compared across jobs in GPUs' worth: a job's throughput on an allocation (its ScalingModel; linear
when it has none) over its throughput on one task alone on one node, times the task's GPUs. A GPU added to a job
that scales perfectly is worth one GPU; to a job that gains nothing from it, zero. A job's speedup (Pollux's
normalisation, which weighs every job alike whatever its size) is its worth on an allocation over its worth on the
GPUs it asked for, packed: a shrink compares speedups, so a waiting job is not served by slowing many others."""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterator

import numpy as np

from trimtab.cluster import Allocation
from trimtab.model import Elastic, Job, Resources
from trimtab.policy import Cause, CycleContext, Decision, Plugin, Resize, RunningJob

_STEPS = (1, 2, 4, 8, 16, 32, 64, 128)  # tasks a grow may add at once (the best per GPU of these is chosen)


def worth_gpus(job: Job, tasks: int, nodes: int) -> float:
    """What `tasks` tasks of `job` spanning `nodes` nodes are worth in GPUs (see the module docstring)."""
    if job.scaling is None:
        return float(tasks * job.task.gpus)
    one = job.scaling.throughput(job.task.gpus, 1)
    return job.task.gpus * job.scaling.throughput(tasks * job.task.gpus, nodes) / one


def speedup(job: Job, tasks: int, nodes: int, per_node_gpus: int) -> float:
    """`job`'s goodput on `tasks` tasks over `nodes` nodes relative to its goodput on the tasks it asked for,
    packed on nodes of `per_node_gpus` GPUs (1.0: as fast as asked)."""
    asked = worth_gpus(job, job.tasks, math.ceil(job.gpus / max(per_node_gpus, 1)))
    return worth_gpus(job, tasks, nodes) / asked


def _counts(alloc: Allocation, nodes: int) -> np.ndarray:
    counts = np.zeros(nodes, dtype=np.int64)
    counts[alloc.nodes] = alloc.counts
    return counts


def _allocation(counts: np.ndarray, alloc: Allocation) -> Allocation:
    nodes = np.flatnonzero(counts)
    return Allocation(nodes, counts[nodes], alloc.task)


def _unplaced(alloc: Allocation) -> Allocation:
    """The same nodes and counts without the GPUs a tentative Txn chose (the cycle chooses them when it applies)."""
    return Allocation(alloc.nodes, alloc.counts, alloc.task)


def grown(alloc: Allocation, room: np.ndarray, extra: int) -> Allocation | None:
    """`alloc` with `extra` more tasks where `room` (tasks that fit per node) has room: on its own nodes first,
    then on the nodes with the most room. None when there is not that much room."""
    if int(room.sum()) < extra:
        return None
    counts = _counts(alloc, len(room))
    for node in np.lexsort((-room, counts == 0)):
        take = min(int(room[node]), extra)
        counts[node] += take
        extra -= take
        if not extra:
            return _allocation(counts, alloc)
    return None


def shrunk(alloc: Allocation, nodes: int) -> tuple[Allocation, int]:
    """`alloc` with one task less, taken from the node where it has the fewest (so it spans fewer nodes), and
    that node."""
    counts = _counts(alloc, nodes)
    held = np.flatnonzero(counts)
    node = int(held[np.argmin(counts[held])])
    counts[node] -= 1
    return _allocation(counts, alloc), node


class _Resizer(Plugin):
    """What both resize plugins share: which running elastic jobs may be resized now (`min_interval_s` since the
    job last started or was resized, not touched in this cycle), tracked without a pass over all running jobs."""

    def __init__(self, min_interval_s: float = 300.0) -> None:
        if min_interval_s < 0:
            raise ValueError("min_interval_s must be >= 0")
        self.min_interval_s = float(min_interval_s)
        self._elastic: set[str] | None = None  # running elastic jobs (None: not read from the books yet)
        self._next_ready_s: float | None = None  # when a job held back by the interval is next ready

    def _resizable(self, ctx: CycleContext, decision: Decision, wanted: Callable[[Elastic, int], bool]
                   ) -> list[RunningJob]:
        """The running elastic jobs whose (range, tasks) `wanted` accepts and that may be resized now; notes when
        the next of those held back by the interval may be (see `close`)."""
        elastic = self._elastic = {jid for jid in self._running_elastic(ctx) if jid in ctx.running}
        touched = {r.job_id for r in decision.resizes}
        ready_s = ctx.now_s - self.min_interval_s
        runs = [run for jid in sorted(elastic) if jid not in touched
                and (run := ctx.running[jid]).job.elastic is not None and wanted(run.job.elastic, run.alloc.tasks)]
        self._next_ready_s = min((run.start_s + self.min_interval_s for run in runs if run.start_s > ready_s),
                                 default=None)
        return [run for run in runs if run.start_s <= ready_s and run.start_s < ctx.now_s]

    def _running_elastic(self, ctx: CycleContext) -> set[str]:
        if self._elastic is None:
            self._elastic = {jid for jid, run in ctx.running.items() if run.job.elastic is not None}
        return self._elastic

    def close(self, ctx: CycleContext, decision: Decision) -> float | None:
        """Book the elastic jobs the cycle started; wake up when a job held back by the interval may be resized,
        if the last `resize` call wanted to."""
        self._running_elastic(ctx).update(job.id for job, _ in decision.starts if job.elastic is not None)
        wake_s, self._next_ready_s = self._next_ready_s, None
        return wake_s


class ElasticGrow(_Resizer):
    """resize: idle GPUs go, a few at a time, to the running elastic job below its maximum whose goodput gains the
    most per GPU added (at least `min_gain_per_gpu` GPUs' worth). The GPUs a shrink freed in the same cycle are
    left to the waiting jobs it freed them for; GPUs no waiting job could take are used, and given back by a
    shrink when a job ordered before the grown one needs them. Hysteresis: a job grows only when the time it saves
    repays `repay` times its restart cost (`Elastic.resize_s`), the time it has left taken to be the time it has
    run (no oracle: with heavy-tailed run times, a job that ran long is likely to run long).

    With `start_below`, it also sizes the start of an elastic job that cannot start at its request (start_tasks):
    the largest number of tasks that fits whose last task still gains `min_gain_per_gpu` (the job grown, as it
    were, from its minimum into the free GPUs), rather than a wait for the full request."""

    name = "elastic-grow"

    def __init__(self, min_interval_s: float = 300.0, min_gain_per_gpu: float = 0.1, repay: float = 2.0,
                 start_below: bool = False) -> None:
        super().__init__(min_interval_s)
        self.min_gain_per_gpu = float(min_gain_per_gpu)
        self.repay = float(repay)
        self.sizes_starts = bool(start_below)

    def start_tasks(self, job: Job, ctx: CycleContext, room: int) -> int | None:
        """The largest size in `job.elastic.min_tasks..room` whose last task gains at least `min_gain_per_gpu`
        GPUs' worth per GPU, each size taken packed on the fewest nodes (the minimum when none does)."""
        assert job.elastic is not None
        per_node = max(int(ctx.cluster.cap_gpus.max()), 1)

        def worth(tasks: int) -> float:
            return worth_gpus(job, tasks, math.ceil(tasks * job.task.gpus / per_node))

        tasks = room
        while tasks > job.elastic.min_tasks and worth(tasks) - worth(tasks - 1) < self.min_gain_per_gpu * job.task.gpus:
            tasks -= 1
        return tasks

    def resize(self, ctx: CycleContext, decision: Decision) -> list[Resize]:
        if (not self._running_elastic(ctx) or ctx.cluster.free_gpus_total <= 0
                or any(r.shrinks for r in decision.resizes)):
            return []
        runs = {run.job.id: run for run in self._resizable(ctx, decision,
                                                            lambda elastic, tasks: tasks < elastic.max_tasks)}
        current = {jid: run.alloc for jid, run in runs.items()}
        masks = {jid: ctx.node_mask(run.job) for jid, run in runs.items()} if ctx.node_mask is not None else {}
        with ctx.cluster.txn() as txn:  # discarded: the cycle applies the answers
            while runs and ctx.cluster.free_gpus_total > 0:
                rooms: dict[Resources, np.ndarray] = {}  # tasks of each shape that fit per node now
                options = [(self._best_grow(run, current[jid], ctx, _room(run.job, ctx, rooms, masks.get(jid))), jid)
                           for jid, run in runs.items()]
                (gain, alloc), jid = max(options, key=lambda option: option[0][0])
                if alloc is None or gain < self.min_gain_per_gpu:
                    break
                txn.release(current[jid])
                txn.allocate(alloc)
                current[jid] = alloc
        return [Resize(jid, runs[jid].alloc, _unplaced(alloc)) for jid, alloc in current.items()
                if alloc is not runs[jid].alloc]

    def _best_grow(self, run: RunningJob, alloc: Allocation, ctx: CycleContext,
                   room: np.ndarray) -> tuple[float, Allocation | None]:
        """(GPUs' worth gained per GPU added, the allocation) of the best grow of `run` from `alloc` (what this
        cycle gave it so far) into `room` (tasks that fit per node) whose saving repays the restart."""
        job = run.job
        assert job.elastic is not None
        held = worth_gpus(job, run.alloc.tasks, len(run.alloc.nodes))
        before = worth_gpus(job, alloc.tasks, len(alloc.nodes))
        ran_s = ctx.executed_s(job.id)
        best: tuple[float, Allocation | None] = (-math.inf, None)
        for extra in _STEPS:
            if alloc.tasks + extra > job.elastic.max_tasks:
                break
            bigger = grown(alloc, room, extra)
            if bigger is None:
                break
            after = worth_gpus(job, bigger.tasks, len(bigger.nodes))
            saved_s = ran_s * (1.0 - held / after) if after > held else 0.0
            per_gpu = (after - before) / (extra * job.task.gpus)
            if saved_s >= self.repay * job.elastic.resize_s and per_gpu > best[0]:
                best = (per_gpu, bigger)
        return best


class ElasticShrink(_Resizer):
    """resize: for the first waiting jobs that wait for room (`Cause.FIT`) and are ordered before them, running
    elastic jobs above their minimum give back tasks, one at a time from the job that loses the least goodput
    per GPU (in speedup), until the waiting job fits on the nodes its filters allow; done only when the speedup
    the shrunk jobs lose, summed, is below the one the waiting job gains by starting (1: its full request) times
    `max_loss`. One waiting job per cycle (the first of `max_waiting` that can be served): the world runs the next
    cycle at once, which starts it, and the shrink may then serve the next one. With `lower_order` False
    any elastic job may shrink for any waiting job, whatever their order."""

    name = "elastic-shrink"

    def __init__(self, min_interval_s: float = 300.0, lower_order: bool = True, max_waiting: int = 4,
                 max_loss: float = 1.0) -> None:
        super().__init__(min_interval_s)
        self.max_loss = float(max_loss)
        self.lower_order = bool(lower_order)
        self.max_waiting = int(max_waiting)

    def resize(self, ctx: CycleContext, decision: Decision) -> list[Resize]:
        if not self._running_elastic(ctx):
            return []
        runs = self._resizable(ctx, decision, lambda elastic, tasks: tasks > elastic.min_tasks)
        if not runs:
            return []
        for job in itertools.islice(self._waiting_for_room(ctx, decision), self.max_waiting):
            answer = self._make_room(job, runs, ctx)
            if answer:
                return answer
        return []

    @staticmethod
    def _waiting_for_room(ctx: CycleContext, decision: Decision) -> Iterator[Job]:
        """Waiting jobs in queue order, but those the cycle started and those it holds for another cause than
        room (a job the cycle did not reach, because nothing was free, waits for room)."""
        started = {job.id for job, _ in decision.starts}
        for job in ctx.pending:
            status = decision.waiting.get(job.id)
            if job.id not in started and (status is None or status.cause is Cause.FIT):
                yield job

    def _make_room(self, job: Job, runs: list[RunningJob], ctx: CycleContext) -> list[Resize]:
        """The shrinks that let `job` fit, planned on idle-GPU counts (cheapest task first, from a heap), then
        checked once in a discarded Txn; [] when none qualifies."""
        if self.lower_order:
            key, keys = ctx.order_key(job), ctx.running_keys
            runs = [run for run in runs if (keys.get(run.job.id) or ctx.order_key(run.job)) > key]
        if not runs or job.task.gpus < 1:
            return []
        mask = ctx.node_mask(job) if ctx.node_mask is not None else np.ones(len(ctx.cluster), dtype=bool)
        free = np.where(mask, ctx.cluster.free_gpus, 0)
        per_node, nodes = int(ctx.cluster.cap_gpus.max()), len(ctx.cluster)
        jobs = {run.job.id: run.job for run in runs}
        current = {run.job.id: run.alloc for run in runs}
        heap = [step for run in runs if (step := _next_shrink(run.job, run.alloc, nodes, per_node)) is not None]
        heapq.heapify(heap)
        lost = 0.0
        while int(np.minimum(free // job.task.gpus, job.tasks).sum()) < job.tasks:
            if not heap:
                return []
            _, jid, loss, node = heapq.heappop(heap)
            lost += loss
            if lost >= self.max_loss:
                return []
            current[jid], _ = shrunk(current[jid], nodes)
            free[node] += jobs[jid].task.gpus if mask[node] else 0
            step = _next_shrink(jobs[jid], current[jid], nodes, per_node)
            if step is not None:
                heapq.heappush(heap, step)
        answer = [Resize(jid, ctx.running[jid].alloc, alloc) for jid, alloc in current.items()
                  if alloc is not ctx.running[jid].alloc]
        with ctx.cluster.txn() as txn:  # discarded: CPU and memory counted too before the cycle applies it
            for resize in answer:
                txn.release(resize.before)
                txn.allocate(resize.alloc)
            fits = _fits(job, ctx, mask)
        return [Resize(r.job_id, r.before, _unplaced(r.alloc)) for r in answer] if fits else []


def _next_shrink(job: Job, alloc: Allocation, nodes: int, per_node: int) -> tuple[float, str, float, int] | None:
    """(speedup lost per GPU, job id, speedup lost, node freed) of giving back one more task of `job` (now on
    `alloc`), or None at its minimum: a heap entry of the shrink plan."""
    assert job.elastic is not None
    if alloc.tasks <= job.elastic.min_tasks:
        return None
    smaller, node = shrunk(alloc, nodes)
    loss = speedup(job, alloc.tasks, len(alloc.nodes), per_node) - speedup(job, smaller.tasks, len(smaller.nodes),
                                                                           per_node)
    return loss / job.task.gpus, job.id, loss, node


def _room(job: Job, ctx: CycleContext, rooms: dict[Resources, np.ndarray], mask: np.ndarray | None) -> np.ndarray:
    """Tasks of `job` that fit per node now on the nodes of `mask` (None: all), from the per-shape `rooms`."""
    if job.task not in rooms:
        rooms[job.task] = ctx.cluster.fit_counts(job.task)
    return rooms[job.task] if mask is None else np.where(mask, rooms[job.task], 0)


def _fits(job: Job, ctx: CycleContext, mask: np.ndarray) -> bool:
    fit = ctx.cluster.fit_counts(job.task)
    fit[~mask] = 0
    return int(np.minimum(fit, job.tasks).sum()) >= job.tasks


PLUGINS = {"elastic-grow": ElasticGrow, "elastic-shrink": ElasticShrink}
