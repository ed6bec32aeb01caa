"""The event core: a heap of timed callbacks, ordered by (time, kind, sequence) so runs are deterministic.

At equal time, finishes and repairs come before failures, then arrivals, then the scheduling tick."""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from enum import IntEnum
from typing import Any


class Kind(IntEnum):
    """Event kinds in the order they are handled at equal time."""

    FINISH = 0
    REPAIR = 1
    FAILURE = 2
    ARRIVAL = 3
    TICK = 4


class Engine:
    """A heap plus a counter. `at` schedules a plain callback; `run` calls them in order until the heap is empty
    or `until_s` is reached. An exception in a callback stops the run and propagates: no failure is swallowed."""

    def __init__(self) -> None:
        self.now_s = 0.0
        self._heap: list[tuple[float, int, int, Callable[..., Any], tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self._cancelled: set[int] = set()
        self.events_handled = 0

    def at(self, time_s: float, kind: Kind, callback: Callable[..., Any], *args: Any) -> int:
        """Call `callback(*args)` at `time_s` (not before now). Returns a token for `cancel`."""
        if time_s < self.now_s:
            raise ValueError(f"cannot schedule an event in the past ({time_s} < {self.now_s})")
        if math.isnan(time_s):
            raise ValueError("event time is NaN")
        seq = next(self._seq)
        heapq.heappush(self._heap, (time_s, int(kind), seq, callback, args))
        return seq

    def cancel(self, token: int) -> None:
        self._cancelled.add(token)

    def peek_s(self) -> float:
        """Time of the earliest event in the heap (it may be a cancelled one); inf when the heap is empty."""
        return self._heap[0][0] if self._heap else math.inf

    def __len__(self) -> int:
        return len(self._heap) - len(self._cancelled)

    def run(self, until_s: float = math.inf) -> None:
        heap, cancelled = self._heap, self._cancelled
        while heap and heap[0][0] <= until_s:
            time_s, _, seq, callback, args = heapq.heappop(heap)
            if seq in cancelled:
                cancelled.discard(seq)
                continue
            self.now_s = time_s
            self.events_handled += 1
            callback(*args)
