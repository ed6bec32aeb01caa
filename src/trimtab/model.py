"""The data model: resources, nodes, jobs (gangs of identical tasks), job states and outcomes.

Plain frozen dataclasses and enums with validation and small derived properties; no scheduling behaviour."""

from __future__ import annotations

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
    """A request or a capacity: whole GPUs, CPU in millicores, memory in MiB."""

    gpus: int = 0
    cpu_milli: int = 0
    mem_mib: int = 0

    def __post_init__(self) -> None:
        for name in ("gpus", "cpu_milli", "mem_mib"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"Resources.{name} must be a non-negative integer, got {value!r}")


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

