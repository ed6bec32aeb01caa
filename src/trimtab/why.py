"""Why a job waits, in words: the per-node counts of a job that does not fit, in kube-scheduler's FitError shape
("0/4 nodes are available: 2 are tainted, 2 have too few free GPUs."), and the reason `trimtab why` prints.

Two callers: the cycle, for each job it could not start, when its world wants the text (`Framework.explains`: the
live service; a simulation records only the causes), and `explain`, on demand, for one pending job. Both only
read the cluster and the filters (whose answers never depend on what is free), so asking changes no decision."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from trimtab.cluster import GPU_MILLI, ClusterState
from trimtab.model import Job, Resources
from trimtab.policy import Cause, Code, CycleContext, Plugin, Reservation, Status

BEHIND = Status(Code.WAIT, "behind a higher-priority job", cause=Cause.ORDER,
                hint="fits now: starts when the jobs ahead of it in the queue have started or stopped blocking it")
_HINTS = {Cause.QUOTA: "starts when its tenant's or queue's running jobs end or the admin raises the quota",
          Cause.LOCALITY: "starts when its better placement frees or its wait for one runs out",
          Cause.GANG: "starts once its gang has started"}


def fit_status(job: Job, ctx: CycleContext, filters: Sequence[Plugin], reserved: np.ndarray | None = None,
               holders: Sequence[str] = ()) -> Status | None:
    """Why `job` does not fit now: a FIT status whose reason counts the nodes by the first thing that rules each
    out (down, a filter's `filter_reason`, then its free resources, with `reserved` GPUs per node held for the jobs
    `holders`), sorted as kube-scheduler sorts them; RESERVATION when it would fit but for the reserved GPUs; None
    when it fits now by these counts (what keeps it waiting is then not the cluster's room)."""
    cluster, n = ctx.cluster, len(ctx.cluster)
    counts: dict[str, int] = {}
    allowed = cluster.healthy.copy()
    _count(counts, ~allowed, "are down or drained")
    for plugin in filters:
        mask = plugin.filter(job, ctx)
        _count(counts, allowed & ~mask, plugin.filter_reason or f"are ruled out by {plugin.name}")
        allowed &= mask
    free = np.where(allowed, cluster.fit_counts(job.task), 0)
    fit = free
    if reserved is not None and reserved.any():
        with cluster.txn() as txn:  # discarded: the hold lasts for the count only
            txn.hold_gpus(reserved)
            fit = np.where(allowed, cluster.fit_counts(job.task), 0)
        _count(counts, allowed & (fit == 0) & (free > 0), "have their free GPUs reserved")
    _count_resources(counts, cluster, job.task, allowed & (free == 0))
    room = int(np.minimum(fit, job.tasks).sum())
    if room >= job.tasks:
        return None
    detail = ", ".join(sorted(f"{c} {text}" for text, c in counts.items()))
    if job.tasks == 1:
        text = f"0/{n} nodes are available: {detail}."
    else:  # a gang: all of its members at once or none
        text = (f"waiting for room for the gang's {job.tasks} members: room for {room} on {int((fit > 0).sum())}/{n} "
                "nodes" + (f"; {detail}." if detail else "."))
    hint = _needs(job, cluster, allowed)
    if int(np.minimum(free, job.tasks).sum()) >= job.tasks:  # the reserved GPUs alone keep it out
        who = f"job {holders[0]}" if len(holders) == 1 else f"jobs {', '.join(holders)}" if holders else "others"
        return Status(Code.WAIT, f"reserved for {who}: {text}", cause=Cause.RESERVATION,
                      hint=f"starts when {who} has started or the reservation moves; {hint}")
    return Status(Code.WAIT, text, cause=Cause.FIT, hint=hint)


def _count(counts: dict[str, int], ruled_out: np.ndarray, text: str) -> None:
    k = int(ruled_out.sum())
    if k:
        counts[text] = counts.get(text, 0) + k


def _count_resources(counts: dict[str, int], cluster: ClusterState, task: Resources, full: np.ndarray) -> None:
    """Nodes in `full` (allowed, but room for no task) by the first resource they lack."""
    if task.gpus:
        short_gpu = full & (cluster.free_gpus < task.gpus)
        gpu_text = "have too few free GPUs"
    elif task.gpu_milli:
        short_gpu = full & ((cluster.gpu_free_milli // task.gpu_milli).sum(axis=1) == 0)
        gpu_text = "have no GPU with a free share that large"
    elif task.mig:
        short_gpu = full.copy()  # a MIG slice is the only thing such a request can lack beyond CPU and memory
        short_gpu &= (cluster.free_cpu_milli >= task.cpu_milli) & (cluster.free_mem_mib >= task.mem_mib)
        gpu_text = f"have no free MIG {task.mig} slice"
    else:
        short_gpu, gpu_text = np.zeros_like(full), ""
    _count(counts, short_gpu, gpu_text)
    rest = full & ~short_gpu
    short_cpu = rest & (cluster.free_cpu_milli < task.cpu_milli)
    _count(counts, short_cpu, "have too little free CPU")
    _count(counts, rest & ~short_cpu, "have too little free memory")


def _needs(job: Job, cluster: ClusterState, allowed: np.ndarray) -> str:
    """What would let `job` fit: its request per node, and the most free on a node it may use."""
    task = job.task
    if not allowed.any():
        return "no node it may use is up: change its constraints or bring such a node back"
    if task.gpus:
        what = f"{task.gpus} GPU{'s' if task.gpus > 1 else ''}"
    else:
        what = (f"{task.gpu_milli / GPU_MILLI:g} of a GPU" if task.gpu_milli else f"a MIG {task.mig} slice"
                if task.mig else "its CPU and memory")
    per_node = "on one node" if job.tasks == 1 else f"for each of {job.tasks} members, all at once"
    if not task.gpus:
        return f"needs {what} {per_node}"
    free = np.where(allowed, cluster.free_gpus, -1)
    best = int(np.argmax(free))
    return (f"needs {what} {per_node}; largest free: {int(free[best])} on node {cluster.nodes[best].name}"
            f" (of {int(allowed.sum())} nodes it may use)")


def explain(job: Job, ctx: CycleContext, filters: Sequence[Plugin], latest: Status | None,
            reservations: Sequence[Reservation] = ()) -> Status:
    """Why `job` waits now, with what would let it start (`hint`): its `latest` status from a cycle when an admit
    plugin or a reservation holds it (the plugins are not asked again: some keep per-job state), else the fit
    counts taken now, else (it fits now) BEHIND: jobs ahead of it in the queue go first."""
    if latest is not None and latest.cause not in (Cause.FIT, Cause.ORDER, Cause.RESERVATION):
        return latest if latest.hint else replace(latest, hint=_HINTS.get(latest.cause, ""))
    reserved = np.zeros(len(ctx.cluster), dtype=np.int64)
    for r in reservations:
        if r.nodes is not None and r.gpus is not None and r.job_id != job.id:
            reserved[r.nodes] += r.gpus
    np.minimum(reserved, ctx.cluster.free_gpus, out=reserved)  # the books may have moved since that cycle
    status = fit_status(job, ctx, filters, reserved, [r.job_id for r in reservations if r.job_id != job.id])
    return status if status is not None else BEHIND
