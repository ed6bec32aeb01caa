"""What a report draws over time, computed from the job records of a run file alone: the report's window (sized to
the run), completions, goodput, GPUs allocated and queue length per window, and the per-node summary behind the
node table and heat map.

The run JSON's own `series` uses the simulation's metric window (an hour by default, part of the run's summary);
the report recomputes its windows from the jobs so that a ten-minute run is not one flat hour."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trimtab.losses import run_gpus
from trimtab.series import window_edges, window_integrals_of_steps

Run = Mapping[str, Any]
# windows a report may pick, seconds: round numbers a reader takes in at a glance
_NICE_WINDOWS_S = (10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)
WINDOWS_PER_RUN = 48


def report_window_s(span_s: float) -> float:
    """The smallest round window that cuts a run of `span_s` seconds into at most `WINDOWS_PER_RUN` windows."""
    for window_s in _NICE_WINDOWS_S:
        if span_s / window_s <= WINDOWS_PER_RUN:
            return float(window_s)
    return float(_NICE_WINDOWS_S[-1])


def run_span(run: Run) -> tuple[float, float]:
    """(first submission, last end) of a run's jobs, seconds; a job still open ends at its last run's end."""
    jobs = run["jobs"]
    if not jobs:
        return 0.0, 0.0
    first = min(j["submit"] for j in jobs)
    ends = [e for j in jobs for e in [j["end"], *(r["end"] for r in j["runs"])] if e is not None]
    return first, max([first, *ends])


def format_window(window_s: float) -> str:
    """'30 s', '5 min', '1 h', '2 d' for a window."""
    for unit_s, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if window_s >= unit_s and window_s % unit_s == 0:
            return f"{window_s / unit_s:g} {unit}"
    return f"{window_s:g} s"


@dataclass(frozen=True, slots=True)
class Timeline:
    """Per-window values of one run: `edges` (seconds, absolute), completions, goodput in GPU-hours, mean GPUs
    allocated, mean queue length."""

    edges: np.ndarray
    completions: np.ndarray
    goodput_gpu_h: np.ndarray
    gpus_allocated: np.ndarray
    queue_len: np.ndarray


def timeline(run: Run, window_s: float, span_s: float) -> Timeline:
    """The windows of `window_s` over the first `span_s` seconds from the run's first submission."""
    first, _ = run_span(run)
    edges = window_edges(first, first + span_s, window_s)
    ends = np.array([j["end"] for j in run["jobs"] if j["state"] == "completed" and j["end"] is not None], dtype=float)
    alloc_t: list[float] = []
    alloc_dv: list[float] = []
    good_t: list[float] = []
    good_dv: list[float] = []
    queue_t: list[float] = []
    queue_dv: list[float] = []
    for job in run["jobs"]:
        queue_t.append(job["submit"])
        queue_dv.append(1.0)
        runs = job["runs"]
        for k, r in enumerate(runs):
            gpus = run_gpus(job, r)
            alloc_t += [r["start"], r["end"]]
            alloc_dv += [gpus, -gpus]
            if r["useful_s"] > 0:
                good_t += [r["progress_from"], r["progress_from"] + r["useful_s"] * r["slowdown"]]
                good_dv += [gpus, -gpus]
            queue_t.append(r["start"])
            queue_dv.append(-1.0)
            if k < len(runs) - 1 or job["end"] is None or job["end"] > r["end"]:  # back in the queue
                queue_t.append(r["end"])
                queue_dv.append(1.0)
        if job["end"] is not None and (not runs or job["end"] > runs[-1]["end"]):  # ended while waiting
            queue_t.append(job["end"])
            queue_dv.append(-1.0)
    widths = np.diff(edges)

    def mean(t: list[float], dv: list[float]) -> np.ndarray:
        return window_integrals_of_steps(np.array(t, dtype=float), np.array(dv, dtype=float), edges) / widths

    return Timeline(
        edges=edges,
        completions=np.histogram(ends, bins=edges)[0] if ends.size else np.zeros(widths.size),
        goodput_gpu_h=mean(good_t, good_dv) * widths / 3600.0,
        gpus_allocated=mean(alloc_t, alloc_dv),
        queue_len=mean(queue_t, queue_dv),
    )


@dataclass(frozen=True, slots=True)
class NodeUse:
    """One node in one run: mean and peak GPUs allocated, the share of the run it held any job, runs started on
    it, and attempts that ended there by eviction, node failure or job failure. `per_window` is the mean GPUs
    allocated in each report window (the heat map's row)."""

    node: str
    mean_gpus: float
    peak_gpus: float
    busy_fraction: float
    runs: int
    evictions: int
    node_failures: int
    job_failures: int
    per_window: np.ndarray


def node_use(run: Run, edges: np.ndarray) -> list[NodeUse]:
    """Every node the run placed work on, by name."""
    events: dict[str, tuple[list[float], list[float]]] = {}
    counts: dict[str, list[int]] = {}
    ending = {"preempted": 1, "node-failed": 2, "failed": 3}
    for job in run["jobs"]:
        for r in job["runs"]:
            for name, tasks in zip(r["nodes"], r.get("node_tasks") or [job["tasks"]], strict=False):
                gpus = job["gpus"] / job["tasks"] * tasks
                t, dv = events.setdefault(name, ([], []))
                t += [r["start"], r["end"]]
                dv += [gpus, -gpus]
                tally = counts.setdefault(name, [0, 0, 0, 0])
                tally[0] += 1
                if r["outcome"] in ending:
                    tally[ending[r["outcome"]]] += 1
    first, last = run_span(run)
    span_s = max(last - first, 1e-9)
    out = []
    for name in sorted(events):
        t, dv = (np.array(x, dtype=float) for x in events[name])
        order = np.argsort(t, kind="stable")
        ts, level = t[order], np.cumsum(dv[order])
        busy_s = float(np.sum(np.diff(ts) * (level[:-1] > 1e-9))) if ts.size > 1 else 0.0
        total = window_integrals_of_steps(t, dv, np.array([first, last]))[0] if last > first else 0.0
        out.append(NodeUse(name, total / span_s, float(level.max(initial=0.0)), busy_s / span_s, *counts[name],
                           per_window=window_integrals_of_steps(t, dv, edges) / np.diff(edges)))
    return out


def common_span_s(runs: Sequence[Run]) -> float:
    """The longest run's span: every panel of a report shares it."""
    return max((b - a for a, b in map(run_span, runs)), default=0.0)
