"""Recorder: consumes what happens to jobs (submit, run start, run end, scheduling cycles) and produces the run's
job records, the per-window time series and the summary metrics, with exactly the names of DESIGN.md."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trimtab.cluster import Allocation, ClusterState
from trimtab.losses import LossLedger
from trimtab.model import Job, JobState, Outcome
from trimtab.policy import Cause, Eviction, Status
from trimtab.series import time_mean, window_edges, window_integrals_of_steps, window_max, window_means
from trimtab.waits import NO_STATUSES, WaitBook

STARVE_MIN_S = 3600.0
STARVE_FACTOR = 10.0

SUMMARY_KEYS = (
    "jobs_submitted", "jobs_completed", "jobs_failed", "jobs_cancelled", "jobs_lost",
    "avg_jct_s", "jct_std_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_wait_s", "p99_wait_s", "avg_slowdown",
    "throughput_cv", "goodput_cv",
    "gpu_util", "cpu_util", "mem_util", "backlogged_util", "node_util_variance",
    "cross_node_ratio", "cross_rack_ratio", "net_util",
    "starvation_rate", "failure_rate", "preemptions", "wasted_gpu_hours", "evicted_gpus_per_needed_gpu",
    "sched_cycle_p50_ms", "sched_cycle_p99_ms", "decisions_per_s",
    "fairness_jain", "goodput_cv_backlogged", "lost_gpu_hours")
TIMING_KEYS = ("sched_cycle_p50_ms", "sched_cycle_p99_ms", "decisions_per_s")
_PREEMPTED, _FAILED = Outcome.PREEMPTED.value, (Outcome.FAILED.value, Outcome.NODE_FAILED.value)  # as runs hold them


@dataclass(slots=True)
class RunRecord:
    """One attempt: [start_s, end_s) on `nodes`; progress was made from `progress_from_s` (after the restart cost)
    and `useful_s` reference seconds of it were kept."""

    start_s: float
    nodes: list[str]
    node_tasks: list[int]
    gpus: int
    racks: int
    progress_from_s: float
    end_s: float = math.nan
    outcome: str = ""
    useful_s: float = 0.0
    slowdown: float = 1.0


@dataclass(slots=True)
class JobRecord:
    job: Job
    state: JobState = JobState.PENDING
    runs: list[RunRecord] = field(default_factory=list)
    end_s: float | None = None

    @property
    def preemptions(self) -> int:
        return [r.outcome for r in self.runs].count(_PREEMPTED)

    @property
    def times(self) -> JobTimes:
        return JobTimes(self.job.submit_s, self.runs[0].start_s if self.runs else None, self.end_s, self.state,
                        self.job.duration_s)


class Recorder:
    """Books every job and attempt, and the allocation over time. The world calls `submitted`, `run_started`,
    `run_ended`, `ended` (terminal state), `cycle` (wall-clock cost of a scheduling cycle that ran) and `evicted`
    (its preemptions); `queue_changed` when the number of pending jobs changes. `result()` gives the JSON-ready
    run record."""

    def __init__(self, cluster: ClusterState, window_s: float = 3600.0) -> None:
        if window_s <= 0:
            raise ValueError("window_s must be positive")
        self.cluster = cluster
        self.window_s = float(window_s)
        self.jobs: dict[str, JobRecord] = {}
        n = len(cluster)
        # per node, lists (a start touches one or two nodes): GPUs allocated since, and their integral up to, a time
        self._node_gpu_s, self._node_alloc, self._node_since = [0.0] * n, [0] * n, [0.0] * n
        self._t: list[float] = []  # change points of the totals below
        self._gpu: list[int] = []
        self._cpu: list[int] = []
        self._mem: list[int] = []
        self._queue: list[int] = []
        self._alloc = [0, 0, 0]
        self._pending = 0
        self._cycle_ms: list[float] = []
        self._decisions = 0
        self._open_runs: dict[str, tuple[RunRecord, Allocation]] = {}
        self.waits = WaitBook()  # time waited per cause, from the statuses the world reports (`waiting`)
        self._sees_waiting = False  # the world reports why jobs wait
        self._evicted_needed_gpus = [0, 0]  # over all preemptions: GPUs evicted, GPUs their preemptors needed
        self.ledger = LossLedger(cluster, self.jobs)  # for the GPU-hours lost by cause: nodes out, quota holds
        # time-averaged link utilisation over [first, end], set by a world that models the network (else 0)
        self.net_util_fn: Callable[[float, float], float] | None = None

    # ------------------------------------------------------------------------------------------------ events

    def submitted(self, job: Job, now_s: float) -> None:
        self.jobs[job.id] = JobRecord(job)
        self.waits.queued(job.id, now_s)
        self._pending += 1
        self._mark(now_s)

    def run_started(self, job: Job, alloc: Allocation, now_s: float, progress_from_s: float,
                    slowdown: float) -> None:
        rec = self.jobs[job.id]
        self.waits.left(job.id, now_s)
        nodes, rack_idx = alloc.nodes.tolist(), self.cluster.rack_idx
        names = [self.cluster.nodes[i].name for i in nodes]
        racks = len({rack_idx.item(i) for i in nodes})
        run = RunRecord(now_s, names, alloc.counts.tolist(), alloc.gpus, racks, progress_from_s,
                        slowdown=slowdown)
        rec.runs.append(run)
        rec.state = JobState.RUNNING
        self._open_runs[job.id] = (run, alloc)
        self._node_change(alloc, now_s, +1)
        self._pending -= 1
        self._mark(now_s)

    def run_ended(self, job_id: str, now_s: float, outcome: Outcome, useful_s: float, requeued: bool) -> None:
        """An attempt ended with `outcome`, keeping `useful_s` reference seconds of progress; `requeued`: the job
        waits again (preempted or to be retried)."""
        run, alloc = self._open_runs.pop(job_id)
        run.end_s = now_s
        run.outcome = str(outcome)
        run.useful_s = max(useful_s, 0.0)
        self._node_change(alloc, now_s, -1)
        rec = self.jobs[job_id]
        if requeued:
            rec.state = JobState.PENDING
            self.waits.queued(job_id, now_s)
            self._pending += 1
        self._mark(now_s)

    def ended(self, job_id: str, now_s: float, state: JobState) -> None:
        """The job reached a terminal state (a pending job cancelled, or its last attempt ended)."""
        rec = self.jobs[job_id]
        if rec.state is JobState.PENDING:
            self.waits.left(job_id, now_s)
            self._pending -= 1
            self._mark(now_s)
        rec.state = state
        rec.end_s = now_s

    def waiting(self, now_s: float, statuses: Mapping[str, Status], stalled: Mapping[str, Status] = NO_STATUSES
                ) -> None:
        """Why jobs wait after a cycle that ran (Decision.waiting and .stalled): booked by cause (WaitBook, where
        a cause holds from the cycle that gives it until another cause or the start) and sampled for the losses."""
        self._sees_waiting = True
        self.waits.seen(now_s, statuses, stalled)
        self.ledger.sample(now_s, statuses)

    def cycle(self, wall_ms: float, decisions: int) -> None:
        self._cycle_ms.append(wall_ms)
        self._decisions += decisions

    def evicted(self, evictions: Sequence[Eviction]) -> None:
        """The preemptions of a cycle (Decision.evictions)."""
        for eviction in evictions:
            self._evicted_needed_gpus[0] += eviction.evicted_gpus
            self._evicted_needed_gpus[1] += eviction.needed_gpus

    def _node_change(self, alloc: Allocation, now_s: float, sign: int) -> None:
        """An allocation taken (sign +1) or given back (-1): the totals and each node's GPU-time integral."""
        self._alloc[0] += sign * alloc.gpus
        self._alloc[1] += sign * alloc.tasks * alloc.task.cpu_milli
        self._alloc[2] += sign * alloc.tasks * alloc.task.mem_mib
        gpu_s, held, since = self._node_gpu_s, self._node_alloc, self._node_since
        gpus = sign * alloc.task.gpus
        for node, count in zip(alloc.nodes.tolist(), alloc.counts.tolist(), strict=True):
            gpu_s[node] += held[node] * (now_s - since[node])
            since[node] = now_s
            held[node] += gpus * count

    def _mark(self, now_s: float) -> None:
        if self._t and self._t[-1] == now_s:
            self._gpu[-1], self._cpu[-1], self._mem[-1] = self._alloc
            self._queue[-1] = self._pending
            return
        self._t.append(now_s)
        self._gpu.append(self._alloc[0])
        self._cpu.append(self._alloc[1])
        self._mem.append(self._alloc[2])
        self._queue.append(self._pending)

    # ------------------------------------------------------------------------------------------------ results

    def result(self, timing: bool = True) -> dict[str, Any]:
        """The run as JSON-ready data: `summary`, `series` and `jobs`. With `timing` False the wall-clock metrics
        are null, so that the same seed gives byte-identical output."""
        jobs = list(self.jobs.values())
        times, rows = [r.times for r in jobs], [_job_json(r) for r in jobs]
        series, windows = self._series(jobs, times)
        out = {"summary": self._summary(jobs, times, rows, series, windows, timing), "series": series, "jobs": rows}
        if self._sees_waiting:  # the time each job waited per cause, up to the end of the run, and their sums
            end_s = span_of(times)[2]
            per_job, out["wait_by_cause_s"] = self.waits.report([r.job.id for r in jobs], end_s)
            for row, waited in zip(rows, per_job, strict=True):
                row["wait_by_cause_s"] = waited
        return out

    def _series(self, jobs: list[JobRecord], times: list[JobTimes]) -> tuple[dict[str, Any], np.ndarray]:
        first, _, end = span_of(times)
        edges = window_edges(first, end, self.window_s)
        n_windows = edges.size - 1
        completed_ends = np.array([r.end_s for r in jobs if r.state is JobState.COMPLETED], dtype=float)
        # numpy's last bin is closed on the right, so a completion at the very end is counted
        completions = np.histogram(completed_ends, bins=edges)[0] if completed_ends.size else np.zeros(n_windows)
        t = np.array(self._t)
        cap = max(self.cluster.total_gpus, 1)
        gpu_alloc = window_means(t, np.array(self._gpu, dtype=float), edges) / cap
        queue_len = window_means(t, np.array(self._queue, dtype=float), edges)
        queue_any = window_max(t, np.array(self._queue, dtype=float), edges) > 0
        # goodput: GPUs x wall time of the progress that was kept, placed where it happened
        gp_t, gp_v = [], []
        for rec in jobs:
            for run in rec.runs:
                if run.useful_s > 0:
                    gp_t += [run.progress_from_s, run.progress_from_s + run.useful_s * run.slowdown]
                    gp_v += [run.gpus, -run.gpus]
        goodput = window_integrals_of_steps(np.array(gp_t), np.array(gp_v, dtype=float), edges)
        series = {
            "window_s": self.window_s,
            "start_s": first,
            "completions": [int(c) for c in completions],
            "goodput_gpu_s": [_r(x) for x in goodput],
            "gpu_alloc": [_r(x) for x in gpu_alloc],
            "queue_len": [_r(x) for x in queue_len],
        }
        return series, np.column_stack([edges[:-1], edges[1:], queue_any])

    def _summary(self, jobs: list[JobRecord], times: list[JobTimes], rows: list[dict[str, Any]],
                 series: dict[str, Any], windows: np.ndarray, timing: bool) -> dict[str, Any]:
        """The summary metrics of `jobs` (with their `times` and JSON `rows`, before the rows get their waits)."""
        first, _, end = span_of(times)
        edges = window_edges(first, end, self.window_s)
        summary = job_summary(times, edges, np.array(series["goodput_gpu_s"], dtype=float))
        summary.update(self._utilisation(first, end, windows, np.array(series["gpu_alloc"], dtype=float)))
        summary.update(_placement(jobs))
        summary["net_util"] = _r(self.net_util_fn(first, end)) if self.net_util_fn else 0.0
        summary.update(_reliability(jobs))
        evicted, needed = self._evicted_needed_gpus
        summary["evicted_gpus_per_needed_gpu"] = _r(evicted / needed) if needed else None
        summary.update(self._timing(timing))
        summary["fairness_jain"] = _jain(jobs)
        summary.update(self.ledger.summary(series, windows, rows))
        assert tuple(summary) == SUMMARY_KEYS
        quota_blocked_s = {r.job.id: self.waits.closed_s(r.job.id, Cause.QUOTA) for r in jobs}
        tenants = _tenants(jobs, quota_blocked_s if self._sees_waiting else None)
        if len(tenants) > 1:
            summary["tenants"] = tenants
        return summary

    def _utilisation(self, first: float, end: float, windows: np.ndarray, gpu_alloc: np.ndarray) -> dict[str, Any]:
        """gpu_util, cpu_util, mem_util (time-averaged over the run), backlogged_util, node_util_variance."""
        span = max(end - first, 0.0)
        cluster = self.cluster
        t = np.array(self._t)
        # per-node time-averaged allocation, closed at the end of the run
        node_gpu_s = np.array(self._node_gpu_s) + np.array(self._node_alloc) * (end - np.array(self._node_since))
        with np.errstate(invalid="ignore", divide="ignore"):
            node_util = np.where(cluster.cap_gpus > 0, node_gpu_s / (cluster.cap_gpus * span), 0.0) \
                if span > 0 else np.zeros(len(cluster))
        backlogged = windows[:, 2] > 0
        return {
            "gpu_util": _r(time_mean(t, np.array(self._gpu, dtype=float), first, end) / max(cluster.total_gpus, 1)),
            "cpu_util": _r(time_mean(t, np.array(self._cpu, dtype=float), first, end)
                           / max(int(cluster.cap_cpu_milli.sum()), 1)),
            "mem_util": _r(time_mean(t, np.array(self._mem, dtype=float), first, end)
                           / max(int(cluster.cap_mem_mib.sum()), 1)),
            "backlogged_util": _r(gpu_alloc[backlogged].mean()) if backlogged.any() else None,
            "node_util_variance": _r(float(np.var(node_util))),
        }

    def _timing(self, timing: bool) -> dict[str, Any]:
        """The wall-clock cost of the scheduler (null without `timing`)."""
        cyc = np.array(self._cycle_ms)
        return {
            "sched_cycle_p50_ms": _pct(cyc, 50, 4) if timing else None,
            "sched_cycle_p99_ms": _pct(cyc, 99, 4) if timing else None,
            "decisions_per_s": (_r(self._decisions / (cyc.sum() / 1000.0)) if cyc.sum() > 0 else None)
            if timing else None,
        }


# ---------------------------------------------------------------------------------------------------- summary


@dataclass(frozen=True, slots=True)
class JobTimes:
    """What the job-level summary needs of one job, from a simulated run's records or a live store's rows alike:
    when it was submitted, first started (None: never) and ended (None: not yet), its state (a JobState value) and
    its reference duration (None: unknown)."""

    submit_s: float
    first_start_s: float | None
    end_s: float | None
    state: str
    duration_s: float | None = None


def span_of(jobs: Sequence[JobTimes]) -> tuple[float, float, float]:
    """The interval of measurement: (first submission, last submission, last completion or submission)."""
    submits = [j.submit_s for j in jobs]
    ends = [j.end_s for j in jobs if j.end_s is not None]
    first = min(submits) if submits else 0.0
    last_submit = max(submits) if submits else 0.0
    last_end = max(ends, default=last_submit)
    return first, last_submit, max(last_end, last_submit)


def job_summary(jobs: Sequence[JobTimes], edges: np.ndarray, goodput_gpu_s: np.ndarray) -> dict[str, Any]:
    """The job-level summary metrics of DESIGN.md, in SUMMARY_KEYS order: jobs by state (lost: not in a terminal
    state), JCT of completed jobs, wait until the first start, slowdown (JCT / reference duration), and the CVs
    of completions and of `goodput_gpu_s` (GPU-seconds of useful progress per window of `edges`) over the windows
    that lie wholly between the first and the last submission."""
    _, last_submit, _ = span_of(jobs)
    states = [j.state for j in jobs]
    done = [j for j in jobs if j.state == JobState.COMPLETED]
    ends = np.array([j.end_s for j in done], dtype=float)
    jct = ends - np.array([j.submit_s for j in done], dtype=float)
    waits = np.array([j.first_start_s - j.submit_s for j in jobs if j.first_start_s is not None], dtype=float)
    slow = np.array([jct[k] / j.duration_s for k, j in enumerate(done) if j.duration_s], dtype=float)
    whole = edges[1:] <= last_submit
    completions = np.histogram(ends, bins=edges)[0].astype(float) if ends.size else np.zeros(edges.size - 1)
    return {
        "jobs_submitted": len(jobs),
        "jobs_completed": states.count(JobState.COMPLETED),
        "jobs_failed": states.count(JobState.FAILED),
        "jobs_cancelled": states.count(JobState.CANCELLED),
        "jobs_lost": sum(s not in _TERMINAL for s in states),
        "avg_jct_s": _r(jct.mean()) if jct.size else None,
        "jct_std_s": _r(jct.std()) if jct.size else None,
        "p50_jct_s": _pct(jct, 50),
        "p95_jct_s": _pct(jct, 95),
        "p99_jct_s": _pct(jct, 99),
        "avg_wait_s": _r(waits.mean()) if waits.size else None,
        "p99_wait_s": _pct(waits, 99),
        "avg_slowdown": _r(slow.mean()) if slow.size else None,
        "throughput_cv": _cv(completions[whole]),
        "goodput_cv": _cv(goodput_gpu_s[whole]),
    }


_TERMINAL = frozenset(s for s in JobState if s.terminal)


def _placement(jobs: list[JobRecord]) -> dict[str, Any]:
    """Shares of gangs' GPU-time spread over several nodes and over several racks."""
    gang_gpu_s = cross_node = cross_rack = 0.0
    for rec in jobs:
        if rec.job.tasks > 1:
            for run in rec.runs:
                gpu_s = run.gpus * (run.end_s - run.start_s)
                gang_gpu_s += gpu_s
                if len(run.nodes) > 1:
                    cross_node += gpu_s
                if run.racks > 1:
                    cross_rack += gpu_s
    return {"cross_node_ratio": _r(cross_node / gang_gpu_s) if gang_gpu_s else 0.0,
            "cross_rack_ratio": _r(cross_rack / gang_gpu_s) if gang_gpu_s else 0.0}


def _reliability(jobs: list[JobRecord]) -> dict[str, Any]:
    """starvation_rate, failure_rate, preemptions and wasted_gpu_hours (GPU-time of progress that was lost)."""
    runs = [run for r in jobs for run in r.runs]
    failed_attempts = sum(run.outcome in _FAILED for run in runs)
    wasted_gpu_s = 0.0
    for run in runs:
        gpu_s = run.gpus * (run.end_s - run.start_s)
        wasted_gpu_s += max(gpu_s - run.gpus * run.useful_s * run.slowdown, 0.0)
    starved = sum(
        1 for r in jobs if r.runs and (r.runs[0].start_s - r.job.submit_s)
        > max(STARVE_MIN_S, STARVE_FACTOR * (r.job.duration_s or 0.0))
    )
    started = sum(1 for r in jobs if r.runs)
    return {
        "starvation_rate": _r(starved / started) if started else 0.0,
        "failure_rate": _r(failed_attempts / len(runs)) if runs else 0.0,
        "preemptions": [run.outcome for run in runs].count(_PREEMPTED),
        "wasted_gpu_hours": _r(wasted_gpu_s / 3600.0),
    }


# ---------------------------------------------------------------------------------------------------- helpers


def _r(x: float, digits: int = 6) -> float:
    return float(round(float(x), digits))


def _pct(a: np.ndarray, q: float, digits: int = 6) -> float | None:
    return _r(float(np.percentile(a, q)), digits) if a.size else None


def _cv(a: np.ndarray) -> float | None:
    if a.size < 2 or a.mean() == 0:
        return None
    return _r(float(a.std() / a.mean()))


def _jain(jobs: list[JobRecord]) -> float | None:
    """Jain's index of tenants' GPU-time over their entitlement. Entitlement: the max-min fair share of the GPU-time
    used, capped by each tenant's demand (GPU-time its jobs asked for), so a tenant that got all it asked is at 1."""
    used: dict[str, float] = {}
    demand: dict[str, float] = {}
    for rec in jobs:
        tenant = rec.job.tenant
        used[tenant] = used.get(tenant, 0.0) + sum(r.gpus * (r.end_s - r.start_s) for r in rec.runs)
        demand[tenant] = demand.get(tenant, 0.0) + rec.job.gpus * (rec.job.duration_s or 0.0)
    if len(used) < 2:
        return None
    tenants = sorted(used)
    ent = _water_fill(sum(used.values()), [demand[t] or used[t] for t in tenants])
    x = np.array([used[t] / e if e > 0 else 1.0 for t, e in zip(tenants, ent, strict=True)])
    if not (x > 0).any():
        return None
    return _r(float(x.sum() ** 2 / (x.size * (x**2).sum())))


def _tenants(jobs: list[JobRecord], quota_blocked_s: Mapping[str, float] | None) -> dict[str, dict[str, Any]]:
    """Per tenant (namespace): its share of all GPU-time allocated, average JCT and wait, evictions, jobs, and (when
    the world reports why jobs wait) the job-seconds its jobs were held by quota."""
    gpu_s: dict[str, float] = {}
    jct: dict[str, list[float]] = {}
    wait: dict[str, list[float]] = {}
    evictions: dict[str, int] = {}
    count: dict[str, int] = {}
    for rec in jobs:
        t = rec.job.tenant
        count[t] = count.get(t, 0) + 1
        gpu_s[t] = gpu_s.get(t, 0.0) + sum(r.gpus * (r.end_s - r.start_s) for r in rec.runs if r.end_s == r.end_s)
        evictions[t] = evictions.get(t, 0) + rec.preemptions
        if rec.runs:
            wait.setdefault(t, []).append(rec.runs[0].start_s - rec.job.submit_s)
        if rec.state is JobState.COMPLETED and rec.end_s is not None:
            jct.setdefault(t, []).append(rec.end_s - rec.job.submit_s)
    total = sum(gpu_s.values())
    out: dict[str, dict[str, Any]] = {
        t: {"jobs": count[t], "gpu_share": _r(gpu_s[t] / total) if total else 0.0,
            "avg_jct_s": _r(float(np.mean(jct[t]))) if jct.get(t) else None,
            "avg_wait_s": _r(float(np.mean(wait[t]))) if wait.get(t) else None,
            "evictions": evictions[t]} for t in sorted(count)}
    if quota_blocked_s is not None:
        for t in out:
            out[t]["quota_blocked_s"] = 0.0
        for rec in jobs:
            out[rec.job.tenant]["quota_blocked_s"] += quota_blocked_s.get(rec.job.id, 0.0)
        for t in out:
            out[t]["quota_blocked_s"] = _r(out[t]["quota_blocked_s"])
    return out


def _water_fill(total: float, demands: list[float]) -> list[float]:
    """Max-min fair split of `total` among claimants capped by their demands."""
    share = [0.0] * len(demands)
    left = total
    open_ = sorted(range(len(demands)), key=lambda i: demands[i])
    while open_ and left > 1e-9:
        even = left / len(open_)
        i = open_[0]
        if demands[i] <= even:
            share[i] = demands[i]
            left -= demands[i]
            open_.pop(0)
        else:
            for j in open_:
                share[j] = even
            left = 0.0
            open_ = []
    return share


def _job_json(rec: JobRecord) -> dict[str, Any]:
    job = rec.job
    return {
        "id": job.id,
        "tenant": job.tenant,
        "priority": job.priority,
        "gpus": job.gpus,
        "tasks": job.tasks,
        "duration": job.duration_s,
        "submit": job.submit_s,
        "state": rec.state.value,
        "attempts": len(rec.runs),
        "preemptions": rec.preemptions,
        "end": rec.end_s,
        "runs": [
            {"start": run.start_s, "end": run.end_s, "nodes": run.nodes, "node_tasks": run.node_tasks,
             "outcome": run.outcome,
             "useful_s": _r(run.useful_s), "progress_from": run.progress_from_s, "slowdown": run.slowdown}
            for run in rec.runs
        ],
    }
