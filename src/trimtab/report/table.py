"""The comparison table: which summary metrics are shown, how they are labelled, and which value is best.

Shared by the terminal table and the HTML report so both mark the same cells."""

from __future__ import annotations

from collections.abc import Mapping
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


def best_per_column(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, set[str]]:
    """For each column, the policies holding its best value (ties all marked; none when no policy has a value or
    all values are equal)."""
    best: dict[str, set[str]] = {}
    for col in COLUMNS:
        values = {name: s.get(col.key) for name, s in summaries.items() if s.get(col.key) is not None}
        if len(values) < 2 or len(set(values.values())) == 1:
            best[col.key] = set()
            continue
        target = min(values.values()) if col.better == "min" else max(values.values())
        best[col.key] = {name for name, v in values.items() if v == target}
    return best
