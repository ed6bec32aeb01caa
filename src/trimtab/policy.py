"""The contracts of a scheduling cycle: Status (with its cause), the read-only CycleContext, Plugin (the one base
class of policies, a method per extension point) and what a cycle returns (Decision, Reservation)."""

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


class Cause(StrEnum):
    """Why a job waits, for whoever counts waiting time by reason (metrics: quota-blocked GPU-hours)."""

    FIT = "fit"  # no room for it on the nodes its filters allow, even after preemption
    QUOTA = "quota"  # an admission quota (ResourceQuota, queue capability or share, tenant GPU quota) holds it
    RESERVATION = "reservation"  # the free GPUs are held for other jobs
    LOCALITY = "locality"  # held back for a better placement later (delay scheduling)
    GANG = "gang"  # a pod beyond its gang's minimum, waiting for the gang to start
    ORDER = "order"  # not reached yet: jobs ahead of it in the queue hold it (no cycle has examined it)
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class Status:
    """An explicit answer: success is `Status.ok()`, never an absent value. A non-success says why in `reason`
    (text for people), which plugin gave it (`plugin`, cited in reasons), its `cause` (a Cause, for code that
    counts by reason; OTHER unless the plugin says) and, when the plugin knows, what would let the job start
    (`hint`, text for people: `trimtab why`)."""

    code: Code
    reason: str = ""
    plugin: str = ""
    cause: Cause = Cause.OTHER
    hint: str = ""

    @staticmethod
    def ok() -> Status:
        return _OK

    @property
    def success(self) -> bool:
        return self.code is Code.SUCCESS


_OK = Status(Code.SUCCESS)
_DOES_NOT_FIT = Status(Code.WAIT, "does not fit now", cause=Cause.FIT)
_NO_FREE_GPU = Status(Code.WAIT, "no free GPU", cause=Cause.FIT)
_RESERVED = Status(Code.WAIT, "the free GPUs are reserved for jobs ahead of it", cause=Cause.RESERVATION)
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


@dataclass(frozen=True, slots=True)
class Eviction:
    """One preemption of a cycle: `job_id` started by stopping `victims`. `evicted_gpus`: the whole GPUs the victims
    held (a gang victim counted whole, on every node it spans); `needed_gpus`: the whole GPUs of the job's
    allocation that were not idle before the evictions (per node, what it takes there beyond the idle GPUs it
    found). evicted == needed means no GPU was evicted in vain."""

    job_id: str
    victims: tuple[str, ...]
    evicted_gpus: int
    needed_gpus: int


@dataclass(frozen=True, slots=True)
class Resize:
    """A running elastic job moved to a new allocation of the same task shape (`alloc`, whose task count lies in
    the job's elastic range): the world checkpoints it and restarts it there (it keeps its progress and pays its
    `Elastic.resize_s`). `before` is the allocation it held."""

    job_id: str
    before: Allocation
    alloc: Allocation

    @property
    def shrinks(self) -> bool:
        return self.alloc.tasks < self.before.tasks


@dataclass(slots=True)
class Decision:
    """What a cycle decided: the world starts `starts`, stops `preemptions` (before the starts), keeps the
    reservations, and calls `cycle` again no later than `wake_s` (None: only on the next event). `evictions`: one
    record per preemption (its victims are in `preemptions` too), for the world's metrics. `prefetches`: (job,
    nodes) pairs whose dataset the world should start loading onto those nodes (appended by plugins in `close`; a
    world without a data model ignores them). `resizes`: running elastic jobs the world restarts on a new
    allocation (the `resize` plugins' answers, already applied to the cluster and booked by the Scheduler).

    Why jobs wait (see docs/architecture.md, "Reasons"): `waiting` holds the Status of every job the cycle examined
    and could not start (an admit plugin's answer, or the cycle's own: no fit, GPUs reserved); `stalled` the jobs
    it reached but did not examine because no GPU was free for them (cause FIT). A world keeps each job's latest
    cause: a `waiting` status replaces it, a `stalled` one replaces only ORDER (not examined yet); jobs the cycle
    did not reach keep theirs (those skipped because a job of their request shape ahead of them is blocked would
    get the same answer)."""

    starts: list[tuple[Job, Allocation]] = field(default_factory=list)
    preemptions: list[str] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
    waiting: dict[str, Status] = field(default_factory=dict)
    stalled: dict[str, Status] = field(default_factory=dict)
    wake_s: float | None = None
    prefetches: list[tuple[Job, np.ndarray]] = field(default_factory=list)
    resizes: list[Resize] = field(default_factory=list)


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


@dataclass(frozen=True, slots=True)
class CycleContext:
    """The snapshot every plugin sees, complete before any plugin sees it and never written (frozen). Only the
    Scheduler and the cycle change what it points to (the cluster, the running jobs, the usage book, the running
    keys), as they book each answer. A preemption attempt hands the plugins a copy with `releasing` set. Between
    cycles (order keys of arriving jobs) the cycle's parts (running keys, order_key, usage, node_mask) are left at
    their defaults."""

    now_s: float
    cluster: ClusterState
    pending: Sequence[Job]
    running: Mapping[str, RunningJob]
    prior_attained_gpu_s: Mapping[str, float]  # service from finished runs of pending jobs
    prior_executed_s: Mapping[str, float]  # credited run time of pending jobs (after checkpoint loss)
    rng: np.random.Generator
    running_keys: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)  # order keys of running jobs
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


# ------------------------------------------------------------------------------------------ extension points
# One base class, Plugin: a method per extension point, in cycle order, each with the contract of its callers and
# a default. A Profile lists plugins by point; the Framework checks, when the profile loads, that each plugin
# overrides the method of every point it is listed at (see `POINT_METHODS`).

POINT_METHODS: Mapping[str, str] = {"admit": "admit", "order": "order_key", "filter": "filter", "score": "score",
                                    "place": "place", "preempt": "preempt", "backfill": "backfill",
                                    "resize": "resize"}
"""Profile point -> the method a plugin listed there must implement."""


class Plugin:
    """Base class of policies: a default for every extension point (a plugin overrides the points it implements;
    the Profile says at which points it is enabled) and the order companions. Plugins read the CycleContext and
    return answers; they never mutate it. `open`, `close` and `drain` are asked of every plugin of the profile,
    whatever its points, in profile order."""

    name: ClassVar[str] = ""
    static_order: ClassVar[bool] = True  # the key of a waiting job does not change while it waits (see order_key)
    shape_by_tenant: ClassVar[bool] = False  # its answers differ by tenant or queue (queue shapes keep them apart)
    dynamic_running_key: ClassVar[bool] = False  # the key of a running job changes continuously (SRTF)
    needs_usage: ClassVar[bool] = False  # reads ctx.usage (the cycle then keeps it, within a cycle too)
    # a filter: what the nodes it rules out are, in a reason's per-node counts ("2 are tainted"); empty: the
    # reasons say "are ruled out by <name>"
    filter_reason: ClassVar[str] = ""
    # Reservation plugins: GPU-seconds of reserved capacity their holders left unused so far, by reservation name
    # (a simulated run reports them under `reservations.unused_gpu_s`). Other plugins hold none.
    unused_gpu_s: Mapping[str, float] = MappingProxyType({})
    # A resize plugin that sizes the start of elastic jobs below their request (start_tasks); a profile opts in
    # through the plugin's arguments
    sizes_starts: bool = False

    def drain(self, ctx: CycleContext) -> np.ndarray | None:
        """Before each cycle: a boolean mask over nodes that should take no new work (True: drain; running jobs
        stay) or None (no opinion). A node is drained while any plugin drains it; drained nodes are left out of
        placement until no plugin drains them."""
        return None

    def open(self, ctx: CycleContext) -> None:
        """Once per cycle, before any other point: compute per-cycle state (drf's shares, a filter's cache)."""
        return None

    def kept(self) -> dict[str, Any]:
        """What it learned over the cycles that a Scheduler taking over should go on from (JSON-able; a live
        world keeps it across a rebuild and a new leader): drf's decayed usage. Empty: nothing."""
        return {}

    def keep_on(self, kept: Mapping[str, Any]) -> None:
        """Go on from what `kept` gave (of a plugin of the same name, an earlier Scheduler's)."""
        return None

    def admit(self, job: Job, ctx: CycleContext) -> Status:
        """May a pending job start now, as far as this plugin is concerned? Called for every pending job the cycle
        reaches, by every `admit` plugin in profile order; the first non-success holds the job queued this cycle
        (its Status goes into `Decision.waiting`). The answer may depend only on the job's shape (request,
        constraints, tenant, queue, priority) and the cycle's state, because a "no" holds the later jobs of that
        shape too. A plugin that reads `ctx.usage` sets `needs_usage`."""
        return Status.ok()

    def order_key(self, job: Job, ctx: CycleContext) -> Any:
        """Which pending job goes first: a sortable key of any job, pending or running. The keys of the `order`
        plugins form a tuple compared lexicographically, so the first plugin that tells two jobs apart wins; ties
        end in submission order; lower keys go first. `ctx.order_key(job)` gives that tuple.

        The cycle keeps the queue sorted between cycles while the key of a waiting job does not change
        (`static_order`, default True), except at the times `pending_key_expires_s` announces. A running job's
        key is cached until `key_expires_s` (the scheduler wakes up then), or recomputed every cycle with
        `dynamic_running_key`. A plugin without `static_order` may name the group its key depends on
        (`key_group`)."""
        raise NotImplementedError

    def key_expires_s(self, job: Job, ctx: CycleContext) -> float:
        """When the order key of a running job will change (inf: never while it runs). The cycle keeps the keys
        of running jobs until then, and wakes the scheduler at that time."""
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

    def running_order_keys(self, jobs: Sequence[Job], ctx: CycleContext) -> list[Any]:
        """The order keys of the running `jobs`, in their order: exactly `order_key` of each. Called by the cycle's
        running-key cache for a plugin whose running keys move (`dynamic_running_key`, or expiring ones beside such
        a plugin) every cycle, for all running jobs at once; a plugin may compute them in one pass."""
        return [self.order_key(job, ctx) for job in jobs]

    def filter(self, job: Job, ctx: CycleContext) -> np.ndarray:
        """The nodes a job may run on: a boolean mask over nodes (True: allowed), for each job the cycle tries to
        place; a node must pass every filter. The answer must not depend on what is free now (the cycle counts fit
        itself): `ctx.node_mask(job)` is the conjunction of all filters, which plugins use to plan ahead. During a
        preemption attempt `ctx.releasing` names running jobs to treat as gone."""
        raise NotImplementedError

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        """How good each node is for a job: 0..100 per node (higher is better), for each job the cycle tries to
        place; the cycle sums the scores times their profile weights and hands the sum to the `place` plugin. Like
        filters, scores during a preemption attempt treat `ctx.releasing` as gone."""
        raise NotImplementedError

    def place(self, job: Job, ctx: CycleContext, fit: np.ndarray, score: np.ndarray) -> Allocation | None:
        """Where a job's tasks go. The one `place` plugin of a profile chooses nodes for all `job.tasks` tasks,
        given how many tasks fit on each node now (`fit`, 0 where a filter fails) and the weighted scores. None:
        the job does not start now (it may preempt or reserve next). The cycle checks the Allocation against `fit`
        (an infeasible one is a bug: RuntimeError) and applies it in a Txn, whole."""
        raise NotImplementedError

    def preempt(self, job: Job, ctx: CycleContext) -> list[str] | None:
        """For a job that does not fit and is ordered before some running job: victims (ids of running jobs
        ordered after the job), or None. A plugin says who is eligible, in what rank and under which guards, and
        hands them to the one victim search (`plugins.victims.fewest_victims`: node- and gang-aware, the fewest
        victims that make room where the job may run). The `preempt` plugins are asked in profile order and the
        first usable answer wins: the cycle releases the victims in a Txn and commits only if the job then fits
        (a job started in this cycle is never a victim), and starts the job at once, in the same cycle and before
        any job after it is looked at: the freed GPUs are held for it by construction (kube-scheduler's nominated
        node), no later job can take them.

        An answer is monotone: if no victims are found for a job, none are for a later job (ordered after it, so
        with no more eligible victims) asking for as many tasks or more, each of as many GPUs or more; the cycle
        then stops asking such jobs, so a long queue costs one failed attempt per request shape and cycle. (Jobs
        are compared by GPUs alone: CPU, memory and filters are taken as alike.) Never asked for a job whose
        `preemption_policy` is "Never". `ctx.running_ranked` holds the running jobs' keys sorted, so the jobs
        ordered after a key are a tail found by bisection."""
        return None

    def backfill(self, job: Job, ctx: CycleContext) -> Reservation | None:
        """For a job that still cannot start (after preemption): a Reservation or None; the first answer of the
        `backfill` plugins wins. A reservation's GPUs are kept from jobs ordered after it, except from jobs expected
        to end (now + reference time left) before it starts (EASY backfill); a reservation of the whole cluster
        (`nodes` None) ends the cycle (strict head-of-line)."""
        return None

    def resize(self, ctx: CycleContext, decision: Decision) -> list[Resize]:
        """Running elastic jobs to grow into idle GPUs or to shrink for waiting jobs. Once per cycle, after the
        queue walk and before `close`, in profile order: new allocations for running jobs with an `elastic` range
        (each within it, of the job's task shape, on GPUs that are idle or that the job holds). The cycle applies
        each answer in a Txn (release the old allocation, take the new one) before asking the next plugin and
        appends it to `decision.resizes`; after a shrink the world runs another cycle at once (the GPUs it freed
        are for the jobs in `decision.waiting`). A job resized or started in this cycle is not resized again."""
        return []

    def start_tasks(self, job: Job, ctx: CycleContext, room: int) -> int | None:
        """Asked only of the `resize` plugins whose `sizes_starts` is true, in profile order, for an elastic job
        that cannot start at its request (`job.tasks`) in the queue walk, not even by preemption, while `room` <
        `job.tasks` of its tasks fit now (filters and reservations applied): the number of tasks to start it on
        instead, in `job.elastic.min_tasks..room`, or None (the next plugin is asked; no answer: it waits). The
        cycle places a gang of that many tasks, all or nothing, and starts the job on it; a grow may bring it up to
        its request later."""
        return None

    def close(self, ctx: CycleContext, decision: Decision) -> float | None:
        """Once at the end of the cycle, with its Decision: may return a time to be woken up at; the earliest
        answer of all plugins becomes `Decision.wake_s` (None: no wish). It may append to `decision.prefetches`
        (datasets the world should load onto nodes ahead of the jobs that will read them)."""
        return None


def implements(plugin: object, point: str) -> bool:
    """Does `plugin` implement profile point `point` (override Plugin's default of its method)?"""
    method = POINT_METHODS[point]
    return getattr(type(plugin), method, None) not in (None, getattr(Plugin, method))


def check_points(profile_name: str, points: Mapping[str, Sequence[Plugin]]) -> None:
    """A profile lists each plugin only at points it implements: else a ValueError when the profile loads into a
    Framework, naming the profile, the point and the plugin, rather than an error in the middle of a cycle."""
    for point, plugins in points.items():
        for plugin in plugins:
            if not implements(plugin, point):
                raise ValueError(f"profile {profile_name}: plugin {plugin.name!r} is listed at {point} but does not "
                                 f"implement {POINT_METHODS[point]}")
