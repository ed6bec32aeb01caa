"""The data model: resources, nodes, jobs (gangs of identical tasks), job states and outcomes.

Plain frozen dataclasses and enums with validation and small derived properties; no scheduling behaviour."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol


class JobState(StrEnum):
    """Where a job is in its life. COMPLETED, FAILED and CANCELLED are terminal."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)


class Outcome(StrEnum):
    """How one attempt (one run of a job) ended."""

    COMPLETED = "completed"
    FAILED = "failed"  # the job itself failed (non-zero exit, user bug)
    PREEMPTED = "preempted"  # the scheduler took its GPUs back
    NODE_FAILED = "node-failed"  # infrastructure failure under it
    CANCELLED = "cancelled"
    RESIZED = "resized"  # the scheduler resized an elastic job: it restarts at once on its new allocation


@dataclass(frozen=True, slots=True)
class Resources:
    """A request or a capacity: whole GPUs, a share of one GPU, a MIG slice, CPU in millicores, memory in MiB.

    A request asks for at most one kind of GPU resource: `gpus` whole GPUs, or `gpu_milli` (1..999) thousandths of
    one GPU shared with others (MPS, time slicing), or one MIG slice of profile `mig` (e.g. "1g.10gb"). `qos` is
    the request's QoS class as the trace names it ("LS" latency-sensitive, "BE" best-effort, "Burstable",
    "Guaranteed"; "" unknown): an input to filters and scorers, not to accounting. A capacity uses `gpus` only."""

    gpus: int = 0
    cpu_milli: int = 0
    mem_mib: int = 0
    gpu_milli: int = 0
    mig: str = ""
    qos: str = ""

    def __post_init__(self) -> None:
        for name in ("gpus", "cpu_milli", "mem_mib", "gpu_milli"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"Resources.{name} must be a non-negative integer, got {value!r}")
        if not (self.gpu_milli or self.mig):
            return  # the common case: whole GPUs (or none), nothing more to check
        if self.gpu_milli >= 1000:
            raise ValueError(f"Resources.gpu_milli is a share of one GPU (1..999), got {self.gpu_milli}; "
                             "ask for whole GPUs with gpus")
        if self.mig and not _MIG_PROFILE.fullmatch(self.mig):
            raise ValueError(f"Resources.mig must be a MIG profile like '1g.10gb', got {self.mig!r}")
        if self.gpus or (self.gpu_milli and self.mig):
            raise ValueError("Resources asks for one kind of GPU resource: whole gpus, a gpu_milli share or a mig "
                             f"slice, got gpus={self.gpus}, gpu_milli={self.gpu_milli}, mig={self.mig!r}")

    @property
    def gpu_milli_total(self) -> int:
        """GPU thousandths the request holds: 1000 per whole GPU, its share, or 0 for a MIG slice."""
        return self.gpus * 1000 + self.gpu_milli

    @property
    def wants_gpu(self) -> bool:
        return bool(self.gpus or self.gpu_milli or self.mig)


_MIG_PROFILE = re.compile(r"[1-7]g\.\d+gb(\+me)?")


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Node:
    """One machine: its capacity, GPU model, rack and labels."""

    name: str
    capacity: Resources
    gpu_model: str = ""
    rack: str = "rack-0"
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("Node.name must not be empty")


_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A Kubernetes label selector: every `match_labels` pair and every expression (key, operator, values) must
    hold; an empty selector matches everything. Operators In, NotIn, Exists, DoesNotExist; NotIn and DoesNotExist
    hold where the label is absent, as in Kubernetes."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    def __post_init__(self) -> None:
        for key, op, values in self.match_expressions:
            if op not in _SELECTOR_OPERATORS:
                raise ValueError(f"LabelSelector: operator of {key!r} must be one of {', '.join(_SELECTOR_OPERATORS)}"
                                 f", got {op!r}")
            if (op in ("In", "NotIn")) != bool(values):
                raise ValueError(f"LabelSelector: operator {op} of {key!r} "
                                 + ("needs values" if op in ("In", "NotIn") else "takes no values"))

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        for key, op, values in self.match_expressions:
            value = labels.get(key)
            if op == "In":
                if value not in values:
                    return False
            elif op == "NotIn":
                if value in values:
                    return False
            elif (value is not None) != (op == "Exists"):
                return False
        return True


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """The pods a job's pods want near (affinity) or away from (anti-affinity): those whose labels `selector`
    matches (None matches no pod) in `namespaces` (None: the namespace, i.e. tenant, of the job stating the term;
    `all_namespaces`: any). Near means on nodes with the same value of the node label `topology_key`. `weight`
    (1..100) ranks a preferred term; a required term has weight 0."""

    selector: LabelSelector | None
    topology_key: str
    namespaces: tuple[str, ...] | None = None
    all_namespaces: bool = False
    weight: int = 0

    def __post_init__(self) -> None:
        if not self.topology_key:
            raise ValueError("PodAffinityTerm.topology_key must not be empty")
        if not 0 <= self.weight <= 100:
            raise ValueError(f"PodAffinityTerm.weight must be in 1..100 (0 for a required term), got {self.weight}")


@dataclass(frozen=True, slots=True)
class PodAffinity:
    """Inter-pod affinity and anti-affinity of a job's pods, as a pod spec's `podAffinity` and `podAntiAffinity`
    state them: required terms filter nodes, preferred ones (weighted) rank them."""

    required: tuple[PodAffinityTerm, ...] = ()
    preferred: tuple[PodAffinityTerm, ...] = ()
    required_anti: tuple[PodAffinityTerm, ...] = ()
    preferred_anti: tuple[PodAffinityTerm, ...] = ()

    def __post_init__(self) -> None:
        for term in self.preferred + self.preferred_anti:
            if term.weight < 1:
                raise ValueError("a preferred PodAffinityTerm needs a weight in 1..100")


class ScalingModel(Protocol):
    """How fast a job runs on a number of GPUs: what the simulator's progress and the elastic policies read."""

    def throughput(self, gpus: int, nodes: int) -> float:
        """Work per wall second on `gpus` GPUs spanning `nodes` nodes (> 0; any unit, the same for every answer of
        one model). Where the batch size follows the GPUs, this is goodput: samples per second times statistical
        efficiency (Pollux's definition), so it already counts what a larger batch costs in progress."""
        ...


@dataclass(frozen=True, slots=True)
class LinearScaling:
    """The flat scaling model: every GPU adds the same work per second wherever it is (perfect linear speedup).
    An assumption for traces that say nothing about scaling (Philly); `throughput` is in GPUs."""

    def throughput(self, gpus: int, nodes: int) -> float:
        return float(gpus)


@dataclass(frozen=True, slots=True)
class Elastic:
    """A job whose gang may run with any number of tasks in `min_tasks..max_tasks` (its Job.tasks is the size it
    asks for and starts at). `resize_s`: the wall seconds a resize costs it (checkpoint, restart with the new world
    size, warm-up), during which it makes no progress."""

    min_tasks: int
    max_tasks: int
    resize_s: float = 30.0

    def __post_init__(self) -> None:
        if not 1 <= self.min_tasks <= self.max_tasks:
            raise ValueError(f"Elastic: need 1 <= min_tasks <= max_tasks, got {self.min_tasks}..{self.max_tasks}")
        if self.resize_s < 0:
            raise ValueError(f"Elastic.resize_s must be >= 0, got {self.resize_s}")


@dataclass(frozen=True, slots=True)
class PodBackoff:
    """How a workload controller brings back the pods of an evicted job, as Kubernetes's batch/v1 Job controller
    does. Each evicted pod is a failed pod of the controller's `record` (the Job; with `per_index`, each index
    keeps its own count, so a job's count is its evictions). The pods are recreated `delay_s(failed)` after the
    eviction, and the job fails once more than `limit` have failed (`counts` False: a podFailurePolicy ignores
    evictions, so only the delay applies). `lag_s` is the controller's own latency past the backoff (a live
    world's, measured; none by default). The rules and their sources: docs/kubernetes.md."""

    record: str
    limit: int
    per_index: bool = False
    counts: bool = True
    base_s: float = 10.0  # DefaultJobPodFailureBackOff
    max_s: float = 600.0  # MaxJobPodFailureBackOff
    lag_s: float = 0.0

    def delay_s(self, failed: int) -> float:
        """The backoff after `failed` pod failures: `base_s` doubled per failure after the first, at most
        `max_s`."""
        if failed <= 0:
            return 0.0
        return min(self.base_s * 2.0 ** min(failed - 1, 62), self.max_s)


def parse_gpu_range(text: str) -> tuple[int, int]:
    """(low, high) of a GPU range such as "2-8" (or "4": both ends 4), as `trimtab.io/gpus` and `--gpus` write it.
    Raises ValueError naming the text when it is not a range of positive integers, low first."""
    low, dash, high = text.strip().partition("-")
    try:
        lo, hi = int(low), int(high) if dash else int(low)
    except ValueError:
        raise ValueError(f"GPU range {text!r}: expected N or MIN-MAX, positive integers") from None
    if not 1 <= lo <= hi:
        raise ValueError(f"GPU range {text!r}: expected 1 <= MIN <= MAX")
    return lo, hi


@dataclass(frozen=True, slots=True)
class Job:
    """A gang of `tasks` identical tasks, each asking for `task`; placed whole or not at all.

    `duration_s` is the reference run time on the reference GPU when it runs alone (simulation only; None for a
    live job). A trace job of G GPUs becomes G tasks of one GPU, so placement decides how the gang spreads."""

    id: str
    submit_s: float
    tasks: int
    task: Resources
    duration_s: float | None = None
    tenant: str = "default"
    user: str = ""
    priority: int = 0
    gpu_models: tuple[str, ...] = ()  # allowed GPU models; empty means any
    job_type: str = ""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    gpus: int = field(init=False, repr=False, compare=False)  # GPUs of the whole gang (tasks x task.gpus)
    # multi-tenant fields (Kubernetes manifests; see formats/k8s.py and docs/multitenant.md)
    queue: str = ""  # Volcano Queue; "" is the tenant's own
    priority_class: str = ""
    preemption_policy: str = "PreemptLowerPriority"  # or "Never": waits, never evicts others
    task_limits: Resources | None = None  # limits per task; None: equal to the requests
    tolerations: tuple[tuple[str, str, str, str], ...] = ()  # (key, operator Equal|Exists, value, effect or "")
    # required node affinity: terms ORed, each a tuple of (key, operator, values) ANDed
    node_affinity: tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...] = ()
    # simulation of faults and data (see sim/faults.py, sim/data.py and docs/faults.md)
    dataset: str = ""  # the dataset it reads; "" reads none (or one the simulator assigns)
    dataset_gb: float = 0.0
    checkpoint_s: float | None = None  # checkpoint interval of progress; None: the run's default
    max_retries: int | None = None  # retries after the job's own failures; None: the run's default
    # inter-pod and preferred node affinity (Kubernetes manifests; see plugins/affinity.py)
    labels: Mapping[str, str] = field(default_factory=dict)  # the pods' metadata.labels (what pod terms select)
    pod_affinity: PodAffinity | None = None
    # preferred node affinity: (weight 1..100, expressions ANDed as in node_affinity)
    node_preferences: tuple[tuple[int, tuple[tuple[str, str, tuple[str, ...]], ...]], ...] = ()
    # a pod of a gang beyond its minimum (PodGroup minMember, Volcano minAvailable): the id of that gang's Job,
    # before whose first start this one may not start (plugins/gang.py); None: no such bond
    after: str | None = None
    # elastic jobs (docs/elastic.md): how the job's speed depends on its GPUs (None: the run's speed models), and
    # the range it may be resized in (None: a fixed-size job)
    scaling: ScalingModel | None = None
    elastic: Elastic | None = None
    # a controller that recreates the job's pods after an eviction, with a backoff (a batch/v1 Job's pods);
    # None: a preempted job is queued again at once
    pod_backoff: PodBackoff | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpus", self.tasks * self.task.gpus)
        if not self.id:
            raise ValueError("Job.id must not be empty")
        if self.tasks < 1:
            raise ValueError(f"job {self.id}: tasks must be >= 1, got {self.tasks}")
        if self.submit_s < 0:
            raise ValueError(f"job {self.id}: submit_s must be >= 0, got {self.submit_s}")
        if self.duration_s is not None and self.duration_s < 0:
            raise ValueError(f"job {self.id}: duration_s must be >= 0, got {self.duration_s}")
        if self.after == self.id:
            raise ValueError(f"job {self.id}: a job cannot start after itself")
        if self.elastic is not None and not self.elastic.min_tasks <= self.tasks <= self.elastic.max_tasks:
            raise ValueError(f"job {self.id}: tasks {self.tasks} outside its elastic range "
                             f"{self.elastic.min_tasks}..{self.elastic.max_tasks}")

