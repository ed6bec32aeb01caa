"""The verdict at the top of a report: for each headline metric, which policy is best, by how much against the
baseline policy the reader picked, how that holds over seeds, and why, as far as the runs measured it: where the
baseline's jobs spent their waiting (the run JSON's `wait_by_cause_s`) or how often it preempted. Ties (values
within `table.TIE_RTOL`) are said as ties, with no why. Read by the HTML page and the terminal alike
(`finding_text`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from trimtab.report.table import COLUMNS, TIE_RTOL, Column, best_of, same

Runs = Mapping[str, Sequence[Mapping[str, Any]]]  # by policy, one run JSON per seed ("summary", "wait_by_cause_s")
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
    `seeds_better` counts the seeds where the best beat the baseline by more than a tie, of `seeds_paired`. `why`:
    what the runs measured that goes with a win ("" when they measured nothing that does, or for a tie)."""

    column: Column
    label: str
    best: tuple[str, ...]
    best_spread: Spread | None
    baseline_spread: Spread | None
    change: float | None
    seeds_better: int
    seeds_paired: int
    why: str = ""


def default_baseline(policies: Sequence[str]) -> str:
    """fifo when it ran, else the first policy."""
    return "fifo" if "fifo" in policies else policies[0]


def _values(summaries: Sequence[Mapping[str, Any]], key: str) -> list[float] | None:
    values = [s.get(key) for s in summaries]
    return None if not values or any(v is None for v in values) else [float(v) for v in values]  # type: ignore[arg-type]


def verdict(runs: Runs, baseline: str) -> list[Finding]:
    """The findings of the headline metrics, in `_HEADLINES` order; `baseline` must be a key of `runs`."""
    if baseline not in runs:
        raise ValueError(f"--baseline {baseline}: no such policy in the report (policies: {', '.join(runs)})")
    groups = {name: [run["summary"] for run in seeds] for name, seeds in runs.items()}
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
        why = _why(key, best[0], baseline, runs) if len(best) == 1 and best[0] != baseline and base else ""
        findings.append(Finding(column, label, best, Spread.of(top) if top else None,
                                Spread.of(base) if base else None, change, better, len(paired), why))
    return findings


# the headline metrics that waiting explains, and those that lost work (preemptions) explains
_WAIT_METRICS = frozenset({"jobs_completed", "avg_jct_s", "p99_jct_s", "avg_wait_s", "gpu_util", "starvation_rate"})
_PREEMPTION_METRICS = frozenset({"wasted_gpu_hours"})
_CAUSE_TEXT = {"fit": "for free GPUs", "quota": "at their quotas", "reservation": "behind reservations",
               "locality": "for a better placement", "gang": "for their gangs", "order": "behind others",
               "other": "for other reasons"}
_SHOWN_CAUSES = 3


def _why(key: str, winner: str, baseline: str, runs: Runs) -> str:
    """The measured why of `winner`'s win over `baseline` on `key`: where the baseline's jobs waited, when they
    waited longer in all than the winner's; or fewer preemptions, when it preempted less. "" otherwise."""
    if key in _PREEMPTION_METRICS:
        ours, theirs = _mean_of(runs[winner], "preemptions"), _mean_of(runs[baseline], "preemptions")
        if ours is None or theirs is None or not ours < theirs:
            return ""
        return f"fewer preemptions ({ours:,.0f} vs {theirs:,.0f})"
    if key not in _WAIT_METRICS:
        return ""
    ours_by_cause, theirs_by_cause = _waits(runs[winner]), _waits(runs[baseline])
    if ours_by_cause is None or theirs_by_cause is None:
        return ""
    ours, theirs = sum(ours_by_cause.values()), sum(theirs_by_cause.values())
    if not ours < theirs or same(ours, theirs):
        return ""
    rank = list(_CAUSE_TEXT)  # equal shares in the causes' own order
    shares = sorted(((seconds / theirs, cause) for cause, seconds in theirs_by_cause.items()),
                    key=lambda item: (-item[0], rank.index(item[1]) if item[1] in rank else len(rank)))
    top_share, top_cause = shares[0]
    listed = ", ".join(f"{cause} {share:.0%}" for share, cause in shares[:_SHOWN_CAUSES] if share >= 0.005)
    what = _CAUSE_TEXT.get(top_cause, f"for {top_cause}")
    return (f"{baseline}'s jobs waited {'mostly' if top_share > 0.5 else 'longest'} {what} ({listed} of "
            f"{_waited(theirs)} waited in all; {winner}'s jobs {_waited(ours)})")


def _mean_of(runs: Sequence[Mapping[str, Any]], key: str) -> float | None:
    values = _values([run["summary"] for run in runs], key)
    return fmean(values) if values else None


def _waits(runs: Sequence[Mapping[str, Any]]) -> dict[str, float] | None:
    """Seconds waited per cause, summed over the jobs, the mean over seeds (None when a run did not record it)."""
    if any("wait_by_cause_s" not in run for run in runs):
        return None
    causes = {cause for run in runs for cause in run["wait_by_cause_s"]}
    return {cause: fmean(float(run["wait_by_cause_s"].get(cause, 0.0)) for run in runs) for cause in causes}


def _waited(seconds: float) -> str:
    """Waiting summed over jobs: seconds below six minutes, else hours."""
    return f"{seconds:,.0f} s" if seconds < 360 else f"{seconds / 3600:,.1f} h"


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
    return text + (f" — {f.why}" if f.why else "")


def leaders(findings: Sequence[Finding]) -> tuple[list[str], int]:
    """The policies best (or tied best) on the most headline metrics, and on how many."""
    wins: dict[str, int] = {}
    for f in findings:
        for name in f.best:
            wins[name] = wins.get(name, 0) + 1
    most = max(wins.values(), default=0)
    return [name for name, n in wins.items() if n == most and most > 0], most
