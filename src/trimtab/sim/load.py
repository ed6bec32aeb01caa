"""Load swings of a simulated run: arrival-rate scaling (`--load`) and bursts (`--burst 3x@10h+1h`).

Owns the time warps that move submission times; the set of jobs is unchanged, only when they arrive."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from trimtab.model import Job
from trimtab.units import parse_duration_s

_BURST = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*x\s*@\s*([^+]+)\+\s*(.+)$")


@dataclass(frozen=True, slots=True)
class Burst:
    """From `start_s` for `length_s` seconds, jobs arrive `factor` times as fast: the jobs that would have arrived
    in the `factor x length_s` seconds after `start_s` arrive within the burst, and later ones `(factor - 1) x
    length_s` earlier than they would have."""

    factor: float
    start_s: float
    length_s: float

    @classmethod
    def parse(cls, spec: str) -> Burst:
        """`FACTORx@START+LENGTH`, e.g. `3x@10h+1h` (durations as in --faults: s, m, h, d)."""
        match = _BURST.match(spec)
        if not match:
            raise ValueError(f"burst {spec!r}: expected FACTORx@START+LENGTH, e.g. 3x@10h+1h")
        burst = cls(float(match[1]), parse_duration_s(match[2], "burst start"),
                    parse_duration_s(match[3], "burst length"))
        if burst.factor <= 0 or burst.length_s <= 0:
            raise ValueError(f"burst {spec!r}: factor and length must be > 0")
        return burst

    def warp(self, t_s: float) -> float:
        a, m, d = self.start_s, self.factor, self.length_s
        if t_s <= a:
            return t_s
        if t_s < a + m * d:
            return a + (t_s - a) / m
        return t_s - (m - 1.0) * d


def apply_load(jobs: Sequence[Job], load: float = 1.0, bursts: Sequence[Burst] = ()) -> list[Job]:
    """The jobs with submission times scaled by 1 / `load` (1.5: arrivals 1.5x as fast), then warped by each
    burst in turn (burst times are on the scaled clock). Nothing changes at load 1 without bursts."""
    if load <= 0:
        raise ValueError(f"load must be > 0, got {load}")
    if load == 1.0 and not bursts:
        return list(jobs)
    out = []
    for job in jobs:
        t = job.submit_s / load
        for burst in bursts:
            t = burst.warp(t)
        out.append(replace(job, submit_s=t))
    return out
