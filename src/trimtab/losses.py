"""Where the GPU-hours go: from a run's per-job records (the run JSON's `jobs`, a live store's history alike), for
every window, the GPU-seconds of useful work and those lost, by cause (docs/metrics.md defines each exactly).

Allocated GPU-time splits by attempt: useful progress, its slowdown, the restart before progress and the progress
lost at a preemption or failure. Idle GPU-time splits by what waits at that moment: a job that would fit on the
free GPUs of some nodes but waits (held by the policy, or by its quota), a job that fits only in the free total
(fragmentation). Load is the demand beyond the whole cluster had every job started on arrival: the
same under every policy, so never the scheduler's doing."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trimtab.cluster import ClusterState
from trimtab.policy import Cause, Status
from trimtab.series import window_integrals_of_steps

CAUSES = ("fragmentation", "blocking", "quota", "preemption", "failure", "slowdown", "load")
NOT_THE_SCHEDULERS = frozenset({"load"})  # demand over the cluster: reported, never blamed on the policy
Changes = Sequence[Sequence[Any]]  # (time, node or tenant, True/False from then): the ledger's sampled changes
_CHUNK_SEGMENTS = 8192  # segments of the idle timeline held in one dense matrix (memory: chunk x (nodes + shapes))


@dataclass(frozen=True, slots=True)
class Losses:
    """Per window of `edges`: GPU-seconds of useful work (progress at the reference speed) and lost by cause."""

    edges: np.ndarray
    useful_gpu_s: np.ndarray
    lost_gpu_s: dict[str, np.ndarray]

    def lost_gpu_hours(self) -> dict[str, float]:
        """Totals over the run, in GPU-hours, every cause of CAUSES (0 where none)."""
        return {cause: round(float(self.lost_gpu_s[cause].sum()) / 3600.0, 6) for cause in CAUSES}


class LossLedger:
    """The Recorder's seam: samples which nodes are out of service (down or drained) after each cycle, which the
    job records do not say, and at the end of a run adds the per-window losses to its series and gives the
    summary's goodput_cv_backlogged and lost_gpu_hours."""

    def __init__(self, cluster: ClusterState, jobs: Mapping[str, Any]) -> None:
        self.cluster = cluster
        self._jobs = jobs  # the Recorder's records by job id (each with its .job)
        self._healthy = cluster.healthy.copy()
        self._healthy_bytes = self._healthy.tobytes()  # compared after every cycle: cheaper than array_equal
        self._held: set[str] = set()
        self.out_of_service: list[tuple[float, str, bool]] = []  # (time, node, in service from then)
        self.quota_held: list[tuple[float, str, bool]] = []  # (time, tenant, held by a quota from then)

    def sample(self, now_s: float, statuses: Mapping[str, Status]) -> None:
        """After a cycle that ran (the world has one run after every failure and repair; drains change in one),
        with why jobs wait: nodes out of service, and the tenants a quota holds (a cycle reports the first
        waiting job of each request shape, so one job of a held tenant says it for all)."""
        healthy = self.cluster.healthy
        if healthy.tobytes() != self._healthy_bytes:
            for node in np.flatnonzero(healthy != self._healthy):
                self.out_of_service.append((now_s, self.cluster.nodes[int(node)].name, bool(healthy[node])))
            self._healthy = healthy.copy()
            self._healthy_bytes = self._healthy.tobytes()
        held = {self._jobs[job_id].job.tenant for job_id, s in statuses.items() if s.cause is Cause.QUOTA}
        if held != self._held:
            self.quota_held += [(now_s, tenant, tenant in held) for tenant in sorted(held ^ self._held)]
            self._held = held

    def summary(self, series: dict[str, Any], windows: np.ndarray, jobs: Sequence[Mapping[str, Any]]
                ) -> dict[str, Any]:
        """Adds `useful_gpu_s`, `lost_gpu_s` (cause -> per window), `out_of_service` and `quota_held` to
        the run's `series` (windows of window_s from start_s, as many as goodput_gpu_s has); returns the CV of
        goodput over the windows in which jobs waited (`windows[:, 2]` > 0, as the Recorder marks them; the same
        statistic as goodput_cv) and the lost GPU-hours by cause."""
        goodput = np.array(series["goodput_gpu_s"], dtype=float)
        edges = series["start_s"] + series["window_s"] * np.arange(goodput.size + 1)
        node_gpus = {node.name: node.capacity.gpus for node in self.cluster.nodes}
        losses = gpu_losses(jobs, node_gpus, edges, self.out_of_service, self.quota_held)
        series["useful_gpu_s"] = [round(float(x), 6) for x in losses.useful_gpu_s]
        series["lost_gpu_s"] = {c: [round(float(x), 6) for x in gpu_s] for c, gpu_s in losses.lost_gpu_s.items()}
        series["out_of_service"] = [list(change) for change in self.out_of_service]
        series["quota_held"] = [list(change) for change in self.quota_held]
        busy = goodput[windows[:, 2] > 0]
        cv = round(float(busy.std() / busy.mean()), 6) if busy.size >= 2 and busy.mean() > 0 else None
        return {"goodput_cv_backlogged": cv, "lost_gpu_hours": losses.lost_gpu_hours()}


def gpu_losses(jobs: Sequence[Mapping[str, Any]], node_gpus: Mapping[str, int], edges: np.ndarray,
               out_of_service: Changes = (), quota_held: Changes = ()) -> Losses:
    """The losses of a run. `jobs`: records in the run JSON's shape (id, gpus, tasks, submit, end, runs with start,
    end, nodes, node_tasks, outcome, useful_s, progress_from, slowdown); `node_gpus`: each node's GPUs by name;
    `edges`: the windows; `out_of_service`: (time, node, in service from then) changes, whose nodes hold no idle
    GPU while out; `quota_held`: (time, tenant, held from then) changes, whose tenants' waiting jobs wait for
    their quota while held. A run still open ends at the last edge."""
    horizon_s = float(edges[-1])
    steps: dict[str, tuple[list[float], list[float]]] = {c: ([], []) for c in ("useful", *CAUSES)}
    for job in jobs:
        _attempt_steps(job, horizon_s, steps)
    lost = {c: window_integrals_of_steps(np.array(t), np.array(v, dtype=float), edges) for c, (t, v) in
            steps.items() if c != "useful"}
    for cause, gpu_s in _idle_losses(jobs, node_gpus, edges, out_of_service, quota_held).items():
        lost[cause] = lost[cause] + gpu_s
    lost["load"] = _overload(jobs, sum(node_gpus.values()), edges)
    t, v = steps["useful"]
    return Losses(edges, window_integrals_of_steps(np.array(t), np.array(v, dtype=float), edges), lost)


def _add(steps: dict[str, tuple[list[float], list[float]]], cause: str, start_s: float, end_s: float,
         gpus: float) -> None:
    if end_s > start_s and gpus:
        times, values = steps[cause]
        times += [start_s, end_s]
        values += [gpus, -gpus]


def _attempt_steps(job: Mapping[str, Any], horizon_s: float,
                   steps: dict[str, tuple[list[float], list[float]]]) -> None:
    """Each attempt's GPU-time, placed where it happened: the start-up before progress (after a preemption or
    failure: that cause's restart; on a first attempt: loading, a slowdown), then the progress kept (useful at the
    reference speed, the rest slowdown), then the tail whose progress was lost (preemption or failure). An attempt
    holds its own GPUs (an elastic job's differ from its request); its progress is worth the requested GPUs at
    the reference speed, so useful work runs at requested GPUs / slowdown, at most the GPUs held."""
    asked = float(job["gpus"])
    previous = ""
    for run in job["runs"]:
        gpus = run_gpus(job, run)
        start = float(run["start"])
        end = _end(run["end"], horizon_s)
        progress_from = min(max(float(run["progress_from"]), start), end)
        _add(steps, _cause_of(previous) if previous else "slowdown", start, progress_from, gpus)
        slowdown = float(run["slowdown"])
        progress_end = min(progress_from + float(run["useful_s"]) * slowdown, end)
        useful_rate = min(asked / slowdown, gpus) if slowdown > 0 else gpus
        _add(steps, "useful", progress_from, progress_end, useful_rate)
        _add(steps, "slowdown", progress_from, progress_end, gpus - useful_rate)
        if run["outcome"] not in ("", "completed", "cancelled"):
            _add(steps, _cause_of(run["outcome"]), progress_end, end, gpus)
        previous = run["outcome"]


def run_gpus(job: Mapping[str, Any], run: Mapping[str, Any]) -> float:
    """The GPUs one attempt held: the job's GPUs per task times the tasks the attempt ran (`node_tasks`)."""
    return job["gpus"] / job["tasks"] * sum(run.get("node_tasks") or [job["tasks"]])


def _overload(jobs: Sequence[Mapping[str, Any]], cluster_gpus: int, edges: np.ndarray) -> np.ndarray:
    """Demand over the cluster, whatever the scheduler: the GPUs that jobs would hold if each ran from its
    submission for its reference duration, beyond the cluster's GPUs, integrated per window."""
    known = [j for j in jobs if j.get("duration") is not None and j["gpus"] > 0]
    if not known:
        return np.zeros(edges.size - 1)
    submit = np.array([float(j["submit"]) for j in known])
    t = np.concatenate([submit, submit + np.array([float(j["duration"]) for j in known])])
    gpus = np.array([float(j["gpus"]) for j in known])
    order = np.argsort(t, kind="stable")
    times, level = t[order], np.cumsum(np.concatenate([gpus, -gpus])[order])
    excess = np.maximum(level - cluster_gpus, 0.0)
    return window_integrals_of_steps(times, np.diff(np.concatenate([[0.0], excess])), edges)


def _cause_of(outcome: str) -> str:
    """A stop the scheduler chose (preempted, or resized: an elastic job's restart) is preemption; the rest failure."""
    return "preemption" if outcome in ("preempted", "resized") else "failure"


def _end(end: Any, horizon_s: float) -> float:
    return horizon_s if end is None or (isinstance(end, float) and math.isnan(end)) else float(end)


# ------------------------------------------------------------------------------------------------ idle GPU-time


@dataclass(frozen=True, slots=True)
class _Timeline:
    """The change points of the idle accounting: at each, increments of nodes' allocated GPUs (columns 0..N-1),
    of waiting jobs per shape (the next S columns; a shape is (GPUs per task, tasks, tenant group: the index of
    its tenant among those a quota ever held, else -1)) and of each such tenant's held state (1: held)."""

    times: np.ndarray  # sorted change points; segment k is [times[k], times[k+1])
    seg: np.ndarray  # per increment: its segment
    col: np.ndarray
    delta: np.ndarray
    shapes: list[tuple[int, int, int]]


def _timeline(jobs: Sequence[Mapping[str, Any]], node_index: Mapping[str, int], node_gpus: Mapping[str, int],
              horizon_s: float, out_of_service: Changes, quota_held: Changes) -> _Timeline:
    groups = {tenant: g for g, tenant in enumerate(dict.fromkeys(tenant for _, tenant, _ in quota_held))}
    shapes: dict[tuple[int, int, int], int] = {}
    t: list[float] = []
    col: list[int] = []
    delta: list[float] = []
    n = len(node_index)
    for job in jobs:
        tasks, gpus = int(job["tasks"]), int(job["gpus"])
        if gpus <= 0:
            continue  # shares and CPU-only jobs hold no whole GPU
        per_task = gpus // tasks
        column = n + shapes.setdefault((per_task, tasks, groups.get(job["tenant"], -1)), len(shapes))
        for a, b in _waits(job, horizon_s):
            t += [a, b]
            col += [column, column]
            delta += [1.0, -1.0]
        for run in job["runs"]:
            end = _end(run["end"], horizon_s)
            for name, count in zip(run["nodes"], run["node_tasks"], strict=True):
                t += [float(run["start"]), end]
                col += [node_index[name]] * 2
                delta += [count * per_task, -count * per_task]
    for time_s, name, in_service in out_of_service:  # a node out of service: all its GPUs taken, none idle
        t.append(float(time_s))
        col.append(node_index[name])
        delta.append(-node_gpus[name] if in_service else node_gpus[name])
    for time_s, tenant, held in quota_held:
        t.append(float(time_s))
        col.append(n + len(shapes) + groups[tenant])
        delta.append(1.0 if held else -1.0)
    times = np.unique(np.array(t, dtype=float)) if t else np.zeros(0)
    seg = np.searchsorted(times, np.array(t, dtype=float))
    return _Timeline(times, seg, np.array(col, dtype=np.int64), np.array(delta, dtype=float), list(shapes))


def _waits(job: Mapping[str, Any], horizon_s: float) -> list[tuple[float, float]]:
    """When the job waited: from submission to its first start, between attempts, and from its last attempt
    (if it was queued again) or its submission (if it never ran) to its end or the horizon."""
    runs = job["runs"]
    end = _end(job.get("end"), horizon_s)
    if not runs:
        return [(float(job["submit"]), end)] if end > float(job["submit"]) else []
    out = [(float(job["submit"]), float(runs[0]["start"]))]
    for before, after in itertools.pairwise(runs):
        out.append((_end(before["end"], horizon_s), float(after["start"])))
    last_end = _end(runs[-1]["end"], horizon_s)
    if runs[-1]["outcome"] not in ("completed", "") and last_end < end:
        out.append((last_end, end))
    return [(a, b) for a, b in out if b > a]


def _idle_losses(jobs: Sequence[Mapping[str, Any]], node_gpus: Mapping[str, int], edges: np.ndarray,
                 out_of_service: Changes, quota_held: Changes) -> dict[str, np.ndarray]:
    """Idle GPU-time lost, per window: at every moment the idle GPUs go first to the waiting jobs that would fit
    on some nodes' free GPUs (quota-held ones: quota, the others: blocking), then to those that fit only in the
    free total (fragmentation), each at most its GPUs."""
    names = list(node_gpus)
    cap = np.array([node_gpus[name] for name in names], dtype=float)
    line = _timeline(jobs, {name: i for i, name in enumerate(names)}, node_gpus, float(edges[-1]), out_of_service,
                     quota_held)
    out = {c: np.zeros(edges.size - 1) for c in ("blocking", "quota", "fragmentation")}
    if line.times.size < 2:
        return out
    n = len(names)
    per_task = np.array([s[0] for s in line.shapes], dtype=float)
    tasks = np.array([s[1] for s in line.shapes], dtype=float)
    group = np.array([s[2] for s in line.shapes], dtype=np.int64)
    shapes = len(line.shapes)
    level = np.zeros(n + shapes + (int(group.max()) + 1 if shapes else 0))
    order = np.argsort(line.seg, kind="stable")
    seg, col, delta = line.seg[order], line.col[order], line.delta[order]
    segments = line.times.size - 1
    per_segment: dict[str, list[np.ndarray]] = {c: [] for c in out}
    for first in range(0, segments, _CHUNK_SEGMENTS):
        last = min(first + _CHUNK_SEGMENTS, segments)
        lo, hi = np.searchsorted(seg, [first, last])
        dense = np.zeros((last - first, level.size))
        np.add.at(dense, (seg[lo:hi] - first, col[lo:hi]), delta[lo:hi])
        state = level + np.cumsum(dense, axis=0)
        level = state[-1]
        held = (state[:, n + shapes + np.maximum(group, 0)] > 0.5) & (group >= 0) if level.size > n + shapes \
            else np.zeros((last - first, shapes), dtype=bool)
        for cause, gpus in _split_idle(cap - state[:, :n], state[:, n:n + shapes], per_task, tasks, held).items():
            per_segment[cause].append(gpus)
    for cause in out:
        rate = np.concatenate(per_segment[cause])
        out[cause] = window_integrals_of_steps(line.times, np.diff(np.concatenate([[0.0], rate, [0.0]])),
                                               edges) if rate.size else out[cause]
    return out


def _split_idle(free: np.ndarray, waiting: np.ndarray, per_task: np.ndarray, tasks: np.ndarray,
                held: np.ndarray) -> dict[str, np.ndarray]:
    """GPUs lost per segment by cause, given each segment's free GPUs per node and waiting jobs per shape."""
    free = np.maximum(free, 0.0)
    idle = free.sum(axis=1)
    gpus = per_task * tasks
    demand = waiting * gpus  # waiting GPUs per segment and shape
    sizes, size_of_shape = np.unique(per_task, return_inverse=True)
    slots = np.column_stack([np.floor(free / g).sum(axis=1) for g in sizes])[:, size_of_shape]
    on_nodes = slots >= tasks
    in_total = gpus[None, :] <= idle[:, None]
    blocking = np.minimum((demand * (on_nodes & ~held)).sum(axis=1), idle)
    quota = np.minimum((demand * (in_total & held)).sum(axis=1), idle - blocking)
    fragmentation = np.minimum((demand * (in_total & ~on_nodes & ~held)).sum(axis=1), idle - blocking - quota)
    return {"blocking": blocking, "quota": quota, "fragmentation": fragmentation}
