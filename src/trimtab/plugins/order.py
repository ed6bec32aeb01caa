"""Queue-order plugins: each gives a job a sort key; lower goes first, and the profile chains them.

fifo (arrival), sjf (fewest GPUs), srtf (least reference time left), las (Tiresias's discretised 2D-LAS), priority,
qssf (Helios: least predicted service, learned online)."""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Sequence
from statistics import median
from typing import ClassVar

from trimtab.model import Job
from trimtab.policy import CycleContext, Plugin


class Fifo(Plugin):
    """Earlier submission first."""

    def order_key(self, job: Job, ctx: CycleContext) -> float:
        return job.submit_s


class Sjf(Plugin):
    """Smallest job first: fewer GPUs first."""

    def order_key(self, job: Job, ctx: CycleContext) -> int:
        return job.gpus


class Priority(Plugin):
    """Higher priority first."""

    def order_key(self, job: Job, ctx: CycleContext) -> int:
        return -job.priority


class Srtf(Plugin):
    """Shortest remaining reference time first (an oracle: it reads each job's duration). A running job's key falls
    as it runs, so running jobs' keys are recomputed every cycle."""

    dynamic_running_key: ClassVar[bool] = True

    def order_key(self, job: Job, ctx: CycleContext) -> float:
        return ctx.remaining_s(job)

    def running_order_keys(self, jobs: Sequence[Job], ctx: CycleContext) -> list[float]:
        """`ctx.remaining_s` of each running job, its arithmetic written out (the same floats): asked every cycle
        for every running job."""
        now_s, running, keys = ctx.now_s, ctx.running, []
        for job in jobs:
            if job.duration_s is None:
                keys.append(math.inf)
                continue
            run = running[job.id]
            keys.append(max(job.duration_s - (run.prior_executed_s + (now_s - run.start_s)), 0.0))
        return keys


class Las(Plugin):
    """Discretised least-attained-service (Tiresias 2D-LAS): a job's queue is the number of thresholds its attained
    service (GPUs x seconds run, over all its runs) has passed. Queue 0 first; the `fifo` plugin after it in the
    profile orders jobs inside a queue. With thresholds (3250, 7200) there are three queues.

    `aging_slowdown` (None: off; > 1) is aging against starvation: a job whose time since submission has reached
    `aging_slowdown` times the run time it has to its credit is in queue 0, waiting or running, until it has run
    enough to be back under. A long job demoted to the last queue thus cannot be passed over for ever: its slowdown
    stays near `aging_slowdown` at worst, as long as the aged jobs together fit the cluster."""

    _EPS_GPU_S: ClassVar[float] = 1e-6  # crossing times are computed, so forgive rounding at the boundary
    _EPS_S: ClassVar[float] = 1e-6

    def __init__(self, thresholds_gpu_s: Sequence[float] = (3250.0, 7200.0),
                 aging_slowdown: float | None = None) -> None:
        self.thresholds_gpu_s = sorted(float(t) for t in thresholds_gpu_s)
        if any(t <= 0 for t in self.thresholds_gpu_s):
            raise ValueError("las thresholds_gpu_s must be positive")
        if aging_slowdown is not None and aging_slowdown <= 1:
            raise ValueError("las aging_slowdown must be above 1 (or null: no aging)")
        self.aging_slowdown = aging_slowdown

    def queue_of(self, attained_gpu_s: float) -> int:
        return bisect.bisect_right(self.thresholds_gpu_s, attained_gpu_s + self._EPS_GPU_S)

    def _aged(self, job: Job, ctx: CycleContext) -> bool:
        return (self.aging_slowdown is not None
                and ctx.now_s - job.submit_s + self._EPS_S >= self.aging_slowdown * ctx.executed_s(job.id))

    def order_key(self, job: Job, ctx: CycleContext) -> int:
        level = self.queue_of(ctx.attained_gpu_s(job.id))
        return 0 if level and self._aged(job, ctx) else level

    def pending_key_expires_s(self, job: Job, ctx: CycleContext) -> float:
        if self.aging_slowdown is None or self._aged(job, ctx) or not self.queue_of(ctx.attained_gpu_s(job.id)):
            return math.inf
        return job.submit_s + self.aging_slowdown * ctx.executed_s(job.id)  # its run time stays put while it waits

    def key_expires_s(self, job: Job, ctx: CycleContext) -> float:
        run = ctx.running.get(job.id)
        if run is None or run.alloc.gpus == 0:
            return math.inf
        attained = ctx.attained_gpu_s(job.id)
        level = self.queue_of(attained)
        expiry = math.inf
        if level < len(self.thresholds_gpu_s):
            expiry = ctx.now_s + (self.thresholds_gpu_s[level] - attained) / run.alloc.gpus
        if level and self.aging_slowdown is not None and self._aged(job, ctx):
            # aged while it runs until t - submit = a x (executed now + t - now): its run time grows faster
            a = self.aging_slowdown
            ends_s = (a * (ctx.now_s - ctx.executed_s(job.id)) - job.submit_s + self._EPS_S) / (a - 1)
            expiry = min(expiry, max(ends_s, ctx.now_s + 1.0))  # a second at least: no refresh loop at the edge
        return expiry


class Qssf(Plugin):
    """Quasi-shortest-service-first (Helios): smallest predicted service (GPUs x predicted duration) first, with no
    oracle. A job's duration is predicted when it is queued, as the median run time of the last `window` completed
    jobs of the same tenant, user and job type, falling back to tenant and user, then tenant, then every job, then
    `default_s`. It learns online from `ctx.history` (completed jobs in completion order)."""

    def __init__(self, window: int = 50, default_s: float = 3600.0) -> None:
        if window < 1 or default_s <= 0:
            raise ValueError("qssf needs window >= 1 and default_s > 0")
        self.window = window
        self.default_s = float(default_s)
        self._seen = 0
        self._runs: dict[tuple[str, ...], deque[float]] = {}
        self._predicted: dict[tuple[str, ...], float] = {}  # by a job's first key, until the history grows

    def _learn(self, ctx: CycleContext) -> None:
        history = ctx.history
        if len(history) == self._seen:
            return
        for job, run_s in history[self._seen:]:
            for key in self._keys(job):
                self._runs.setdefault(key, deque(maxlen=self.window)).append(run_s)
        self._seen = len(history)
        self._predicted.clear()

    @staticmethod
    def _keys(job: Job) -> tuple[tuple[str, ...], ...]:
        return (("t", job.tenant, job.user, job.job_type), ("u", job.tenant, job.user), ("n", job.tenant), ("*",))

    def predict_s(self, job: Job, ctx: CycleContext) -> float:
        self._learn(ctx)
        keys = self._keys(job)
        predicted = self._predicted.get(keys[0])
        if predicted is None:
            runs = next((runs for key in keys if (runs := self._runs.get(key))), None)
            predicted = self._predicted[keys[0]] = float(median(runs)) if runs else self.default_s
        return predicted

    def order_key(self, job: Job, ctx: CycleContext) -> float:
        return max(job.gpus, 1) * self.predict_s(job, ctx)


PLUGINS = {"fifo": Fifo, "sjf": Sjf, "srtf": Srtf, "las": Las, "priority": Priority, "qssf": Qssf}
