"""Matplotlib figures of simulated runs: completions per window over time, and JCT CDFs.

Each function writes one PNG and returns its path; the Agg backend keeps it headless."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np


def completions_over_time(runs: Mapping[str, Mapping[str, Any]], path: Path) -> Path:
    """Completions per window for every policy on one axis, the queue length beneath."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 5.5), sharex=True, height_ratios=(2, 1))
    for name, run in runs.items():
        s = run["series"]
        hours = np.arange(len(s["completions"])) * s["window_s"] / 3600.0
        top.step(hours, s["completions"], where="post", label=name, linewidth=1.2)
        bottom.step(hours, s["queue_len"], where="post", linewidth=1.0)
    window_h = next(iter(runs.values()))["series"]["window_s"] / 3600.0
    top.set_ylabel(f"completions per {window_h:g} h")
    top.legend(loc="upper right", fontsize=8, ncols=min(len(runs), 4))
    top.grid(alpha=0.3)
    bottom.set_ylabel("queue length")
    bottom.set_xlabel("hours since first submission")
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def jct_cdf(runs: Mapping[str, Mapping[str, Any]], path: Path) -> Path:
    """Empirical CDF of job completion time per policy, log x axis."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, run in runs.items():
        jct = np.sort([j["end"] - j["submit"] for j in run["jobs"] if j["state"] == "completed"])
        if jct.size:
            ax.step(np.maximum(jct, 1e-3), np.arange(1, jct.size + 1) / jct.size, where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of jobs")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
