"""The daemon's records of work in flight: an attempt of a job, the tasks (runs) that hold its GPUs, and the
scheduler's view of a stored job."""

from __future__ import annotations

from dataclasses import dataclass, field

from trimtab.cluster import GPU_MILLI, Allocation
from trimtab.model import Job, Resources
from trimtab.serve.placement import read_placement
from trimtab.serve.store import JobRow


@dataclass(eq=False, slots=True)
class Run:
    """One task that holds `milli` of each of its GPUs (GPU_MILLI: whole GPUs; less: a share of its one GPU)."""

    run_id: str
    attempt: Attempt
    rank: int
    node: str
    gpu_ids: tuple[str, ...]
    milli: int = GPU_MILLI
    row_id: int = 0


@dataclass(eq=False, slots=True)
class Attempt:
    """One attempt of a job: its allocation, its tasks once launched, and why it is being stopped, if it is."""

    job_id: int
    number: int
    alloc: Allocation
    launched: bool = False
    live: dict[str, Run] = field(default_factory=dict)
    codes: dict[int, int | None] = field(default_factory=dict)
    stop_reason: str = ""  # "", "failed" (a task failed), "node-lost", "preempted", "cancelled", "restart"
    master_port: int = 0  # the gang's rendezvous port, one for all its tasks
    failed_code: int | None = None  # exit code of the task whose failure ended the attempt
    failed_detail: str = ""  # what the executor said about it (e.g. "could not start: ...")


def run_id_of(job_id: int, attempt: int, rank: int) -> str:
    return f"{job_id}.{attempt}.{rank}"


def milli_of(row: JobRow) -> int:
    """What each task of the job holds of each of its GPUs."""
    return row.gpu_milli or GPU_MILLI


def job_of(row: JobRow) -> Job:
    """The scheduler's view of a stored job, its tolerations and affinity read as at submission."""
    tolerations, affinity = read_placement(row.tolerations, row.affinity, row.labels)
    return Job(id=str(row.id), submit_s=row.submit_s, tasks=row.tasks,
               task=Resources(row.gpus_per_task, row.cpu_milli, row.mem_mib, gpu_milli=row.gpu_milli),
               tenant=row.tenant, priority=row.priority, gpu_models=tuple(row.gpu_models),
               node_selector=dict(row.node_selector), tolerations=tolerations, node_affinity=affinity.node_required,
               node_preferences=affinity.node_preferred, pod_affinity=affinity.pods, labels=dict(row.labels))
