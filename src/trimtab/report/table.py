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


COLUMNS: tuple[Column, ...] = (
    Column("jobs_completed", "done", "max", "{:d}"),
    Column("avg_jct_s", "avg JCT s", "min", "{:.0f}"),
    Column("p50_jct_s", "p50 JCT s", "min", "{:.0f}"),
    Column("p99_jct_s", "p99 JCT s", "min", "{:.0f}"),
    Column("avg_wait_s", "avg wait s", "min", "{:.0f}"),
    Column("throughput_cv", "thru CV", "min", "{:.3f}"),
    Column("goodput_cv", "goodput CV", "min", "{:.3f}"),
    Column("gpu_util", "GPU util", "max", "{:.3f}"),
    Column("backlogged_util", "util|backlog", "max", "{:.3f}"),
    Column("starvation_rate", "starved", "min", "{:.3f}"),
    Column("preemptions", "preempt", "min", "{:d}"),
    Column("evicted_gpus_per_needed_gpu", "evicted/needed", "min", "{:.2f}"),
    Column("wasted_gpu_hours", "wasted GPU h", "min", "{:.1f}"),
    Column("sched_cycle_p99_ms", "cycle p99 ms", "min", "{:.2f}"),
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
