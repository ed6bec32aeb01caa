"""The scheduling framework: extension points, Status, Profile, Registry and one scheduling cycle.

A cycle reads a snapshot (CycleContext), asks the enabled plugins at each extension point and returns a Decision;
it changes ClusterState only through Txns, so a gang is placed whole or not at all."""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trimtab.cluster import Allocation, ClusterState
from trimtab.model import Job

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
    reservations, and calls `cycle` again no later than `wake_s` (None: only on the next event)."""

    starts: list[tuple[Job, Allocation]] = field(default_factory=list)
    preemptions: list[str] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
    waiting: dict[str, Status] = field(default_factory=dict)
    wake_s: float | None = None


USAGE_DIMS = ("pods", "gpus", "cpu_milli", "mem_mib", "limit_cpu_milli", "limit_mem_mib")


def usage_of(job: Job) -> np.ndarray:
    """What a running job counts against quotas, in the order of USAGE_DIMS."""
    t, lim = job.task, job.task_limits or job.task
    n = job.tasks
    return np.array([n, n * t.gpus, n * t.cpu_milli, n * t.mem_mib, n * lim.cpu_milli, n * lim.mem_mib],
                    dtype=np.int64)


class UsageBook:
    """What running jobs hold, summed per tenant and per queue (`usage_of`), kept in step by the Framework as jobs
    start and stop, inside a cycle as well as between cycles. Plugins read it; only the Framework writes it."""

    def __init__(self) -> None:
        self.by_tenant: dict[str, np.ndarray] = {}
        self.by_queue: dict[str, np.ndarray] = {}
        self._jobs: dict[str, tuple[str, str, np.ndarray]] = {}
        self.removals = 0  # jobs taken off so far: while it stays put, usage only grows

    def __len__(self) -> int:
        return len(self._jobs)

    def tenant(self, name: str) -> np.ndarray:
        return self.by_tenant.get(name, _ZERO_USAGE)

    def queue(self, name: str) -> np.ndarray:
        return self.by_queue.get(name, _ZERO_USAGE)

    def add(self, job: Job) -> None:
        if job.id in self._jobs:
            return
        vec = usage_of(job)
        queue = job.queue or job.tenant
        self._jobs[job.id] = (job.tenant, queue, vec)
        self.by_tenant[job.tenant] = self.tenant(job.tenant) + vec
        self.by_queue[queue] = self.queue(queue) + vec

    def remove(self, job_id: str) -> None:
        entry = self._jobs.pop(job_id, None)
        if entry is not None:
            self.removals += 1
            tenant, queue, vec = entry
            self.by_tenant[tenant] = self.by_tenant[tenant] - vec
            self.by_queue[queue] = self.by_queue[queue] - vec

    def sync(self, running: Mapping[str, RunningJob]) -> None:
        """Catch up with jobs that started or stopped outside a cycle's view (e.g. re-adopted on restart)."""
        if len(self._jobs) == len(running) and all(j in running for j in self._jobs):
            return
        for job_id in [j for j in self._jobs if j not in running]:
            self.remove(job_id)
        for run in running.values():
            self.add(run.job)


_ZERO_USAGE = np.zeros(len(USAGE_DIMS), dtype=np.int64)


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
        -> float | None          earliest one becomes `Decision.wake_s`.

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


PluginFactory = Callable[..., Plugin]


class Registry:
    """Plugin factories by name. No global state: a Registry is built explicitly (see `plugins.default_registry`)."""

    def __init__(self, factories: Mapping[str, PluginFactory] | None = None) -> None:
        self._factories: dict[str, PluginFactory] = dict(factories or {})

    def register(self, name: str, factory: PluginFactory) -> None:
        if name in self._factories:
            raise ValueError(f"plugin {name!r} is already registered")
        self._factories[name] = factory

    def names(self) -> list[str]:
        return sorted(self._factories)

    def create(self, name: str, args: Mapping[str, Any]) -> Plugin:
        factory = self._factories.get(name)
        if factory is None:
            raise ValueError(f"unknown plugin {name!r}; known: {', '.join(self.names())}")
        try:
            plugin = factory(**args)
        except TypeError as exc:
            raise ValueError(f"plugin {name!r}: bad arguments {dict(args)}: {exc}") from exc
        plugin.name = name  # type: ignore[misc]
        return plugin


# ------------------------------------------------------------------------------------------------- profile


PluginRef = str | dict[str, dict[str, Any]]


def _split_ref(ref: PluginRef) -> tuple[str, dict[str, Any]]:
    if isinstance(ref, str):
        return ref, {}
    if len(ref) != 1:
        raise ValueError(f"a plugin entry is a name or {{name: {{args}}}}, got {ref!r}")
    ((name, args),) = ref.items()
    return name, dict(args or {})


class Profile(BaseModel):
    """The enabled plugins at each extension point, with arguments and score weights. Loaded from YAML or by
    built-in name (`Profile.load`). A plugin named at several points is one instance (it may share state).
    `args` gives arguments to plugins by name when they are listed by name only."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    admit: list[PluginRef] = Field(default_factory=list)
    order: list[PluginRef] = Field(default_factory=lambda: ["fifo"])
    filter: list[PluginRef] = Field(default_factory=lambda: ["gpu-model", "node-selector"])
    score: dict[str, float] = Field(default_factory=dict)
    place: PluginRef = "pack"
    preempt: list[PluginRef] = Field(default_factory=list)
    backfill: list[PluginRef] = Field(default_factory=list)
    args: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # task consolidation: single-task jobs of one tenant and shape, next to each other in the queue and submitted
    # within this window of the first, are placed as one unit (one placement), then run as separate jobs; 0: off
    consolidate_window_s: float = Field(default=0.0, ge=0.0)
    consolidate_max_jobs: int = Field(default=256, ge=2)

    @field_validator("score")
    @classmethod
    def _weights_positive(cls, value: dict[str, float]) -> dict[str, float]:
        for name, weight in value.items():
            if weight < 0:
                raise ValueError(f"score weight of {name!r} must be >= 0, got {weight}")
        return value

    def with_args(self, args: Mapping[str, Mapping[str, Any]]) -> Profile:
        """A copy whose plugin arguments are merged with `args` (by plugin name; `args` wins). Arguments for
        plugins the profile does not enable are kept but unused."""
        merged = {name: dict(values) for name, values in self.args.items()}
        for name, values in args.items():
            merged[name] = {**merged.get(name, {}), **values}
        return self.model_copy(update={"args": merged})

    @staticmethod
    def builtin_names() -> list[str]:
        folder = resources.files("trimtab") / "profiles"
        return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))

    @classmethod
    def load(cls, name_or_path: str | Path) -> Profile:
        """A built-in profile by name (`las`, `fifo`, ...) or a YAML file by path."""
        text: str
        source = str(name_or_path)
        path = Path(name_or_path)
        if path.suffix in (".yaml", ".yml") or path.exists():
            if not path.exists():
                raise ValueError(f"profile file {source} does not exist")
            text = path.read_text()
        else:
            builtin = resources.files("trimtab") / "profiles" / f"{source}.yaml"
            if not builtin.is_file():
                raise ValueError(f"unknown policy {source!r}; built in: {', '.join(cls.builtin_names())}")
            text = builtin.read_text()
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"profile {source}: not valid YAML: {exc}") from exc
        if not isinstance(data, dict):
            raise ValueError(f"profile {source}: expected a mapping at the top level")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            fields = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"profile {source}: {fields}") from exc


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
