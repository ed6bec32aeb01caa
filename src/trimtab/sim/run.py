"""Simulated runs: `simulate` replays a trace on a cluster under a profile, and SimWorld, the simulated world: it
applies the scheduler's Decisions and turns events (arrivals, finishes, failures) into Scheduler calls.

The world also owns what happens to jobs from outside the scheduler: retries, data loads, load swings; faults come
from the fault driver (faults.py), run times from the run-time models (models.py)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from trimtab.cluster import Allocation, ClusterState
from trimtab.metrics import Recorder
from trimtab.model import Job, JobState, Node, Outcome
from trimtab.policy import Decision, Observations, Resize
from trimtab.profile import Profile, Registry
from trimtab.scheduler import Scheduler
from trimtab.sim.controllers import PodRecreation
from trimtab.sim.data import assign_datasets
from trimtab.sim.engine import Engine, Kind
from trimtab.sim.faults import FaultDriver, Faults, FaultSpec
from trimtab.sim.load import Burst, apply_load
from trimtab.sim.models import ScalingSpeed, build_models, data_config, parse_speed
from trimtab.sim.speed import ReferenceSpeed, SpeedModel
from trimtab.world import Actuator, WorldLoop, after_failure

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
    evict_s: time a preempted job's GPUs take to come free (on Kubernetes: its pods terminating, then seen
        gone); a job started on them makes progress only after (docs/fidelity.md).
    window_s: width of the windows of the time series (DESIGN.md metrics).
    timing: record the wall-clock cost of the scheduler (the only numbers that differ between identical runs).
    faults: a `--faults` spec (sim/faults.py: inline `node-mtbf=7d,...` or a YAML path); "" for none.
    speed: the run-time models (sim/models.py), comma-separated (`reference` when empty): `topology` (gang spread,
        NVLink islands, racks), `gpus=PATH` (GPU-model throughputs: Gavel's JSON or a YAML table), `data`
        (datasets, node caches, loads; keys cache-gb, node-link-gb-s, uplink-gb-s, datasets, dataset-min-gb,
        dataset-max-gb set its DataConfig), island-gpus=N.
    load: arrival-rate factor (1.5: jobs arrive 1.5 times as fast). bursts: `--burst` specs such as `3x@10h+1h`."""

    seed: int = 0
    checkpoint_s: float = 600.0
    restart_s: float = 30.0
    evict_s: float = 0.0
    window_s: float = 3600.0
    timing: bool = True
    faults: str = ""
    speed: str = ""
    load: float = 1.0
    bursts: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.checkpoint_s < 0 or self.restart_s < 0 or self.evict_s < 0:
            raise ValueError("checkpoint_s, restart_s and evict_s must be >= 0")
        if self.load <= 0:
            raise ValueError(f"load must be > 0, got {self.load}")
        self.fault_spec()
        parse_speed(self.speed)
        [Burst.parse(b) for b in self.bursts]

    def fault_spec(self) -> FaultSpec | None:
        if not self.faults:
            return None
        spec = FaultSpec.parse(self.faults)
        if "seed" not in self.faults and not self.faults.endswith((".yaml", ".yml")):
            spec = FaultSpec(**{**{f: getattr(spec, f) for f in spec.__dataclass_fields__}, "seed": self.seed})
        return spec


@dataclass(slots=True)
class _Attempt:
    token: int
    executed_before_s: float
    progress_from_s: float
    slowdown: float
    alloc: Allocation
    net_busy: float = 0.0


class SimWorld(Actuator):
    """The simulated world: the actuator of its world loop (it carries out the Decisions on the event heap), and
    what turns arrivals, finishes, failures and what it observes into Scheduler calls. It is the FaultTarget its
    fault driver acts through."""

    def __init__(self, nodes: Sequence[Node], profile: Profile, config: SimConfig, speed: SpeedModel | None,
                 total_jobs: int, registry: Registry | None = None) -> None:
        self.engine = Engine()
        self.cluster = ClusterState(nodes)
        self.scheduler = Scheduler(self.cluster, profile, registry, seed=config.seed)
        self.loop = WorldLoop(self.scheduler, self)
        self.recorder = Recorder(self.cluster, config.window_s)
        self.config = config
        self.total_jobs = total_jobs
        self.attempts: dict[str, _Attempt] = {}
        self.ticks: set[float] = set()
        self.done = 0
        self.own_failures: dict[str, int] = {}
        self.controllers = PodRecreation()
        self.freed_at: dict[int, float] = {}  # node -> when the GPUs of the jobs evicted from it come free (evict_s)
        models = build_models(config.speed, config.seed, self.cluster, speed)
        self.speed, self.topology, self.meter, self.data = models.speed, models.topology, models.meter, models.data
        self.scaled = ScalingSpeed()  # jobs with their own scaling model (elastic jobs, Pollux's workloads)
        self.observations = Observations(cached=self.data.cached_mask if self.data is not None else None,
                                         gpu_speeds=models.gpu_speeds)
        self.scheduler.observe(self.observations)
        if self.meter is not None:
            links = len(self.cluster) + len(self.cluster.racks)
            meter = self.meter
            self.recorder.net_util_fn = lambda first, end: meter.mean(first, end, links)
        spec = config.fault_spec()
        self.faults: Faults | None = Faults(spec, self.cluster) if spec is not None and spec.active else None
        self.max_retries = spec.max_retries if spec is not None else 0
        self.observe_speeds = not isinstance(self.speed, ReferenceSpeed) or self.faults is not None
        if self.faults is not None:
            FaultDriver(self.faults, self).plan()

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
        self.loop.cycle(time_s)

    # ------------------------------------------------------------------------ the loop's actuator (world.py)

    def cycled(self, decision: Decision, seconds: float, now_s: float) -> None:
        self.recorder.cycle(seconds * 1000.0, len(decision.starts) + len(decision.preemptions))
        self.recorder.waiting(now_s, decision.waiting, decision.stalled)
        self.recorder.evicted(decision.evictions)

    def preempt(self, victims: list[str], now_s: float) -> None:
        for victim in victims:
            if self.config.evict_s > 0:
                for node in self.attempts[victim].alloc.nodes.tolist():
                    self.freed_at[node] = now_s + self.config.evict_s
            self.stop(victim, Outcome.PREEMPTED)
            if self.scheduler.jobs[victim].pod_backoff is not None:
                self._recreate_later(victim)

    def start(self, starts: list[tuple[Job, Allocation]], now_s: float) -> None:
        for job, alloc in starts:
            if not self.freed_at:
                self.run_attempt(job, alloc)
                continue
            # a start on a node still freeing GPUs waits for it, as trimtab kube's nominated starts do
            freed_s = max(self.freed_at.get(node, now_s) for node in alloc.nodes.tolist())
            self.run_attempt(job, alloc, wait_s=max(freed_s - now_s, 0.0))

    def resize(self, resizes: list[Resize], now_s: float) -> None:
        for resize in resizes:
            self._resize(resize)

    def prefetch(self, prefetches: list[tuple[Job, np.ndarray]], now_s: float) -> None:
        if self.data is not None:  # a world without a data model has no dataset to load
            for job, targets in prefetches:
                for node in targets:
                    self.data.prefetch(job.dataset, job.dataset_gb, int(node), now_s)

    def wake_at(self, time_s: float) -> None:
        self.want_cycle(time_s)

    # ------------------------------------------------------------------------------------------------ attempts

    def run_attempt(self, job: Job, alloc: Allocation, restart_s: float | None = None, wait_s: float = 0.0) -> None:
        """Start an attempt of `job` on `alloc`; it makes progress after `wait_s` (its GPUs still coming free)
        and then `restart_s` (default: the run's restart cost for a job that ran before, none for a first
        start)."""
        now = self.engine.now_s
        before = self.scheduler.running[job.id].prior_executed_s
        attempt = len(self.recorder.jobs[job.id].runs)
        if restart_s is None:
            restart_s = self.config.restart_s if attempt else 0.0
        speed = self.speed if job.scaling is None else self.scaled
        slowdown = speed.slowdown(job, alloc, self.cluster)
        progress_from = now + wait_s + restart_s
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

    def _resize(self, resize: Resize) -> None:
        """A resized job: its attempt checkpoints (it keeps all its progress) and restarts on the new allocation,
        making progress again after its `Elastic.resize_s`."""
        job = self.scheduler.jobs[resize.job_id]
        att, executed = self._end_attempt(job.id)
        self.scheduler.credit(job.id, executed)
        self.recorder.run_ended(job.id, self.engine.now_s, Outcome.RESIZED, executed - att.executed_before_s,
                                requeued=True)
        self.run_attempt(job, resize.alloc, job.elastic.resize_s if job.elastic is not None else self.config.restart_s)

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
        if after_failure(failures, limit) is JobState.PENDING:
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

    def _recreate_later(self, job_id: str) -> None:
        """A preempted job whose pods a controller recreates (model.PodBackoff): out of the queue until they are
        back, or FAILED once the eviction passes the controller's limit."""
        now = self.engine.now_s
        delay_s = self.controllers.evicted(self.scheduler.jobs[job_id])
        if delay_s is None:
            self.scheduler.cancel(job_id, now)
            self.recorder.ended(job_id, now, JobState.FAILED)
            self.done += 1
        elif delay_s > 0 and job_id not in self.scheduler.running:
            self.scheduler.hold(job_id)
            self.engine.at(now + delay_s, Kind.ARRIVAL, self.retry, job_id)

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
        self.controllers.succeeded(job)
        if self.observe_speeds:
            self.observations.job_ran(job.job_type, att.alloc.nodes, 1.0 / att.slowdown, len(self.cluster))
        self.done += 1
        self.want_cycle(now)

    # ------------------------------------------------------------------------------ what the fault driver acts on

    @property
    def over(self) -> bool:
        """Every job reached a terminal state: faults stop drawing (else the heap would never empty)."""
        return self.done >= self.total_jobs

    def node_out(self, node: int, outcome: Outcome) -> None:
        for job_id in self.scheduler.node_down(self.cluster.nodes[node].name):
            self.interrupt(job_id, outcome)

    def node_back(self, node: int) -> None:
        self.scheduler.node_up(self.cluster.nodes[node].name)
        self.want_cycle(self.engine.now_s)

    def gpus_in_service(self, node: int) -> int:
        return int(self.cluster.cap_gpus[node]) - int(self.scheduler.failed_gpus[node])

    def gpu_holders(self, node: int) -> list[tuple[str, int]]:
        return [(jid, int(att.alloc.counts[np.searchsorted(att.alloc.nodes, node)]) * att.alloc.task.gpus)
                for jid, att in self.attempts.items() if node in att.alloc.nodes]

    def gpu_out(self, node: int, victim: str | None) -> None:
        if victim is not None:
            self.interrupt(victim, Outcome.NODE_FAILED)
        self.scheduler.gpu_down(self.cluster.nodes[node].name)

    def gpu_back(self, node: int) -> None:
        self.scheduler.gpu_up(self.cluster.nodes[node].name)
        self.want_cycle(self.engine.now_s)

    def failure_seen(self, node: int) -> None:
        self.observations.node_failed(node, self.engine.now_s, len(self.cluster))


def simulate(nodes: Sequence[Node], jobs: Sequence[Job], profile: Profile | str,
             config: SimConfig | None = None, speed: SpeedModel | None = None,
             progress: Callable[[int, int], None] | None = None, registry: Registry | None = None) -> dict[str, Any]:
    """Replay `jobs` on a cluster of `nodes` under `profile` and return the run record (`summary`, `series`,
    `jobs`, and the `config` and `policy` it ran with). Every job must have a reference duration. `config` says
    which faults, run-time models and load swings apply; `speed`, if given, replaces the run-time models it names.
    `progress`, if given, is called now and then with (jobs finished, jobs in all). `registry` names the plugins
    the profile may use (default: the built-in ones), so a profile of one's own plugins runs as it will live."""
    config = config or SimConfig()
    profile = profile if isinstance(profile, Profile) else Profile.load(profile)
    jobs = apply_load(jobs, config.load, [Burst.parse(b) for b in config.bursts])
    dcfg = data_config(config.speed, config.seed)
    if dcfg is not None:
        jobs = assign_datasets(jobs, dcfg)
    world = SimWorld(nodes, profile, config, speed, len(jobs), registry)
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
            horizon = world.engine.peek_s()
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
              for name, gpu_s in plugin.unused_gpu_s.items()}
    if unused:  # operators' reservations: the reserved GPU-seconds their holders left unused
        record["reservations"] = {"unused_gpu_s": unused}
    return record
