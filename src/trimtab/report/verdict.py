"""The verdict at the top of a report: for each headline metric, which policy is best, by how much against the
baseline policy the reader picked, and how that holds over seeds. Ties (values within `table.TIE_RTOL`) are
said as ties. Read by the HTML page and the terminal alike (`finding_text`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from trimtab.report.table import COLUMNS, TIE_RTOL, Column, best_of, same

Summaries = Mapping[str, Sequence[Mapping[str, Any]]]  # by policy, one summary per seed
# key | what the verdict calls it
_HEADLINES = {
    "jobs_completed": "jobs completed",
    "avg_jct_s": "average job completion time",
    "p99_jct_s": "p99 job completion time",
    "avg_wait_s": "average wait",
    "gpu_util": "GPU utilisation",
    "goodput_cv": "goodput fluctuation (CV)",
    "starvation_rate": "starved jobs",
    "wasted_gpu_hours": "wasted GPU-hours",
}


@dataclass(frozen=True, slots=True)
class Spread:
    """A metric of one policy over its seeds: mean, lowest, highest, number of seeds."""

    mean: float
    low: float
    high: float
    seeds: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(fmean(values), min(values), max(values), len(values))


@dataclass(frozen=True, slots=True)
class Finding:
    """One headline metric. `best`: the policies holding the best mean (several when tied; empty when all are
    the same or no policy has a value). `best_spread` and `baseline_spread` are None without values; `change`
    is the best's mean relative to the baseline's (-0.38: 38% lower; None when the baseline is 0 or absent);
    `seeds_better` counts the seeds where the best beat the baseline by more than a tie, of `seeds_paired`."""

    column: Column
    label: str
    best: tuple[str, ...]
    best_spread: Spread | None
    baseline_spread: Spread | None
    change: float | None
    seeds_better: int
    seeds_paired: int


def default_baseline(policies: Sequence[str]) -> str:
    """fifo when it ran, else the first policy."""
    return "fifo" if "fifo" in policies else policies[0]


def _values(summaries: Sequence[Mapping[str, Any]], key: str) -> list[float] | None:
    values = [s.get(key) for s in summaries]
    return None if not values or any(v is None for v in values) else [float(v) for v in values]  # type: ignore[arg-type]


def verdict(groups: Summaries, baseline: str) -> list[Finding]:
    """The findings of the headline metrics, in `_HEADLINES` order; `baseline` must be a key of `groups`."""
    if baseline not in groups:
        raise ValueError(f"--baseline {baseline}: no such policy in the report (policies: {', '.join(groups)})")
    columns = {c.key: c for c in COLUMNS}
    findings = []
    for key, label in _HEADLINES.items():
        column = columns[key]
        per_policy = {name: v for name, runs in groups.items() if (v := _values(runs, key)) is not None}
        means = {name: fmean(v) for name, v in per_policy.items()}
        best = tuple(name for name in groups if name in best_of(means, column.better))
        base = per_policy.get(baseline)
        top = per_policy.get(best[0]) if best else None
        change = None
        if top is not None and base is not None and fmean(base) != 0:
            change = (fmean(top) - fmean(base)) / abs(fmean(base))
        paired = list(zip(top or [], base or [], strict=False))
        better = sum(not same(t, b) and (t < b if column.better == "min" else t > b) for t, b in paired)
        findings.append(Finding(column, label, best, Spread.of(top) if top else None,
                                Spread.of(base) if base else None, change, better, len(paired)))
    return findings


def _unit(column: Column) -> str:
    return " s" if column.key.endswith("_s") else ""


def _value(column: Column, spread: Spread) -> str:
    unit = _unit(column)
    text = f"{column.format(spread.mean)}{unit}"
    if spread.seeds > 1:
        low, high = column.format(spread.low), column.format(spread.high)
        text += (f" (alike in all {spread.seeds} seeds)" if low == high
                 else f" ({low} to {high}{unit} over {spread.seeds} seeds)")
    return text


def _names(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def finding_text(f: Finding, baseline: str) -> str:
    """One plain sentence for a finding, e.g. 'average wait: sjf, 120 s, 38.0% lower than fifo (194 s)'."""
    if not f.best:
        if f.baseline_spread is None:
            return f"{f.label}: no values"
        return f"{f.label}: all policies the same within {TIE_RTOL:.1%} ({_value(f.column, f.baseline_spread)})"
    who = _names(f.best) + (f" tie within {TIE_RTOL:.1%}" if len(f.best) > 1 else "")
    assert f.best_spread is not None
    text = f"{f.label}: {who}, {_value(f.column, f.best_spread)}"
    if baseline in f.best:
        return text + (" (the baseline is among them)" if len(f.best) > 1 else " (the baseline itself)")
    if f.baseline_spread is None:
        return text + f" ({baseline} has no value)"
    if f.change is not None:
        text += f", {abs(f.change):.1%} {'lower' if f.change < 0 else 'higher'} than"
    else:
        text += ", against"
    text += f" {baseline} ({f.column.format(f.baseline_spread.mean)}{_unit(f.column)})"
    if f.seeds_paired > 1:
        text += f"; better in {f.seeds_better} of {f.seeds_paired} seeds"
    return text


def leaders(findings: Sequence[Finding]) -> tuple[list[str], int]:
    """The policies best (or tied best) on the most headline metrics, and on how many."""
    wins: dict[str, int] = {}
    for f in findings:
        for name in f.best:
            wins[name] = wins.get(name, 0) + 1
    most = max(wins.values(), default=0)
    return [name for name, n in wins.items() if n == most and most > 0], most
