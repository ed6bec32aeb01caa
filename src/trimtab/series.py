"""Step functions of time (a value that holds from one change point to the next) and their means and integrals
over windows: the arithmetic of the run's time series and utilisation figures."""

from __future__ import annotations

import math

import numpy as np


def window_edges(first_s: float, end_s: float, window_s: float) -> np.ndarray:
    """Edges of the windows of `window_s` from `first_s` that cover [first_s, end_s] (at least one window)."""
    n_windows = max(1, math.ceil((end_s - first_s) / window_s)) if end_s > first_s else 1
    return first_s + window_s * np.arange(n_windows + 1)


def _cumulative(t: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Integral of the step function (value v[i] from t[i] to t[i+1]) at each change point."""
    out = np.zeros(t.size)
    if t.size > 1:
        out[1:] = np.cumsum(v[:-1] * np.diff(t))
    return out


def _integral_at(t: np.ndarray, v: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Integral from t[0] of the step function, at arbitrary `points` (the last value holds after t[-1])."""
    if t.size == 0:
        return np.zeros(points.size)
    cum = _cumulative(t, v)
    idx = np.clip(np.searchsorted(t, points, side="right") - 1, 0, t.size - 1)
    before = points < t[0]
    out = cum[idx] + v[idx] * (points - t[idx])
    out[before] = 0.0
    return out


def window_means(t: np.ndarray, v: np.ndarray, edges: np.ndarray) -> np.ndarray:
    return np.diff(_integral_at(t, v, edges)) / np.diff(edges)


def window_integrals_of_steps(t: np.ndarray, dv: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Per-window integral of a step function given as increments `dv` at times `t` (any order)."""
    if t.size == 0:
        return np.zeros(edges.size - 1)
    order = np.argsort(t, kind="stable")
    ts, level = t[order], np.cumsum(dv[order])
    return np.diff(_integral_at(ts, level, edges))


def window_max(t: np.ndarray, v: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Largest value the step function takes inside each window."""
    if t.size == 0:
        return np.zeros(edges.size - 1)
    out = np.zeros(edges.size - 1)
    start_idx = np.clip(np.searchsorted(t, edges[:-1], side="right") - 1, 0, None)
    end_idx = np.searchsorted(t, edges[1:], side="left")
    for k, (a, b) in enumerate(zip(start_idx, end_idx, strict=True)):
        out[k] = v[a:max(b, a + 1)].max()
    return out


def time_mean(t: np.ndarray, v: np.ndarray, first: float, end: float) -> float:
    if end <= first or t.size == 0:
        return 0.0
    ends = _integral_at(t, v, np.array([first, end]))
    return float((ends[1] - ends[0]) / (end - first))
