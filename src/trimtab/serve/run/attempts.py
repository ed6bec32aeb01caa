"""The daemon's records of work in flight: an attempt of a job, the tasks (runs) that hold its GPUs, and the
scheduler's view of a stored job."""

from __future__ import annotations

from dataclasses import dataclass, field

from trimtab.cluster import GPU_MILLI, Allocation
from trimtab.model import Elastic, Job, Resources
from trimtab.serve.intake.placement import read_placement
from trimtab.serve.run.progress import LiveScaling
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
    stop_reason: str = ""  # "", "failed" (a task failed), "node-lost", "preempted", "cancelled", "restart",
    # "resized"
    resized: bool = False  # started by a resize of the job (its tasks are told TRIMTAB_RESIZED=1)
    master_port: int = 0  # the gang's rendezvous port, one for all its tasks
    failed_code: int | None = None  # exit code of the task whose failure ended the attempt
    failed_detail: str = ""  # what the executor said about it (e.g. "could not start: ...")


def run_id_of(job_id: int, attempt: int, rank: int) -> str:
    return f"{job_id}.{attempt}.{rank}"


def milli_of(row: JobRow) -> int:
    """What each task of the job holds of each of its GPUs."""
    return row.gpu_milli or GPU_MILLI


# What one resize of a live job costs it, for the resize plugins' hysteresis (Elastic.resize_s): stop within the
# grace period, restart, load the checkpoint, warm up.
LIVE_RESIZE_S = 30.0


def job_of(row: JobRow) -> Job:
    """The scheduler's view of a stored job, its tolerations and affinity read as at submission. Every live job
    gets a LiveScaling of its own (what it reports is learned there); one with a range is elastic."""
    tolerations, affinity = read_placement(row.tolerations, row.affinity, row.labels)
    elastic = None if row.min_tasks is None or row.max_tasks is None else \
        Elastic(row.min_tasks, row.max_tasks, LIVE_RESIZE_S)
    return Job(id=str(row.id), submit_s=row.submit_s, tasks=row.tasks,
               task=Resources(row.gpus_per_task, row.cpu_milli, row.mem_mib, gpu_milli=row.gpu_milli),
               tenant=row.tenant, priority=row.priority, gpu_models=tuple(row.gpu_models),
               node_selector=dict(row.node_selector), tolerations=tolerations, node_affinity=affinity.node_required,
               node_preferences=affinity.node_preferred, pod_affinity=affinity.pods, labels=dict(row.labels),
               elastic=elastic, scaling=LiveScaling(row.target_gpu_util))
