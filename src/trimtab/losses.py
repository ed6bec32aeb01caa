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
from trimtab.series import window_integrals_of_steps

CAUSES = ("fragmentation", "blocking", "quota", "preemption", "failure", "slowdown", "load")
NOT_THE_SCHEDULERS = frozenset({"load"})  # demand over the cluster: reported, never blamed on the policy
Changes = Sequence[Sequence[Any]]  # (time, node name, in service from then): nodes going out of and back in service
_CHUNK_SEGMENTS = 8192  # segments of the idle timeline held in one dense matrix (memory: chunk x (nodes + shapes))


@dataclass(frozen=True, slots=True)
class Losses:
    """Per window of `edges`: GPU-seconds of useful work (progress at the reference speed) and lost by cause."""

    edges: np.ndarray
    useful_gpu_s: np.ndarray
    lost_gpu_s: dict[str, np.ndarray]

    def lost_gpu_hours(self) -> dict[str, float]:
        """Totals over the run, in GPU-hours, every cause of CAUSES (0 where none)."""
        return {cause: round(float(self.lost_gpu_s[cause].sum()) / 3600.0, 4) for cause in CAUSES}


class LossLedger:
    """The Recorder's seam: samples which nodes are out of service (down or drained) after each cycle, which the
    job records do not say, and at the end of a run adds the per-window losses to its series and gives the
    summary's goodput_cv_backlogged and lost_gpu_hours."""

    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster
        self._healthy = cluster.healthy.copy()
        self.changes: list[tuple[float, str, bool]] = []  # (time, node, in service from then)

    def sample(self, now_s: float) -> None:
        """After a cycle that ran (the world calls one after every failure and repair; drains change in one)."""
        healthy = self.cluster.healthy
        if not np.array_equal(healthy, self._healthy):
            for node in np.flatnonzero(healthy != self._healthy):
                self.changes.append((now_s, self.cluster.nodes[int(node)].name, bool(healthy[node])))
            self._healthy = healthy.copy()

    def summary(self, series: dict[str, Any], windows: np.ndarray, jobs: Sequence[Mapping[str, Any]],
                quota_wait_s: Mapping[str, float]) -> dict[str, Any]:
        """Adds `useful_gpu_s`, `lost_gpu_s` (cause -> per window) and `out_of_service` (the sampled changes) to
        the run's `series` (windows of window_s from start_s, as many as goodput_gpu_s has); returns the CV of
        goodput over the windows in which jobs waited (`windows[:, 2]` > 0, as the Recorder marks them; the same
        statistic as goodput_cv) and the lost GPU-hours by cause."""
        goodput = np.array(series["goodput_gpu_s"], dtype=float)
        edges = series["start_s"] + series["window_s"] * np.arange(goodput.size + 1)
        node_gpus = {node.name: node.capacity.gpus for node in self.cluster.nodes}
        losses = gpu_losses(jobs, node_gpus, edges, quota_wait_s, self.changes)
        series["useful_gpu_s"] = [round(float(x), 6) for x in losses.useful_gpu_s]
        series["lost_gpu_s"] = {c: [round(float(x), 6) for x in gpu_s] for c, gpu_s in losses.lost_gpu_s.items()}
        series["out_of_service"] = [list(change) for change in self.changes]
        busy = goodput[windows[:, 2] > 0]
        cv = round(float(busy.std() / busy.mean()), 6) if busy.size >= 2 and busy.mean() > 0 else None
        return {"goodput_cv_backlogged": cv, "lost_gpu_hours": losses.lost_gpu_hours()}


def gpu_losses(jobs: Sequence[Mapping[str, Any]], node_gpus: Mapping[str, int], edges: np.ndarray,
               quota_wait_s: Mapping[str, float] | None = None,
               out_of_service: Changes = ()) -> Losses:
    """The losses of a run. `jobs`: records in the run JSON's shape (id, gpus, tasks, submit, end, runs with start,
    end, nodes, node_tasks, outcome, useful_s, progress_from, slowdown); `node_gpus`: each node's GPUs by name;
    `edges`: the windows; `quota_wait_s`: seconds each job waited for its quota (job id -> s; its share of the
    job's waiting time is counted as quota, the rest as the policy's); `out_of_service`: (time, node, in service
    from then) changes, whose nodes hold no idle GPU while out. A run still open ends at the last edge."""
    horizon_s = float(edges[-1])
    steps: dict[str, tuple[list[float], list[float]]] = {c: ([], []) for c in ("useful", *CAUSES)}
    for job in jobs:
        _attempt_steps(job, horizon_s, steps)
    lost = {c: window_integrals_of_steps(np.array(t), np.array(v, dtype=float), edges) for c, (t, v) in
            steps.items() if c != "useful"}
    for cause, gpu_s in _idle_losses(jobs, node_gpus, edges, quota_wait_s or {}, out_of_service).items():
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
    reference speed, the rest slowdown), then the tail whose progress was lost (preemption or failure)."""
    gpus = float(job["gpus"])
    previous = ""
    for run in job["runs"]:
        start = float(run["start"])
        end = _end(run["end"], horizon_s)
        progress_from = min(max(float(run["progress_from"]), start), end)
        _add(steps, _cause_of(previous) if previous else "slowdown", start, progress_from, gpus)
        slowdown = float(run["slowdown"])
        progress_end = min(progress_from + float(run["useful_s"]) * slowdown, end)
        useful_rate = gpus / max(slowdown, 1.0)
        _add(steps, "useful", progress_from, progress_end, useful_rate)
        _add(steps, "slowdown", progress_from, progress_end, gpus - useful_rate)
        if run["outcome"] not in ("", "completed", "cancelled"):
            _add(steps, _cause_of(run["outcome"]), progress_end, end, gpus)
        previous = run["outcome"]


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
    return "preemption" if outcome == "preempted" else "failure"


def _end(end: Any, horizon_s: float) -> float:
    return horizon_s if end is None or (isinstance(end, float) and math.isnan(end)) else float(end)


# ------------------------------------------------------------------------------------------------ idle GPU-time


@dataclass(frozen=True, slots=True)
class _Timeline:
    """The change points of the idle accounting: at each, increments of nodes' allocated GPUs (columns 0..N-1)
    and of waiting jobs per shape (columns N..); a shape is (GPUs per task, tasks, held by quota)."""

    times: np.ndarray  # sorted change points; segment k is [times[k], times[k+1])
    seg: np.ndarray  # per increment: its segment
    col: np.ndarray
    delta: np.ndarray
    shapes: list[tuple[int, int, bool]]


def _timeline(jobs: Sequence[Mapping[str, Any]], node_index: Mapping[str, int], node_gpus: Mapping[str, int],
              horizon_s: float, quota_wait_s: Mapping[str, float], out_of_service: Changes) -> _Timeline:
    shapes: dict[tuple[int, int, bool], int] = {}
    t: list[float] = []
    col: list[int] = []
    delta: list[float] = []
    n = len(node_index)
    for job in jobs:
        tasks, gpus = int(job["tasks"]), int(job["gpus"])
        if gpus <= 0:
            continue  # shares and CPU-only jobs hold no whole GPU
        per_task = gpus // tasks
        waits = _waits(job, horizon_s)
        waited_s = sum(b - a for a, b in waits)
        quota_share = min(quota_wait_s.get(job["id"], 0.0) / waited_s, 1.0) if waited_s > 0 else 0.0
        for held, weight in ((True, quota_share), (False, 1.0 - quota_share)):
            if weight <= 0:
                continue
            column = n + shapes.setdefault((per_task, tasks, held), len(shapes))
            for a, b in waits:
                t += [a, b]
                col += [column, column]
                delta += [weight, -weight]
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
                 quota_wait_s: Mapping[str, float], out_of_service: Changes) -> dict[str, np.ndarray]:
    """Idle GPU-time lost, per window: at every moment the idle GPUs go first to the waiting jobs that would fit
    on some nodes' free GPUs (quota-held ones: quota, the others: blocking), then to those that fit only in the
    free total (fragmentation), each at most its GPUs."""
    names = list(node_gpus)
    cap = np.array([node_gpus[name] for name in names], dtype=float)
    line = _timeline(jobs, {name: i for i, name in enumerate(names)}, node_gpus, float(edges[-1]), quota_wait_s,
                     out_of_service)
    out = {c: np.zeros(edges.size - 1) for c in ("blocking", "quota", "fragmentation")}
    if line.times.size < 2:
        return out
    n = len(names)
    per_task = np.array([s[0] for s in line.shapes], dtype=float)
    tasks = np.array([s[1] for s in line.shapes], dtype=float)
    held = np.array([s[2] for s in line.shapes], dtype=bool)
    level = np.zeros(n + len(line.shapes))
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
        for cause, gpus in _split_idle(cap - state[:, :n], state[:, n:], per_task, tasks, held).items():
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
