"""Simulated runs: the world that feeds a Scheduler events from a trace and applies its Decisions, and `compare`,
which runs several policies on the same cluster and workload, in parallel on the local cores.

The world also owns what happens to jobs from outside the scheduler: faults, retries, data loads, load swings."""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from trimtab.cluster import Allocation, ClusterState
from trimtab.metrics import Recorder
from trimtab.model import Job, JobState, Node, Outcome
from trimtab.plugins import MODULES, dynamics
from trimtab.profile import Profile, Registry
from trimtab.scheduler import Scheduler
from trimtab.sim.data import DataConfig, DataModel, NetMeter, assign_datasets
from trimtab.sim.engine import Engine, Kind
from trimtab.sim.faults import Faults, FaultSpec
from trimtab.sim.load import Burst, apply_load
from trimtab.sim.speed import (
    CompositeSpeed,
    GpuModelSpeed,
    GpuThroughputs,
    ReferenceSpeed,
    SpeedModel,
    TopologySpeed,
)

# Share of a node link (and of each rack uplink a gang spans) that a multi-node gang of communication
# sensitivity 1 keeps busy with its own traffic: an ASSUMPTION for net_util only (it does not change run times).
GANG_LINK_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Assumptions of a simulated run.

    checkpoint_s: each job checkpoints every `checkpoint_s` seconds of progress (a job's own `checkpoint_s`
        overrides it); a preempted or failed attempt keeps only the progress up to its last checkpoint. 0 means
        nothing is ever lost (a preempted job is suspended and resumed, as Tiresias's simulator assumes).
    restart_s: time a restarted attempt spends before it makes progress again (reload, warm-up).
    window_s: width of the windows of the time series (DESIGN.md metrics).
    timing: record the wall-clock cost of the scheduler (the only numbers that differ between identical runs).
    faults: a `--faults` spec (sim/faults.py: inline `node-mtbf=7d,...` or a YAML path); "" for none.
    speed: the run-time models, comma-separated (`reference` when empty): `topology` (gang spread, NVLink islands,
        racks), `gpus=PATH` (GPU-model throughputs: Gavel's JSON or a YAML table), `data` (datasets, node caches,
        loads; keys cache-gb, node-link-gb-s, uplink-gb-s, datasets, dataset-min-gb, dataset-max-gb set its
        DataConfig), island-gpus=N.
    load: arrival-rate factor (1.5: jobs arrive 1.5 times as fast). bursts: `--burst` specs such as `3x@10h+1h`."""

    seed: int = 0
    checkpoint_s: float = 600.0
    restart_s: float = 30.0
    window_s: float = 3600.0
    timing: bool = True
    faults: str = ""
    speed: str = ""
    load: float = 1.0
    bursts: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.checkpoint_s < 0 or self.restart_s < 0:
            raise ValueError("checkpoint_s and restart_s must be >= 0")
        if self.load <= 0:
            raise ValueError(f"load must be > 0, got {self.load}")
        self.fault_spec()
        self.speed_parts()
        [Burst.parse(b) for b in self.bursts]

    def fault_spec(self) -> FaultSpec | None:
        if not self.faults:
            return None
        spec = FaultSpec.parse(self.faults)
        if "seed" not in self.faults and not self.faults.endswith((".yaml", ".yml")):
            spec = FaultSpec(**{**{f: getattr(spec, f) for f in spec.__dataclass_fields__}, "seed": self.seed})
        return spec

    def speed_parts(self) -> tuple[set[str], dict[str, str]]:
        """The enabled models and the key=value settings of `speed`."""
        names: set[str] = set()
        settings: dict[str, str] = {}
        for item in self.speed.split(","):
            item = item.strip()
            if not item or item == "reference":
                continue
            key, eq, value = (p.strip() for p in item.partition("="))
            if eq:
                settings[key] = value
                if key == "gpus":
                    names.add("gpus")
            elif key in ("topology", "data"):
                names.add(key)
            else:
                raise ValueError(f"speed {self.speed!r}: unknown model {key!r} (topology, gpus=PATH, data, "
                                 "reference, or key=value settings)")
        known = {"gpus", "island-gpus", "reference-gpu", *(_DATA_KEYS)}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise ValueError(f"speed {self.speed!r}: unknown setting(s) {', '.join(unknown)}; "
                             f"known: {', '.join(sorted(known))}")
        if "gpus" in settings and not settings["gpus"]:
            raise ValueError("speed gpus=PATH needs a throughput table path")
        return names, settings


_DATA_KEYS = {"cache-gb": "cache_gb", "node-link-gb-s": "node_link_gb_s", "uplink-gb-s": "uplink_gb_s",
              "datasets": "datasets", "dataset-min-gb": "dataset_min_gb", "dataset-max-gb": "dataset_max_gb"}


def data_config(config: SimConfig) -> DataConfig | None:
    names, settings = config.speed_parts()
    if "data" not in names:
        return None
    kwargs: dict[str, Any] = {"seed": config.seed}
    for key, name in _DATA_KEYS.items():
        if key in settings:
            kwargs[name] = int(settings[key]) if name == "datasets" else float(settings[key])
    return DataConfig(**kwargs)


@dataclass(slots=True)
class _Attempt:
    token: int
    executed_before_s: float
    progress_from_s: float
    slowdown: float
    alloc: Allocation
    net_busy: float = 0.0


class _World:
    """Applies arrivals, finishes, faults and the scheduler's Decisions on the event heap."""

    def __init__(self, nodes: Sequence[Node], profile: Profile, config: SimConfig, speed: SpeedModel | None,
                 total_jobs: int) -> None:
        self.engine = Engine()
        self.cluster = ClusterState(nodes)
        self.signals = dynamics.Signals()
        factories = {n: f for m in MODULES for n, f in m.PLUGINS.items()}
        factories.update(dynamics.plugins(self.signals))
        self.scheduler = Scheduler(self.cluster, profile, Registry(factories), seed=config.seed)
        self.recorder = Recorder(self.cluster, config.window_s)
        self.config = config
        self.total_jobs = total_jobs
        self.attempts: dict[str, _Attempt] = {}
        self.ticks: set[float] = set()
        self.done = 0
        self.own_failures: dict[str, int] = {}
        names, settings = config.speed_parts()
        models: list[SpeedModel] = []
        self.topology: TopologySpeed | None = None
        if "topology" in names:
            self.topology = TopologySpeed(island_gpus=int(settings.get("island-gpus", 4)))
            models.append(self.topology)
        if "gpus" in names:
            table = GpuThroughputs.load(settings["gpus"], settings.get("reference-gpu", "v100"))
            models.append(GpuModelSpeed(table))
            gpu_models = self.cluster.gpu_models
            cache: dict[tuple[str, int], np.ndarray] = {}

            def gpu_speeds(job: Job) -> np.ndarray:
                key = (job.job_type, job.tasks)
                if key not in cache:
                    cache[key] = table.speeds(job.job_type, job.tasks, gpu_models)
                return cache[key]

            self.signals.gpu_speeds = gpu_speeds
        self.speed: SpeedModel = speed or (models[0] if len(models) == 1 else
                                           CompositeSpeed(models) if models else ReferenceSpeed())
        dcfg = data_config(config)
        self.meter: NetMeter | None = None
        if dcfg is not None or self.topology is not None:
            self.meter = NetMeter()
            links = len(self.cluster) + len(self.cluster.racks)
            meter = self.meter
            self.recorder.net_util_fn = lambda first, end: meter.mean(first, end, links)
        self.data: DataModel | None = None
        if dcfg is not None:
            self.data = DataModel(self.cluster, dcfg, self.meter)
            self.signals.cached = self.data.cached_mask
        spec = config.fault_spec()
        self.faults: Faults | None = Faults(spec, self.cluster) if spec is not None and spec.active else None
        self.max_retries = spec.max_retries if spec is not None else 0
        self.down = np.zeros(len(self.cluster), dtype=np.int64)  # reasons each node is out (failure, rack, leave)
        self.observe_speeds = not isinstance(self.speed, ReferenceSpeed) or self.faults is not None
        if self.faults is not None:
            self._plan_faults()

    # ------------------------------------------------------------------------------------------------ jobs

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
            self.recorder.waiting(time_s, decision.waiting)
        for victim in decision.preemptions:
            self.stop(victim, Outcome.PREEMPTED)
        for job, alloc in decision.starts:
            self.start(job, alloc)
        if self.signals.prefetch_requests:
            if self.data is not None:
                for job, targets in self.signals.prefetch_requests:
                    for node in targets:
                        self.data.prefetch(job.dataset, job.dataset_gb, int(node), time_s)
            self.signals.prefetch_requests.clear()
        if decision.wake_s is not None and decision.wake_s > time_s:
            self.want_cycle(decision.wake_s)

    def start(self, job: Job, alloc: Allocation) -> None:
        now = self.engine.now_s
        before = self.scheduler.running[job.id].prior_executed_s
        attempt = len(self.recorder.jobs[job.id].runs)
        restart = self.config.restart_s if attempt else 0.0
        slowdown = self.speed.slowdown(job, alloc, self.cluster)
        progress_from = now + restart
        if self.data is not None:
            progress_from += self.data.delay_s(job.dataset, job.dataset_gb, alloc.nodes, now)
        assert job.duration_s is not None
        left_s = (job.duration_s - before) * slowdown
        fail_at = self.faults.job_failure_point(job.id, attempt) if self.faults is not None else None
        if fail_at is None:
            token = self.engine.at(progress_from + left_s, Kind.FINISH, self.finish, job.id)
        else:
            token = self.engine.at(progress_from + fail_at * left_s, Kind.FAILURE, self.job_failed, job.id)
        att = _Attempt(token, before, progress_from, slowdown, alloc)
        if self.meter is not None and len(alloc.nodes) > 1:
            sens = self.topology.sensitivity_of(job.job_type) if self.topology is not None else 0.5
            att.net_busy = GANG_LINK_SHARE * sens
            self._gang_traffic(now, alloc, att.net_busy)
        self.attempts[job.id] = att
        self.recorder.run_started(job, alloc, now, progress_from, slowdown)

    def _end_attempt(self, job_id: str, fired: bool = False) -> tuple[_Attempt, float]:
        """Close the running attempt of a job (`fired`: by its own end event, which is then not cancelled);
        returns it and the progress (reference seconds) it has made."""
        now = self.engine.now_s
        att = self.attempts.pop(job_id)
        if not fired:
            self.engine.cancel(att.token)
        if att.net_busy:
            self._gang_traffic(now, att.alloc, -att.net_busy)
        executed = att.executed_before_s + max(now - att.progress_from_s, 0.0) / att.slowdown
        return att, executed

    def _gang_traffic(self, now_s: float, alloc: Allocation, share: float) -> None:
        """A multi-node gang's own traffic: `share` of each of its node links, and of each rack uplink it spans
        when it spans several racks."""
        assert self.meter is not None
        for node in alloc.nodes:
            self.meter.change(now_s, int(node), share)
        racks = np.unique(self.cluster.rack_idx[alloc.nodes])
        if racks.size > 1:
            for rack in racks:
                self.meter.change(now_s, len(self.cluster) + int(rack), share)

    def stop(self, job_id: str, outcome: Outcome) -> None:
        """A preempted attempt (the scheduler has already queued the job again): keep progress to the last
        checkpoint."""
        att, executed = self._end_attempt(job_id)
        kept = self._checkpointed(job_id, executed, att.executed_before_s)
        self.scheduler.credit(job_id, kept)
        self.recorder.run_ended(job_id, self.engine.now_s, outcome, kept - att.executed_before_s, requeued=True)

    def interrupt(self, job_id: str, outcome: Outcome) -> None:
        """The world stops a running attempt (a node or GPU under it failed, or its node left): it keeps progress
        to its last checkpoint and is queued again at once, to run on healthy nodes (failover)."""
        now = self.engine.now_s
        att, executed = self._end_attempt(job_id)
        kept = self._checkpointed(job_id, executed, att.executed_before_s)
        self.scheduler.stopped(job_id, now, JobState.PENDING, executed_s=kept)
        self.recorder.run_ended(job_id, now, outcome, kept - att.executed_before_s, requeued=True)
        self.want_cycle(now)

    def job_failed(self, job_id: str) -> None:
        """An attempt failed on its own: retry after a backoff while retries are left, else the job FAILED."""
        now = self.engine.now_s
        att, executed = self._end_attempt(job_id, fired=True)
        kept = self._checkpointed(job_id, executed, att.executed_before_s)
        job = self.scheduler.jobs[job_id]
        failures = self.own_failures[job_id] = self.own_failures.get(job_id, 0) + 1
        limit = job.max_retries if job.max_retries is not None else self.max_retries
        useful = kept - att.executed_before_s
        if failures <= limit:
            assert self.faults is not None
            backoff = self.faults.backoff_s(failures)
            self.scheduler.stopped(job_id, now, JobState.PENDING, executed_s=kept, enqueue=backoff <= 0)
            if backoff > 0:
                self.engine.at(now + backoff, Kind.ARRIVAL, self.retry, job_id)
            self.recorder.run_ended(job_id, now, Outcome.FAILED, useful, requeued=True)
        else:
            self.scheduler.stopped(job_id, now, JobState.FAILED, executed_s=kept)
            self.recorder.run_ended(job_id, now, Outcome.FAILED, useful, requeued=False)
            self.recorder.ended(job_id, now, JobState.FAILED)
            self.done += 1
        self.want_cycle(now)

    def retry(self, job_id: str) -> None:
        self.scheduler.resume(job_id, self.engine.now_s)
        self.want_cycle(self.engine.now_s)

    def _checkpointed(self, job_id: str, executed_s: float, before_s: float) -> float:
        own = self.scheduler.jobs[job_id].checkpoint_s
        step = self.config.checkpoint_s if own is None else own
        if step == 0:
            return executed_s
        return max(before_s, math.floor(executed_s / step) * step)

    def finish(self, job_id: str) -> None:
        now = self.engine.now_s
        att, _ = self._end_attempt(job_id, fired=True)
        job = self.scheduler.jobs[job_id]
        assert job.duration_s is not None
        self.scheduler.stopped(job_id, now, JobState.COMPLETED, executed_s=job.duration_s)
        self.recorder.run_ended(job_id, now, Outcome.COMPLETED, job.duration_s - att.executed_before_s,
                                requeued=False)
        self.recorder.ended(job_id, now, JobState.COMPLETED)
        if self.observe_speeds:
            self.signals.observed_speed(job.job_type, att.alloc.nodes, 1.0 / att.slowdown, len(self.cluster))
        self.done += 1
        self.want_cycle(now)

    # ------------------------------------------------------------------------------------------------ faults

    @property
    def over(self) -> bool:
        """Every job reached a terminal state: faults stop drawing (else the heap would never empty)."""
        return self.done >= self.total_jobs

    def _plan_faults(self) -> None:
        faults = self.faults
        assert faults is not None
        at = self.engine.at
        for i in range(len(self.cluster)):
            at(faults.next_node_failure_s(i), Kind.FAILURE, self.node_failed, i)
            at(faults.next_gpu_failure_s(i), Kind.FAILURE, self.gpu_failed, i, True, math.inf)
        for r in range(len(self.cluster.racks)):
            at(faults.next_rack_failure_s(r), Kind.FAILURE, self.rack_failed, r, True, math.inf)
        for event in faults.spec.schedule:
            if event.kind == "rack":
                if event.target not in self.cluster.racks:
                    raise ValueError(f"faults schedule: unknown rack {event.target!r}")
                at(event.at_s, Kind.FAILURE, self.rack_failed, self.cluster.racks.index(event.target), False,
                   event.for_s)
                continue
            node = self.cluster.index.get(event.target)
            if node is None:
                raise ValueError(f"faults schedule: unknown node {event.target!r}")
            if event.kind == "node":
                at(event.at_s, Kind.FAILURE, self.take_down, node, Outcome.NODE_FAILED, event.for_s)
            elif event.kind == "leave":
                at(event.at_s, Kind.FAILURE, self.take_down, node, Outcome.PREEMPTED, event.for_s)
            elif event.kind == "gpu":
                at(event.at_s, Kind.FAILURE, self.gpu_failed, node, False, event.for_s)
            else:  # join: out from the start until then
                self._down(node, Outcome.PREEMPTED)
                at(event.at_s, Kind.REPAIR, self.bring_up, node)
                if math.isfinite(event.for_s):
                    at(event.at_s + event.for_s, Kind.FAILURE, self.take_down, node, Outcome.PREEMPTED, math.inf)

    def _down(self, node: int, outcome: Outcome) -> None:
        self.down[node] += 1
        if self.down[node] == 1:
            for job_id in self.scheduler.node_down(self.cluster.nodes[node].name):
                self.interrupt(job_id, outcome)
        if outcome is Outcome.NODE_FAILED:
            self.signals.size(len(self.cluster))
            self.signals.node_failed(node, self.engine.now_s)

    def bring_up(self, node: int) -> None:
        self.down[node] -= 1
        if self.down[node] == 0:
            self.scheduler.node_up(self.cluster.nodes[node].name)
            self.want_cycle(self.engine.now_s)

    def take_down(self, node: int, outcome: Outcome, for_s: float) -> None:
        """A scheduled failure or leave of `node` for `for_s` seconds."""
        if self.over:
            return
        self._down(node, outcome)
        if math.isfinite(for_s):
            self.engine.at(self.engine.now_s + for_s, Kind.REPAIR, self.bring_up, node)
        self.want_cycle(self.engine.now_s)

    def node_failed(self, node: int) -> None:
        """A random node failure: down for a repair time, then its next failure is drawn."""
        if self.over:
            return
        assert self.faults is not None
        self._down(node, Outcome.NODE_FAILED)
        self.engine.at(self.engine.now_s + self.faults.node_repair_s(node), Kind.REPAIR, self.node_repaired, node)
        self.want_cycle(self.engine.now_s)

    def node_repaired(self, node: int) -> None:
        assert self.faults is not None
        self.bring_up(node)
        if not self.over:
            self.engine.at(self.engine.now_s + self.faults.next_node_failure_s(node), Kind.FAILURE,
                           self.node_failed, node)

    def gpu_failed(self, node: int, random: bool, for_s: float) -> None:
        """One GPU of `node` fails; the job on it, if any, is interrupted; the node runs on with one GPU less."""
        if self.over:
            return
        faults = self.faults
        assert faults is not None
        now = self.engine.now_s
        if random:
            self.engine.at(now + faults.next_gpu_failure_s(node), Kind.FAILURE, self.gpu_failed, node, True,
                           math.inf)
        failed = int(self.scheduler.failed_gpus[node])
        in_service = int(self.cluster.cap_gpus[node]) - failed
        if self.down[node] or in_service <= 0:
            return
        busy = [(jid, int(att.alloc.counts[np.searchsorted(att.alloc.nodes, node)]) * att.alloc.task.gpus)
                for jid, att in self.attempts.items() if node in att.alloc.nodes]
        victim = faults.gpu_victim(node, in_service, busy)
        if victim is not None:
            self.interrupt(victim, Outcome.NODE_FAILED)
        self.scheduler.gpu_down(self.cluster.nodes[node].name)
        self.signals.size(len(self.cluster))
        self.signals.node_failed(node, now)
        repair = faults.gpu_repair_s(node) if random else for_s
        if math.isfinite(repair):
            self.engine.at(now + repair, Kind.REPAIR, self.gpu_repaired, node)

    def gpu_repaired(self, node: int) -> None:
        self.scheduler.gpu_up(self.cluster.nodes[node].name)
        self.want_cycle(self.engine.now_s)

    def rack_failed(self, rack: int, random: bool, for_s: float) -> None:
        """A whole rack is cut off (its switch fails) for a repair time or `for_s`."""
        if self.over:
            return
        faults = self.faults
        assert faults is not None
        now = self.engine.now_s
        members = np.flatnonzero(self.cluster.rack_idx == rack)
        for node in members:
            self._down(int(node), Outcome.NODE_FAILED)
        repair = faults.rack_repair_s(rack) if random else for_s
        if math.isfinite(repair):
            self.engine.at(now + repair, Kind.REPAIR, self.rack_repaired, rack, random)
        self.want_cycle(now)

    def rack_repaired(self, rack: int, random: bool) -> None:
        assert self.faults is not None
        for node in np.flatnonzero(self.cluster.rack_idx == rack):
            self.bring_up(int(node))
        if random and not self.over:
            self.engine.at(self.engine.now_s + self.faults.next_rack_failure_s(rack), Kind.FAILURE,
                           self.rack_failed, rack, True, math.inf)


def simulate(nodes: Sequence[Node], jobs: Sequence[Job], profile: Profile | str,
             config: SimConfig | None = None, speed: SpeedModel | None = None,
             progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Replay `jobs` on a cluster of `nodes` under `profile` and return the run record (`summary`, `series`,
    `jobs`, and the `config` and `policy` it ran with). Every job must have a reference duration. `config` says
    which faults, run-time models and load swings apply; `speed`, if given, replaces the run-time models it names.
    `progress`, if given, is called now and then with (jobs finished, jobs in all)."""
    config = config or SimConfig()
    profile = profile if isinstance(profile, Profile) else Profile.load(profile)
    jobs = apply_load(jobs, config.load, [Burst.parse(b) for b in config.bursts])
    dcfg = data_config(config)
    if dcfg is not None:
        jobs = assign_datasets(jobs, dcfg)
    world = _World(nodes, profile, config, speed, len(jobs))
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
    record: dict[str, Any] = {"policy": profile.name, "config": asdict(config), **result}
    if world.data is not None:
        record["data"] = {"loads": world.data.loads, "loaded_gb": round(world.data.loaded_gb, 1),
                          "prefetches": world.data.prefetches}
    unused = {name: round(gpu_s, 1) for plugin in world.scheduler.framework.plugins
              for name, gpu_s in getattr(plugin, "unused_gpu_s", {}).items()}
    if unused:  # operators' reservations: the reserved GPU-seconds their holders left unused
        record["reservations"] = {"unused_gpu_s": unused}
    return record


_SHARED: list[tuple[Sequence[Node], Sequence[Job], Profile, SimConfig]] = []


def _simulate_shared(index: int) -> dict[str, Any]:
    return simulate(*_SHARED[index])


def _simulate_on_ray(address: str, nodes: Sequence[Node], jobs: Sequence[Job], profiles: Sequence[Profile],
                     config: SimConfig) -> list[dict[str, Any]]:
    """`simulate` for each profile as a Ray task on the cluster at `address` (joined for the call, left after it
    unless this process was already connected)."""
    import ray

    joined = not ray.is_initialized()
    if joined:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        remote = ray.remote(num_cpus=1, max_retries=2)(simulate)
        nodes_ref, jobs_ref, config_ref = ray.put(list(nodes)), ray.put(list(jobs)), ray.put(config)
        return list(ray.get([remote.remote(nodes_ref, jobs_ref, p, config_ref) for p in profiles]))
    finally:
        if joined:
            ray.shutdown()


def compare(nodes: Sequence[Node], jobs: Sequence[Job], policies: Sequence[Profile | str],
            config: SimConfig | None = None, workers: int | None = None,
            ray_address: str | None = None) -> dict[str, dict[str, Any]]:
    """Run each policy on the same cluster and workload; returns run records by policy name, in the given order.
    Runs go to forked processes, up to `workers` (default: the local cores) at a time; the inputs are inherited,
    not pickled, so a large trace costs nothing to hand over. With `ray_address`, each run is a Ray task (one CPU)
    on that cluster instead; the inputs are put in its object store once. A run is deterministic for its seed, so
    both ways give the same records (the wall-clock `timing` fields aside)."""
    config = config or SimConfig()
    profiles = [p if isinstance(p, Profile) else Profile.load(p) for p in policies]
    names = [p.name for p in profiles]
    if len(set(names)) != len(names):
        raise ValueError(f"policies named twice: {names}")
    workers = min(workers or os.cpu_count() or 1, len(profiles))
    tasks = [(nodes, jobs, p, config) for p in profiles]
    if ray_address is not None:
        results = _simulate_on_ray(ray_address, nodes, jobs, profiles, config)
    elif workers <= 1 or "fork" not in mp.get_all_start_methods():
        results = [simulate(*t) for t in tasks]
    else:
        _SHARED[:] = tasks
        try:
            with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork")) as pool:
                results = list(pool.map(_simulate_shared, range(len(tasks))))
        finally:
            _SHARED.clear()
    return dict(zip(names, results, strict=True))
