"""The comparison table: which summary metrics are shown, how they are labelled, which value is best, and when two
values are the same (`TIE_RTOL`). Shared by the terminal table, the HTML report and its verdict so all three mark
the same cells."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    label: str
    better: Literal["min", "max"]
    fmt: str = "{:.1f}"

    def format(self, value: Any) -> str:
        if value is None:
            return "-"
        if self.fmt.endswith("d}") and not isinstance(value, int):  # a mean over seeds of a count
            return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"
        return self.fmt.format(value)


# key | label | better | format: one row per column of the table, in order
_COLUMN_ROWS = """
jobs_completed     | done         | max | {:d}
avg_jct_s          | avg JCT s    | min | {:.0f}
p50_jct_s          | p50 JCT s    | min | {:.0f}
p99_jct_s          | p99 JCT s    | min | {:.0f}
avg_wait_s         | avg wait s   | min | {:.0f}
throughput_cv      | thru CV      | min | {:.3f}
goodput_cv         | goodput CV   | min | {:.3f}
gpu_util           | GPU util     | max | {:.3f}
backlogged_util    | util|backlog | max | {:.3f}
starvation_rate    | starved      | min | {:.3f}
preemptions        | preempt      | min | {:d}
evicted_gpus_per_needed_gpu | evicted/needed | min | {:.2f}
wasted_gpu_hours   | wasted GPU h | min | {:.1f}
sched_cycle_p99_ms | cycle p99 ms | min | {:.2f}
"""
COLUMNS: tuple[Column, ...] = tuple(
    Column(*(cell.strip() for cell in row.split(" | "))) for row in _COLUMN_ROWS.strip().splitlines()  # type: ignore[arg-type]
)


# values within this fraction of each other are the same: a 0.1% gain in a simulated metric is noise, not a win
TIE_RTOL = 0.005


def same(a: float, b: float) -> bool:
    """Whether two values of a metric are equal within `TIE_RTOL` (relative to the larger)."""
    return abs(a - b) <= TIE_RTOL * max(abs(a), abs(b)) + 1e-12


def best_of(values: Mapping[str, float], better: Literal["min", "max"]) -> set[str]:
    """The names whose value is the best or the same as it (`same`); empty when every value is (a tie of all)
    or fewer than two names have a value."""
    if len(values) < 2:
        return set()
    target = min(values.values()) if better == "min" else max(values.values())
    tied = {name for name, v in values.items() if same(v, target)}
    return set() if len(tied) == len(values) else tied


def best_per_column(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, set[str]]:
    """For each column, the policies holding its best value, ties within `TIE_RTOL` all marked; none when fewer
    than two policies have a value or all values are the same."""
    return {col.key: best_of({name: s[col.key] for name, s in summaries.items() if s.get(col.key) is not None},
                             col.better) for col in COLUMNS}


def mean_summary(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The mean over seeds of each column's value (None where a seed has none); one summary is returned as is."""
    if len(summaries) == 1:
        return dict(summaries[0])
    out: dict[str, Any] = {}
    for col in COLUMNS:
        values = [s.get(col.key) for s in summaries]
        out[col.key] = None if any(v is None for v in values) else sum(values) / len(values)
    return out
