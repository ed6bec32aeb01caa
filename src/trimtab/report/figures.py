"""Matplotlib figures of simulated runs, each computed from the run files alone: throughput over time, allocation,
per-node heat maps, JCT and wait CDFs, tenant shares. Each function writes one PNG and returns its path."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

Runs = Mapping[str, Mapping[str, Any]]
_MARKS = {"preempted": ("v", "evictions"), "node-failed": ("x", "node failures"), "failed": ("x", "job failures")}


def _hours(run: Mapping[str, Any]) -> np.ndarray:
    s = run["series"]
    return np.arange(len(s["completions"])) * s["window_s"] / 3600.0


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def throughput_over_time(runs: Runs, path: Path) -> Path:
    """Completions and goodput per window for every policy, the queue length beneath, and the evictions and
    failures of each run as marks on the time axis: where fluctuation shows."""
    fig, (top, mid, marks, bottom) = plt.subplots(
        4, 1, figsize=(11, 8.5), sharex=True, height_ratios=(2, 2, 0.25 * max(len(runs), 1) + 0.3, 1.2))
    window_h = next(iter(runs.values()))["series"]["window_s"] / 3600.0
    for i, (name, run) in enumerate(runs.items()):
        s, hours = run["series"], _hours(run)
        line = top.step(hours, s["completions"], where="post", label=name, linewidth=1.1)[0]
        mid.step(hours, np.array(s["goodput_gpu_s"]) / 3600.0, where="post", linewidth=1.1, color=line.get_color())
        bottom.step(hours, s["queue_len"], where="post", linewidth=1.0, color=line.get_color())
        t0 = s.get("start_s", 0.0)
        for outcome, (marker, _) in _MARKS.items():
            times = [(r["end"] - t0) / 3600.0 for j in run["jobs"] for r in j["runs"] if r["outcome"] == outcome]
            if times:
                marks.plot(times, np.full(len(times), i), marker, color=line.get_color(), markersize=4,
                           alpha=0.6, linestyle="none")
    top.set_ylabel(f"completions / {window_h:g} h")
    top.legend(loc="upper right", fontsize=8, ncols=min(len(runs), 4))
    mid.set_ylabel(f"goodput GPU-h / {window_h:g} h")
    marks.set_yticks(range(len(runs)), list(runs), fontsize=7)
    marks.set_ylim(-0.5, len(runs) - 0.5)
    marks.set_ylabel("v evict\nx fail", fontsize=7)
    bottom.set_ylabel("queue length")
    bottom.set_xlabel("hours since first submission")
    for ax in (top, mid, marks, bottom):
        ax.grid(alpha=0.3)
    return _save(fig, path)


def allocation_over_time(runs: Runs, path: Path) -> Path:
    """GPU allocation ratio per window for every policy."""
    fig, ax = plt.subplots(figsize=(11, 3.2))
    for name, run in runs.items():
        ax.step(_hours(run), run["series"]["gpu_alloc"], where="post", label=name, linewidth=1.1)
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("GPUs allocated")
    ax.set_xlabel("hours since first submission")
    ax.legend(loc="lower right", fontsize=8, ncols=min(len(runs), 4))
    ax.grid(alpha=0.3)
    return _save(fig, path)


def node_utilisation(run: Mapping[str, Any]) -> tuple[list[str], np.ndarray]:
    """Per-node GPU allocation per window (nodes x windows, in GPUs), from the runs of every job."""
    s = run["series"]
    w, t0, n_windows = s["window_s"], s.get("start_s", 0.0), len(s["completions"])
    nodes = sorted({n for j in run["jobs"] for r in j["runs"] for n in r["nodes"]})
    index = {n: i for i, n in enumerate(nodes)}
    edges = t0 + w * np.arange(n_windows + 1)
    gpu_s = np.zeros((len(nodes), n_windows))
    for j in run["jobs"]:
        per_task = j["gpus"] / j["tasks"]
        for r in j["runs"]:
            # seconds of [start, end) inside each window
            overlap = np.clip(np.minimum(edges[1:], r["end"]) - np.maximum(edges[:-1], r["start"]), 0, None)
            for name, tasks in zip(r["nodes"], r.get("node_tasks", [j["tasks"]]), strict=False):
                gpu_s[index[name]] += overlap * tasks * per_task
    return nodes, gpu_s / w


def node_heatmaps(runs: Runs, path: Path) -> Path:
    """One heat map per policy: GPUs allocated on each node in each window."""
    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 1.2 + 1.6 * len(runs)), sharex=True, squeeze=False)
    image = None
    for ax, (name, run) in zip(axes[:, 0], runs.items(), strict=True):
        nodes, util = node_utilisation(run)
        hours = _hours(run)
        span_h = hours[-1] + run["series"]["window_s"] / 3600.0 if len(hours) else 1.0
        image = ax.imshow(util, aspect="auto", interpolation="nearest", cmap="viridis", origin="lower",
                          extent=(0, span_h, 0, max(len(nodes), 1)))
        ax.set_ylabel(f"{name}\nnodes", fontsize=8)
    axes[-1, 0].set_xlabel("hours since first submission")
    if image is not None:
        fig.colorbar(image, ax=axes[:, 0].tolist(), label="GPUs allocated", shrink=0.8)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def cdfs(runs: Runs, path: Path) -> Path:
    """Empirical CDFs of job completion time and of wait, per policy, log x axes."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for name, run in runs.items():
        done = [j for j in run["jobs"] if j["state"] == "completed"]
        jct = np.sort([j["end"] - j["submit"] for j in done])
        wait = np.sort([j["runs"][0]["start"] - j["submit"] for j in run["jobs"] if j["runs"]])
        for ax, values in ((left, jct), (right, wait)):
            if values.size:
                ax.step(np.maximum(values, 1.0), np.arange(1, values.size + 1) / values.size, where="post",
                        label=name)
    for ax, label in ((left, "job completion time (s)"), (right, "wait before first start (s; < 1 s drawn at 1)")):
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of jobs")
        ax.grid(alpha=0.3, which="both")
    left.legend(fontsize=8)
    return _save(fig, path)


def tenant_shares(runs: Runs, path: Path) -> Path | None:
    """Share of GPU-time each tenant received, one stacked bar per policy (None with a single tenant)."""
    shares: dict[str, dict[str, float]] = {}
    for name, run in runs.items():
        used: dict[str, float] = {}
        for j in run["jobs"]:
            used[j["tenant"]] = used.get(j["tenant"], 0.0) + sum(j["gpus"] * (r["end"] - r["start"])
                                                                 for r in j["runs"])
        total = sum(used.values()) or 1.0
        shares[name] = {t: v / total for t, v in used.items()}
    tenants = sorted({t for s in shares.values() for t in s})
    if len(tenants) < 2:
        return None
    fig, ax = plt.subplots(figsize=(11, 0.6 + 0.45 * len(runs)))
    left = np.zeros(len(runs))
    cmap = plt.get_cmap("tab20")
    for k, tenant in enumerate(tenants):
        values = np.array([shares[name].get(tenant, 0.0) for name in runs])
        ax.barh(list(runs), values, left=left, color=cmap(k % 20), label=tenant)
        left += values
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of GPU-time")
    ax.legend(fontsize=7, ncols=min(len(tenants), 8), loc="upper center", bbox_to_anchor=(0.5, -0.35 - 0.1 *
                                                                                          (len(tenants) > 8)))
    return _save(fig, path)
