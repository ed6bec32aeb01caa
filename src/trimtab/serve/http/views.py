"""Read-side queries of the serve store, shaped as the API's JSON: jobs with their runs, stats for the dashboard,
and the aggregates behind /metrics. No scheduler state here: these read the store only."""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from trimtab.metrics import JobTimes, job_summary, span_of
from trimtab.series import window_edges
from trimtab.serve.store import JobRow, RunRow, SampleRow


def job_json(row: JobRow, runs: list[RunRow] | None) -> dict[str, Any]:
    """A job as the API shows it; `runs` in (attempt, rank) order, or [] when not loaded."""
    return {
        "id": row.id, "name": row.name, "tenant": row.tenant, "state": row.state,
        "priority_class": row.priority_class or "normal", "priority": row.priority,
        "tasks": row.tasks, "gpus_per_task": row.gpus_per_task, "gpus": row.gpus, "gpu_milli": row.gpu_milli,
        "cpu_milli": row.cpu_milli, "mem_mib": row.mem_mib, "gpu_models": row.gpu_models,
        "node_selector": row.node_selector, "tolerations": row.tolerations, "affinity": row.affinity,
        "labels": row.labels, "command": row.command, "workdir": row.workdir,
        "retries": row.max_retries, "attempts": row.attempts, "failures": row.failures,
        "preemptions": row.preemptions, "submit_s": row.submit_s, "first_start_s": row.first_start_s,
        "end_s": row.end_s, "exit_code": row.exit_code, "reason": row.reason,
        "cancel_requested": row.cancel_requested, "idempotency_key": row.idempotency_key,
        "min_tasks": row.min_tasks, "max_tasks": row.max_tasks, "target_gpu_util": row.target_gpu_util,
        "resizes": row.resizes,
        "runs": [run_json(r) for r in runs or []],
    }


def run_json(run: RunRow) -> dict[str, Any]:
    return {"attempt": run.attempt, "rank": run.rank, "node": run.node, "gpus": run.gpu_ids, "state": run.state,
            "start_s": run.start_s, "end_s": run.end_s, "exit_code": run.exit_code, "outcome": run.outcome,
            "pid": (run.handle or {}).get("pid")}


def runs_by_job(s: Session, job_ids: list[int]) -> dict[int, list[RunRow]]:
    found: dict[int, list[RunRow]] = {j: [] for j in job_ids}
    if job_ids:
        query = select(RunRow).where(RunRow.job_id.in_(job_ids)).order_by(RunRow.job_id, RunRow.attempt,
                                                                           RunRow.rank)
        for run in s.scalars(query):
            found[run.job_id].append(run)
    return found


def stats(s: Session, since_s: float, bucket_s: float) -> dict[str, Any]:
    """Utilisation samples since `since_s` and completions per `bucket_s` bucket (for the dashboard)."""
    samples = s.execute(select(SampleRow.t_s, SampleRow.gpus_allocated, SampleRow.gpus_total, SampleRow.pending,
                               SampleRow.running).where(SampleRow.t_s >= since_s).order_by(SampleRow.t_s)).all()
    ends = s.scalars(select(JobRow.end_s).where(JobRow.state == "completed", JobRow.end_s >= since_s)).all()
    buckets: dict[int, int] = {}
    for end in ends:
        key = int((end - since_s) // bucket_s)
        buckets[key] = buckets.get(key, 0) + 1
    return {
        "since_s": since_s, "bucket_s": bucket_s,
        "samples": [{"t_s": t, "gpus_allocated": a, "gpus_total": g, "pending": p, "running": r}
                    for t, a, g, p, r in samples],
        "completions": [{"t_s": since_s + k * bucket_s, "count": n} for k, n in sorted(buckets.items())],
    }


def summary(s: Session, now_s: float, window_s: float = 3600.0) -> dict[str, float | int | None]:
    """The DESIGN.md summary metrics that a live store can answer, over every job it holds (`metrics.job_summary`,
    as a simulated run counts them, plus the jobs pending and running now). The windowed ones (`throughput_cv`,
    `goodput_cv`) use the windows of `window_s` that lie wholly between the first and the last submission;
    goodput counts the GPU-seconds of attempts that completed, a share as its fraction of a GPU (progress of
    failed or preempted attempts is lost); `backlogged_util` averages the allocation samples taken while some job
    was pending. The interval of measurement runs from the first submission to `now_s` (or the last end, if
    later)."""
    times = [JobTimes(submit, first_start, end, state) for submit, first_start, end, state in
             s.execute(select(JobRow.submit_s, JobRow.first_start_s, JobRow.end_s, JobRow.state)).all()]
    first, _, end = span_of(times)
    edges = window_edges(first, max(end, now_s), window_s)
    out: dict[str, float | int | None] = job_summary(times, edges, _goodput_gpu_s(s, edges))
    del out["avg_slowdown"]  # the store knows no reference durations
    pending, running = (sum(t.state == state for t in times) for state in ("pending", "running"))
    out.update(jobs_pending=pending, jobs_running=running, jobs_lost=int(out["jobs_lost"] or 0) - pending - running)
    outcomes = {outcome: n for outcome, n in s.execute(select(RunRow.outcome, func.count())
                                                         .where(RunRow.rank == 0).group_by(RunRow.outcome))}
    attempts = sum(outcomes.values())
    samples = np.array(s.execute(select(SampleRow.gpus_allocated, SampleRow.gpus_total, SampleRow.pending)).all(),
                       dtype=float).reshape(-1, 3)
    backlogged = samples[samples[:, 2] > 0] if samples.size else samples
    out.update({
        "failure_rate": outcomes.get("failed", 0) / attempts if attempts else None,
        "preemptions": outcomes.get("preempted", 0),
        "gpu_util": float(samples[:, 0].sum() / samples[:, 1].sum()) if samples.size and samples[:, 1].sum()
        else None,
        "backlogged_util": float(backlogged[:, 0].sum() / backlogged[:, 1].sum())
        if backlogged.size and backlogged[:, 1].sum() else None,
    })
    return out


def _goodput_gpu_s(s: Session, edges: np.ndarray) -> np.ndarray:
    """GPU-seconds of completed attempts in each window of `edges`."""
    good = s.execute(select(RunRow.start_s, RunRow.end_s, RunRow.gpu_ids, JobRow.gpu_milli)
                     .join(JobRow, JobRow.id == RunRow.job_id).where(RunRow.outcome == "completed")).all()
    gpu_s = np.zeros(edges.size - 1)
    for start, end, gpu_ids, share_milli in good:
        overlap = np.clip(np.minimum(end, edges[1:]) - np.maximum(start, edges[:-1]), 0, None)
        gpu_s += overlap * (share_milli / 1000 if share_milli else len(gpu_ids))
    return gpu_s
