"""The contracts of a scheduling cycle: Status (with its cause), the read-only CycleContext, the Plugin extension
points, and what a cycle returns (Decision, Reservation). Plugins implement them; the cycle calls them."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from trimtab.cluster import Allocation, ClusterState
from trimtab.model import Job
from trimtab.usage import UsageBook

# --------------------------------------------------------------------------------------------- status and records


class Code(StrEnum):
    SUCCESS = "success"
    WAIT = "wait"  # not now: keep the job queued and ask again next cycle
    UNSCHEDULABLE = "unschedulable"  # cannot run on this cluster as it is


@dataclass(frozen=True, slots=True)
class Status:
    """An explicit answer: success is `Status.ok()`, never an absent value."""

    code: Code
    reason: str = ""
    plugin: str = ""

    @staticmethod
    def ok() -> Status:
        return _OK

    @property
    def success(self) -> bool:
        return self.code is Code.SUCCESS


_OK = Status(Code.SUCCESS)
_DOES_NOT_FIT = Status(Code.WAIT, "does not fit now")
_ONE_TASK = np.ones(1, dtype=np.int64)


@dataclass(slots=True)
class RunningJob:
    """A job that holds an allocation: since when, and what it had attained before this run."""

    job: Job
    alloc: Allocation
    start_s: float
    prior_executed_s: float  # run time credited by earlier runs (what a restart resumes from)
    prior_attained_gpu_s: float  # GPU-seconds of service received by earlier runs (LAS counts all of it)


@dataclass(frozen=True, slots=True)
class Reservation:
    """Resources held for a blocked job: `gpus` on `nodes` from `start_s`. `nodes` None blocks the whole cluster
    (strict head-of-line: nothing ordered after the job may start)."""

    job_id: str
    nodes: np.ndarray | None
    gpus: np.ndarray | None
    start_s: float


@dataclass(slots=True)
class Decision:
    """What a cycle decided: the world starts `starts`, stops `preemptions` (before the starts), keeps the
    reservations, and calls `cycle` again no later than `wake_s` (None: only on the next event). `prefetches`:
    (job, nodes) pairs whose dataset the world should start loading onto those nodes (appended by plugins in
    `close`; a world without a data model ignores them)."""

    starts: list[tuple[Job, Allocation]] = field(default_factory=list)
    preemptions: list[str] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
    waiting: dict[str, Status] = field(default_factory=dict)
    wake_s: float | None = None
    prefetches: list[tuple[Job, np.ndarray]] = field(default_factory=list)


@dataclass(eq=False)
class Observations:
    """What the world observed about its nodes, for plugins that adapt to it (`ctx.observations`). The world is
    the only writer (`node_failed`, `job_ran`, and the two sources it sets once); plugins only read. A world that
    observes nothing leaves it empty, and the plugins that read it neutral.

    failures: an exponentially decayed count of each node's failures (time constant `failure_tau_s`), so a
    failure a `failure_tau_s` ago counts 1/e; `failures_seen` counts them all (a cache key). speeds: per job type,
    the last observed speed (reference seconds per wall second) on each node, NaN where never seen. cached:
    dataset -> bool mask over nodes of the caches holding it (None: no data model). gpu_speeds: relative speed of
    a job on each GPU model of the cluster, in `ClusterState.gpu_models` order (None: no throughput table)."""

    failure_tau_s: float = 7 * 86400.0
    cached: Callable[[str], np.ndarray] | None = None
    gpu_speeds: Callable[[Job], np.ndarray] | None = None
    speeds: dict[str, np.ndarray] = field(default_factory=dict)
    failures_seen: int = 0
    _decayed: np.ndarray = field(default_factory=lambda: np.zeros(0))
    _since_s: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def _size(self, nodes: int) -> None:
        if self._decayed.size != nodes:
            self._decayed = np.zeros(nodes)
            self._since_s = np.zeros(nodes)

    def node_failed(self, node: int, now_s: float, nodes: int) -> None:
        """Node `node` (of `nodes`) failed at `now_s` (the node itself or one of its GPUs)."""
        self._size(nodes)
        self._decayed[node] = self._decayed[node] * math.exp(-(now_s - self._since_s[node]) / self.failure_tau_s) + 1
        self._since_s[node] = now_s
        self.failures_seen += 1

    def recent_failures(self, now_s: float, nodes: int) -> np.ndarray:
        """Decayed failure count of every node at `now_s`."""
        self._size(nodes)
        return self._decayed * np.exp(-(now_s - self._since_s) / self.failure_tau_s)

    def job_ran(self, job_type: str, on_nodes: np.ndarray, speed: float, nodes: int) -> None:
        """A job of `job_type` ran at `speed` on `on_nodes` (of `nodes`)."""
        row = self.speeds.get(job_type)
        if row is None:
            row = self.speeds[job_type] = np.full(nodes, np.nan)
        row[on_nodes] = speed



@dataclass(slots=True)
class CycleContext:
    """The read-only snapshot every plugin sees. Only the Scheduler mutates what it points to."""

    now_s: float
    cluster: ClusterState
    pending: Sequence[Job]
    running: Mapping[str, RunningJob]
    prior_attained_gpu_s: Mapping[str, float]  # service from finished runs of pending jobs
    prior_executed_s: Mapping[str, float]  # credited run time of pending jobs (after checkpoint loss)
    rng: np.random.Generator
    running_keys: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # order keys of running jobs
    # the same, ranked: (key, start_s, job id) ascending, so the worst running jobs are at the end
    running_ranked: Sequence[tuple[tuple[Any, ...], float, str]] = ()
    order_key: Callable[[Job], tuple[Any, ...]] = lambda job: ()  # the profile's order key of any job
    usage: UsageBook = field(default_factory=UsageBook)  # held by running jobs per tenant and queue
    node_mask: Callable[[Job], np.ndarray] | None = None  # nodes every filter of the profile allows for a job
    history: Sequence[tuple[Job, float]] = ()  # completed jobs and their run time, in completion order
    # running jobs a preemption is trying to stop: placement filters and scores must treat them as gone
    releasing: frozenset[str] = frozenset()
    observations: Observations = field(default_factory=Observations)  # what the world observed (Scheduler.observe)

    def attained_gpu_s(self, job_id: str) -> float:
        """GPU-seconds of service a job has received so far, including the current run."""
        run = self.running.get(job_id)
        if run is None:
            return self.prior_attained_gpu_s.get(job_id, 0.0)
        return run.prior_attained_gpu_s + run.alloc.gpus * (self.now_s - run.start_s)

    def executed_s(self, job_id: str) -> float:
        """Run time a job has to its credit (progress it keeps), including the current run."""
        run = self.running.get(job_id)
        if run is None:
            return self.prior_executed_s.get(job_id, 0.0)
        return run.prior_executed_s + (self.now_s - run.start_s)

    def remaining_s(self, job: Job) -> float:
        """Reference run time left (inf when the duration is unknown)."""
        if job.duration_s is None:
            return math.inf
        return max(job.duration_s - self.executed_s(job.id), 0.0)


# ------------------------------------------------------------------------------------------------- plugins


class Plugin:
    """Base class of policies. A plugin implements any subset of the extension points below; the Profile says at
    which points it is enabled. Plugins read the CycleContext and return answers; they never mutate it.

    Extension points, in cycle order, and how the answers of several plugins combine:

    open(ctx)                    every plugin, in profile order, once per cycle: compute per-cycle state.
    admit(job, ctx) -> Status    every pending job; the first non-success holds the job queued this cycle. The
                                 answer may depend only on the job's shape (request, constraints, tenant, queue,
                                 priority) and the cycle's state: a "no" holds the later jobs of that shape too.
    order_key(job, ctx) -> key   a sortable key per job; keys of the `order` plugins form a tuple compared
                                 lexicographically, so the first plugin that tells two jobs apart wins; ties end
                                 in submission order. Lower keys go first.
    filter(job, ctx) -> bool[n]  a mask over nodes; a node must pass every filter.
    score(job, ctx) -> float[n]  0..100 per node; the weighted sum ranks feasible nodes for `place`.
    place(job, ctx, fit, score)  the one `place` plugin chooses nodes for all `job.tasks` tasks given how many fit
        -> Allocation | None     on each node (`fit`, 0 where a filter failed); None: the job waits.
    preempt(job, ctx)            for a job that does not fit: the running jobs to stop so it can; the first plugin
        -> list[str] | None      with an answer wins. The framework commits the victims only if the job then fits.
                                 Victims are ordered after the job, and an answer is monotone: if no victims are
                                 found for a job, none are for a later job asking for as many GPUs or more (the
                                 framework then stops asking, so a long queue costs one failed attempt per cycle).
                                 Never asked for a job whose `preemption_policy` is "Never".
    backfill(job, ctx)           for a job that still cannot start: a Reservation or None; the first answer wins.
        -> Reservation | None    A reservation's GPUs are kept from jobs ordered after it, except from jobs
                                 expected to end (now + reference time left) before it starts (EASY backfill).
    close(ctx, decision)         every plugin, once at the end of the cycle; may return a wake-up time; the
        -> float | None          earliest one becomes `Decision.wake_s`. It may append to `decision.prefetches`.
    drain(ctx) -> bool[n] | None before each cycle, the Scheduler asks the plugins that override it which nodes to
                                 drain (True): no new work starts there, running jobs stay. A node is drained while
                                 any plugin drains it. None (the default): no opinion.

    An `order` plugin whose key of a running job changes with time (LAS: attained service) says when through
    `key_expires_s`; the framework caches running jobs' keys until then and wakes the scheduler at that time.

    `static_order` tells the framework the key of a pending job does not change while it waits, except at the
    times `pending_key_expires_s` announces (it may then keep the queue sorted between cycles instead of sorting
    it every cycle).

    `needs_usage` asks the framework to keep `ctx.usage` (what running jobs hold per tenant and queue) up to date,
    within a cycle too. `ctx.node_mask(job)` gives the nodes every filter allows (for plugins that plan ahead)."""

    name: ClassVar[str] = ""
    static_order: ClassVar[bool] = True
    shape_by_tenant: ClassVar[bool] = False  # its answers differ by tenant or queue (queue shapes keep them apart)
    dynamic_running_key: ClassVar[bool] = False  # the key of a running job changes continuously (SRTF)
    needs_usage: ClassVar[bool] = False  # reads ctx.usage (the framework then keeps it)
    # Reservation plugins: GPU-seconds of reserved capacity their holders left unused so far, by reservation name
    # (a simulated run reports them under `reservations.unused_gpu_s`). Other plugins hold none.
    unused_gpu_s: Mapping[str, float] = MappingProxyType({})

    def open(self, ctx: CycleContext) -> None:
        return None

    def admit(self, job: Job, ctx: CycleContext) -> Status:
        return Status.ok()

    def order_key(self, job: Job, ctx: CycleContext) -> Any:
        raise NotImplementedError

    def key_expires_s(self, job: Job, ctx: CycleContext) -> float:
        """When the order key of a running job will change (inf: never while it runs). The framework keeps the
        keys of running jobs until then, and wakes the scheduler at that time."""
        return math.inf

    def pending_key_expires_s(self, job: Job, ctx: CycleContext) -> float:
        """When the order key of a waiting job will change (inf: never while it waits). The scheduler sorts the
        job again at that time (and wakes up for it); between such times `static_order` must hold."""
        return math.inf

    def key_group(self, job: Job) -> Hashable:
        """For a plugin without `static_order`: the group of jobs that share its key in any cycle (drf: the
        job's queue), its key depending on the job through this group only. When every such plugin of a profile
        names one, the scheduler keeps each group sorted by the other plugins' keys and computes this plugin's key
        once per group and cycle, not once per waiting job. The default (the job itself) means no such group."""
        return job.id

    def filter(self, job: Job, ctx: CycleContext) -> np.ndarray:
        raise NotImplementedError

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        raise NotImplementedError

    def place(self, job: Job, ctx: CycleContext, fit: np.ndarray, score: np.ndarray) -> Allocation | None:
        raise NotImplementedError

    def preempt(self, job: Job, ctx: CycleContext) -> list[str] | None:
        return None

    def backfill(self, job: Job, ctx: CycleContext) -> Reservation | None:
        return None

    def close(self, ctx: CycleContext, decision: Decision) -> float | None:
        return None

    def drain(self, ctx: CycleContext) -> np.ndarray | None:
        return None


PluginFactory = Callable[..., Plugin]
