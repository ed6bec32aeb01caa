"""Simulated runs: the world that feeds a Scheduler events from a trace and applies its Decisions, and `compare`,
which runs several policies on the same cluster and workload, in parallel on the local cores."""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from trimtab.cluster import Allocation, ClusterState
from trimtab.framework import Profile
from trimtab.metrics import Recorder
from trimtab.model import Job, JobState, Node, Outcome
from trimtab.scheduler import Scheduler
from trimtab.sim.engine import Engine, Kind
from trimtab.sim.speed import ReferenceSpeed, SpeedModel


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Assumptions of a simulated run.

    checkpoint_s: each job checkpoints every `checkpoint_s` seconds of progress; a preempted or failed attempt
        keeps only the progress up to its last checkpoint. 0 means nothing is ever lost (a preempted job is
        suspended and resumed, as Tiresias's simulator assumes).
    restart_s: time a restarted attempt spends before it makes progress again (reload, warm-up).
    window_s: width of the windows of the time series (DESIGN.md metrics).
    timing: record the wall-clock cost of the scheduler (the only numbers that differ between identical runs)."""

    seed: int = 0
    checkpoint_s: float = 600.0
    restart_s: float = 30.0
    window_s: float = 3600.0
    timing: bool = True

    def __post_init__(self) -> None:
        if self.checkpoint_s < 0 or self.restart_s < 0:
            raise ValueError("checkpoint_s and restart_s must be >= 0")


@dataclass(slots=True)
class _Attempt:
    token: int
    executed_before_s: float
    progress_from_s: float
    slowdown: float


class _World:
    """Applies arrivals, finishes and the scheduler's Decisions on the event heap."""

    def __init__(self, nodes: Sequence[Node], profile: Profile, config: SimConfig, speed: SpeedModel) -> None:
        self.engine = Engine()
        self.cluster = ClusterState(nodes)
        self.scheduler = Scheduler(self.cluster, profile, seed=config.seed)
        self.recorder = Recorder(self.cluster, config.window_s)
        self.config = config
        self.speed = speed
        self.attempts: dict[str, _Attempt] = {}
        self.ticks: set[float] = set()
        self.done = 0

    def arrive(self, job: Job) -> None:
        now = self.engine.now_s
        self.scheduler.submit(job, now)
        self.recorder.submitted(job, now)
        self.want_cycle(now)

    def want_cycle(self, time_s: float) -> None:
        if time_s not in self.ticks:
            self.ticks.add(time_s)
            self.engine.at(time_s, Kind.TICK, self.tick, time_s)

    def tick(self, time_s: float) -> None:
        self.ticks.discard(time_s)
        ran = self.scheduler.cycles_run
        t0 = time.perf_counter()
        decision = self.scheduler.cycle(time_s)
        wall_ms = (time.perf_counter() - t0) * 1000.0
        if self.scheduler.cycles_run != ran:
            self.recorder.cycle(wall_ms, len(decision.starts) + len(decision.preemptions))
        for victim in decision.preemptions:
            self.stop(victim, Outcome.PREEMPTED)
        for job, alloc in decision.starts:
            self.start(job, alloc)
        if decision.wake_s is not None and decision.wake_s > time_s:
            self.want_cycle(decision.wake_s)

    def start(self, job: Job, alloc: Allocation) -> None:
        now = self.engine.now_s
        before = self.scheduler.running[job.id].prior_executed_s
        restart = self.config.restart_s if self.recorder.jobs[job.id].runs else 0.0
        slowdown = self.speed.slowdown(job, alloc, self.cluster)
        progress_from = now + restart
        assert job.duration_s is not None
        finish = progress_from + (job.duration_s - before) * slowdown
        token = self.engine.at(finish, Kind.FINISH, self.finish, job.id)
        self.attempts[job.id] = _Attempt(token, before, progress_from, slowdown)
        self.recorder.run_started(job, alloc, now, progress_from, slowdown)

    def stop(self, job_id: str, outcome: Outcome) -> None:
        """A preempted attempt (the scheduler has already queued the job again): keep progress to the last
        checkpoint."""
        now = self.engine.now_s
        att = self.attempts.pop(job_id)
        self.engine.cancel(att.token)
        executed = att.executed_before_s + max(now - att.progress_from_s, 0.0) / att.slowdown
        kept = self._checkpointed(executed, att.executed_before_s)
        self.scheduler.credit(job_id, kept)
        self.recorder.run_ended(job_id, now, outcome, kept - att.executed_before_s, requeued=True)

    def _checkpointed(self, executed_s: float, before_s: float) -> float:
        step = self.config.checkpoint_s
        if step == 0:
            return executed_s
        return max(before_s, math.floor(executed_s / step) * step)

    def finish(self, job_id: str) -> None:
        now = self.engine.now_s
        att = self.attempts.pop(job_id)
        job = self.scheduler.jobs[job_id]
        assert job.duration_s is not None
        self.scheduler.stopped(job_id, now, JobState.COMPLETED, executed_s=job.duration_s)
        self.recorder.run_ended(job_id, now, Outcome.COMPLETED, job.duration_s - att.executed_before_s,
                                requeued=False)
        self.recorder.ended(job_id, now, JobState.COMPLETED)
        self.done += 1
        self.want_cycle(now)


def simulate(nodes: Sequence[Node], jobs: Sequence[Job], profile: Profile | str,
             config: SimConfig | None = None, speed: SpeedModel | None = None,
             progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Replay `jobs` on a cluster of `nodes` under `profile` and return the run record (`summary`, `series`,
    `jobs`, and the `config` and `policy` it ran with). Every job must have a reference duration. `progress`, if
    given, is called now and then with (jobs finished, jobs in all)."""
    config = config or SimConfig()
    profile = profile if isinstance(profile, Profile) else Profile.load(profile)
    world = _World(nodes, profile, config, speed or ReferenceSpeed())
    total_gpus = world.cluster.total_gpus
    for job in jobs:
        if job.duration_s is None:
            raise ValueError(f"job {job.id}: a simulated job needs a reference duration")
        if job.gpus > total_gpus:
            raise ValueError(f"job {job.id} asks for {job.gpus} GPUs; the cluster has {total_gpus}")
    for job in sorted(jobs, key=lambda j: j.submit_s):
        world.engine.at(job.submit_s, Kind.ARRIVAL, world.arrive, job)
    if progress is None:
        world.engine.run()
    else:
        step = max(len(jobs) // 200, 1)
        next_report = step
        while len(world.engine):
            horizon = world.engine._heap[0][0]
            world.engine.run(until_s=horizon)
            if world.done >= next_report:
                progress(world.done, len(jobs))
                next_report = world.done + step
        progress(world.done, len(jobs))
    result = world.recorder.result(timing=config.timing)
    return {"policy": profile.name, "config": asdict(config), **result}


_SHARED: list[tuple[Sequence[Node], Sequence[Job], Profile, SimConfig]] = []


def _simulate_shared(index: int) -> dict[str, Any]:
    return simulate(*_SHARED[index])


def compare(nodes: Sequence[Node], jobs: Sequence[Job], policies: Sequence[Profile | str],
            config: SimConfig | None = None, workers: int | None = None) -> dict[str, dict[str, Any]]:
    """Run each policy on the same cluster and workload; returns run records by policy name, in the given order.
    Runs go to forked processes, up to `workers` (default: the local cores) at a time; the inputs are inherited,
    not pickled, so a large trace costs nothing to hand over."""
    config = config or SimConfig()
    profiles = [p if isinstance(p, Profile) else Profile.load(p) for p in policies]
    names = [p.name for p in profiles]
    if len(set(names)) != len(names):
        raise ValueError(f"policies named twice: {names}")
    workers = min(workers or os.cpu_count() or 1, len(profiles))
    tasks = [(nodes, jobs, p, config) for p in profiles]
    if workers <= 1 or "fork" not in mp.get_all_start_methods():
        results = [simulate(*t) for t in tasks]
    else:
        _SHARED[:] = tasks
        try:
            with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork")) as pool:
                results = list(pool.map(_simulate_shared, range(len(tasks))))
        finally:
            _SHARED.clear()
    return dict(zip(names, results, strict=True))
