"""Matplotlib figures of simulated runs, each computed from the run files alone: small multiples over time (one
panel per policy, the same axes), per-node heat maps, JCT and wait CDFs, tenant shares. Each function writes one
PNG and returns its path; every axis names its quantity and unit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from trimtab.report.timeline import NodeUse, Timeline

Runs = Mapping[str, Mapping[str, Any]]
_MARKS = {"preempted": ("v", "evictions"), "node-failed": ("x", "node failures"), "failed": ("x", "job failures")}


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


@dataclass(frozen=True, slots=True)
class Axis:
    """The time axis every panel of a report shares: its unit (minutes on short runs, hours on long ones)."""

    span_s: float

    @property
    def unit_s(self) -> float:
        return 60.0 if self.span_s <= 3 * 3600 else 3600.0

    @property
    def label(self) -> str:
        return f"time since first submission ({'min' if self.unit_s == 60 else 'h'})"

    def of(self, edges: np.ndarray) -> np.ndarray:
        return (edges - edges[0]) / self.unit_s


# Timeline field | y-axis label ("{w}": the window)
PANELS = {
    "completions": "jobs completed / {w}",
    "goodput_gpu_h": "goodput GPU-h / {w}",
    "gpus_allocated": "GPUs allocated (mean)",
    "queue_len": "jobs waiting (mean)",
}


def small_multiples(runs: Runs, lines: Mapping[str, Timeline], field: str, axis: Axis, window: str,
                    path: Path) -> Path:
    """One panel per policy with the same axes: the policy's `field` per window in colour, the other policies in
    grey behind it; on the completions panels, evictions and failures as marks along the bottom."""
    n = len(lines)
    ncols = min(3, n)
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(11, 0.7 + 2.0 * nrows), sharex=True, sharey=True,
                             squeeze=False)
    colours = plt.get_cmap("tab10")
    for k, (ax, (name, line)) in enumerate(zip(axes.flat, lines.items(), strict=False)):
        for other, back in lines.items():
            if other != name:
                ax.step(axis.of(back.edges[:-1]), getattr(back, field), where="post", color="#bbb", linewidth=0.7)
        ax.step(axis.of(line.edges[:-1]), getattr(line, field), where="post", color=colours(k % 10), linewidth=1.4)
        if field == "completions":
            _marks(ax, runs[name], line.edges[0], axis)
        ax.set_title(name, fontsize=9, loc="left")
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8, labelbottom=True, labelleft=True)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel(PANELS[field].format(w=window), fontsize=8)
    for ax in axes[-1, :]:
        ax.set_xlabel(axis.label, fontsize=8)
    handles = [Line2D([], [], color="#333", label="the panel's policy (in colour)"),
               Line2D([], [], color="#bbb", label="the other policies")]
    if field == "completions":
        handles += [Line2D([], [], marker=m, linestyle="none", color="#444", label=what) for m, what in _MARKS.values()]
    fig.legend(handles=handles, loc="upper right", ncols=len(handles), fontsize=8, frameon=False)
    # fixed margins in inches: tight_layout measures every tick label of every panel, several seconds a figure
    height_in = 0.7 + 2.0 * nrows
    fig.subplots_adjust(left=0.07, right=0.99, top=1 - 0.55 / height_in, bottom=0.5 / height_in, hspace=0.5,
                        wspace=0.12)
    return _save(fig, path)


def _marks(ax: plt.Axes, run: Mapping[str, Any], t0: float, axis: Axis) -> None:
    for outcome, (marker, _) in _MARKS.items():
        times = [(r["end"] - t0) / axis.unit_s for j in run["jobs"] for r in j["runs"] if r["outcome"] == outcome]
        if times:
            ax.plot(times, np.zeros(len(times)), marker, color="#444", markersize=4, alpha=0.5, linestyle="none",
                    transform=ax.get_xaxis_transform(), clip_on=False)


def node_heatmaps(nodes: Mapping[str, Sequence[NodeUse]], lines: Mapping[str, Timeline], axis: Axis,
                  path: Path) -> Path:
    """One heat map per policy: mean GPUs allocated on each node (rows) in each window."""
    fig, axes = plt.subplots(len(nodes), 1, figsize=(11, 1.2 + 1.6 * len(nodes)), sharex=True, squeeze=False)
    image = None
    top = max((u.per_window.max(initial=0.0) for used in nodes.values() for u in used), default=1.0) or 1.0
    for ax, (name, used) in zip(axes[:, 0], nodes.items(), strict=True):
        edges = axis.of(lines[name].edges)
        grid = np.array([u.per_window for u in used]) if used else np.zeros((1, edges.size - 1))
        image = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="viridis", origin="lower",
                          extent=(edges[0], edges[-1], 0, max(len(used), 1)), vmin=0, vmax=top)
        ax.set_ylabel(f"{name}\nnodes", fontsize=8)
        ax.tick_params(labelbottom=True, labelsize=8)
        if len(used) <= 12:  # few nodes: name each row
            ax.set_yticks(np.arange(len(used)) + 0.5, [u.node for u in used], fontsize=7)
        else:
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[-1, 0].set_xlabel(axis.label)
    height_in = 1.2 + 1.6 * len(nodes)
    fig.subplots_adjust(hspace=0.4, left=0.12, right=0.86, top=1 - 0.3 / height_in, bottom=0.6 / height_in)
    if image is not None:
        fig.colorbar(image, ax=axes[:, 0].tolist(), label="GPUs allocated (mean per window)", shrink=0.8)
    return _save(fig, path)


def cdfs(runs: Runs, path: Path) -> Path:
    """Empirical CDFs of job completion time and of wait, per policy, log x axes."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    colours = plt.get_cmap("tab10")
    for k, (name, run) in enumerate(runs.items()):
        done = [j for j in run["jobs"] if j["state"] == "completed"]
        jct = np.sort([j["end"] - j["submit"] for j in done])
        wait = np.sort([j["runs"][0]["start"] - j["submit"] for j in run["jobs"] if j["runs"]])
        for ax, values in ((left, jct), (right, wait)):
            if values.size:
                ax.step(np.maximum(values, 1.0), np.arange(1, values.size + 1) / values.size, where="post",
                        label=name, color=colours(k % 10), linestyle=("-", "--", ":")[k // 10 % 3])
    for ax, label in ((left, "job completion time (s)"), (right, "wait before first start (s; < 1 s drawn at 1)")):
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of jobs")
        ax.grid(alpha=0.3, which="both")
    left.legend(fontsize=8, ncols=2)
    fig.tight_layout()
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
    ax.set_ylabel("policy")
    ax.legend(fontsize=7, ncols=min(len(tenants), 8), loc="upper center", bbox_to_anchor=(0.5, -0.35 - 0.1 *
                                                                                          (len(tenants) > 8)))
    fig.tight_layout()
    return _save(fig, path)
