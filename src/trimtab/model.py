"""The data model: resources, nodes, jobs (gangs of identical tasks), job states and outcomes.

Plain frozen dataclasses and enums with validation and small derived properties; no scheduling behaviour."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


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
    # multi-tenant fields (Kubernetes manifests; see spec/k8s.py and docs/multitenant.md)
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

