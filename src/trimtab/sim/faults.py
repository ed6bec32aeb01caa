"""Seeded faults of a simulated run: node failures and repairs, single-GPU failures, rack cut-offs, scheduled node
leaves and joins, and job-level failures, with the retry policy (maximum, backoff) that answers them.

Owns FaultSpec (parsed from `--faults`), Faults, which draws every failure time from seeded generators, and
FaultDriver, which puts those failures on the event heap and applies them to the world (FaultTarget)."""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from trimtab.cluster import ClusterState
from trimtab.formats import yaml_document
from trimtab.model import Outcome
from trimtab.sim.draws import SeededDraws
from trimtab.sim.engine import Engine, Kind
from trimtab.units import parse_duration_s


@dataclass(frozen=True, slots=True)
class ScheduledFault:
    """A planned event: at `at_s`, `kind` happens to `target` for `for_s` seconds (inf: for good).

    kind: node (the node fails; its jobs are interrupted), gpu (one GPU of the node fails), rack (every node of the
    rack is cut off), leave (the node leaves the cluster; its jobs are interrupted), join (a node that was out from
    the start joins at `at_s`)."""

    at_s: float
    kind: str
    target: str
    for_s: float = math.inf

    def __post_init__(self) -> None:
        if self.kind not in ("node", "gpu", "rack", "leave", "join"):
            raise ValueError(f"scheduled fault: unknown kind {self.kind!r} (node, gpu, rack, leave, join)")


@dataclass(frozen=True)
class FaultSpec:
    """What fails and how a run recovers. Every time is in seconds; inf means never.

    node_mtbf_s / node_mttr_s: exponential time between failures of each node (of its up time) and to repair it.
    class_mtbf_s: MTBF per node class (GPU model or rack name) overriding node_mtbf_s; node_mtbf_by_name: per
    node. flaky / flaky_factor: a share of nodes (drawn from the seed) fails `flaky_factor` times as often (a few
    bad machines cause most failures: an assumption, the case history and draining are for).
    gpu_mtbf_s / gpu_mttr_s: per GPU; the node keeps running with one GPU less. rack_mtbf_s / rack_mttr_s: a whole
    rack is cut off. job_fail: the share of attempts that fail on their own (a user bug), at a uniform point of
    the attempt. max_retries: retries after the job's own failures before it ends FAILED (infrastructure failures
    are always retried at once, on healthy nodes: failover). backoff_s: wait before the first retry, doubling
    with each further one. schedule: planned events (ScheduledFault)."""

    seed: int = 0
    node_mtbf_s: float = math.inf
    node_mttr_s: float = 2 * 3600.0
    class_mtbf_s: Mapping[str, float] = field(default_factory=dict)
    node_mtbf_by_name: Mapping[str, float] = field(default_factory=dict)
    flaky: float = 0.0
    flaky_factor: float = 10.0
    gpu_mtbf_s: float = math.inf
    gpu_mttr_s: float = 24 * 3600.0
    rack_mtbf_s: float = math.inf
    rack_mttr_s: float = 3600.0
    job_fail: float = 0.0
    max_retries: int = 3
    backoff_s: float = 60.0
    schedule: tuple[ScheduledFault, ...] = ()

    def __post_init__(self) -> None:
        for name in ("node_mtbf_s", "node_mttr_s", "gpu_mtbf_s", "gpu_mttr_s", "rack_mtbf_s", "rack_mttr_s",
                     "backoff_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"faults: {name} must be >= 0")
        if not 0 <= self.job_fail < 1 or not 0 <= self.flaky <= 1:
            raise ValueError("faults: job_fail must be in [0, 1) and flaky in [0, 1]")
        if self.max_retries < 0 or self.flaky_factor < 1:
            raise ValueError("faults: max_retries must be >= 0 and flaky_factor >= 1")

    @property
    def active(self) -> bool:
        return bool(
            math.isfinite(self.node_mtbf_s) or self.class_mtbf_s or self.node_mtbf_by_name
            or math.isfinite(self.gpu_mtbf_s) or math.isfinite(self.rack_mtbf_s) or self.job_fail or self.schedule
        )

    @classmethod
    def parse(cls, spec: str) -> FaultSpec:
        """From `--faults`: a YAML file path, or an inline list `key=value,...` such as
        `node-mtbf=7d,node-mttr=2h,gpu-mtbf=30d,job-fail=0.02,seed=1`. Keys (inline and YAML alike, dashes or
        underscores): seed, node-mtbf, node-mttr, gpu-mtbf, gpu-mttr, rack-mtbf, rack-mttr, job-fail, max-retries,
        backoff, flaky, flaky-factor; YAML adds classes {class: mtbf}, nodes {name: mtbf}, schedule (a list of
        {at, kind, target, for}) and schedule-file (a YAML file holding such a list)."""
        path = Path(spec)
        if path.suffix in (".yaml", ".yml") or (path.exists() and "=" not in spec):
            try:
                data = yaml_document(path.read_text(encoding="utf-8"), f"faults file {spec}") or {}
            except OSError as exc:
                raise ValueError(f"faults file {spec}: {exc.strerror or exc}") from None
            if not isinstance(data, dict):
                raise ValueError(f"faults file {spec}: expected a mapping")
            return cls.from_mapping(data, spec, path.parent)
        data = {}
        for item in spec.split(","):
            if not item.strip():
                continue
            key, eq, value = (p.strip() for p in item.partition("="))
            if not eq:
                raise ValueError(f"faults {spec!r}: expected key=value, got {item!r}")
            data[key] = value
        return cls.from_mapping(data, spec, Path("."))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str, folder: Path) -> FaultSpec:
        kwargs: dict[str, Any] = {}
        durations = {"node-mtbf": "node_mtbf_s", "node-mttr": "node_mttr_s", "gpu-mtbf": "gpu_mtbf_s",
                     "gpu-mttr": "gpu_mttr_s", "rack-mtbf": "rack_mtbf_s", "rack-mttr": "rack_mttr_s",
                     "backoff": "backoff_s"}
        numbers = {"job-fail": ("job_fail", float), "flaky": ("flaky", float), "flaky-factor": ("flaky_factor", float),
                   "seed": ("seed", int), "max-retries": ("max_retries", int)}
        schedule: list[ScheduledFault] = []
        for raw_key, value in data.items():
            key = str(raw_key).replace("_", "-")
            try:
                if key in durations:
                    kwargs[durations[key]] = parse_duration_s(value, key)
                elif key in numbers:
                    name, kind = numbers[key]
                    kwargs[name] = kind(value)
                elif key == "classes":
                    kwargs["class_mtbf_s"] = {str(k): parse_duration_s(v, f"classes.{k}") for k, v in value.items()}
                elif key == "nodes":
                    kwargs["node_mtbf_by_name"] = {str(k): parse_duration_s(v, f"nodes.{k}")
                                                   for k, v in value.items()}
                elif key == "schedule":
                    schedule += _schedule(value, source)
                elif key == "schedule-file":
                    file = folder / str(value)
                    schedule += _schedule(yaml_document(file.read_text(encoding="utf-8"), str(file)), source)
                else:
                    raise ValueError(f"unknown key {raw_key!r}")
            except (TypeError, AttributeError, OSError) as exc:
                raise ValueError(f"faults {source}: key {raw_key!r}: {exc}") from None
            except ValueError as exc:
                raise ValueError(f"faults {source}: {exc}") from None
        kwargs["schedule"] = tuple(sorted(schedule, key=lambda e: e.at_s))
        return cls(**kwargs)


def _schedule(items: object, source: str) -> list[ScheduledFault]:
    if not isinstance(items, list):
        raise ValueError("schedule: expected a list of {at, kind, target, for}")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not {"at", "kind", "target"} <= set(item):
            raise ValueError(f"schedule[{i}]: expected {{at, kind, target, for}}, got {item!r}")
        out.append(ScheduledFault(parse_duration_s(item["at"], f"schedule[{i}].at"), str(item["kind"]),
                                  str(item["target"]), parse_duration_s(item.get("for", "inf"), f"schedule[{i}].for")))
    return out


class Faults:
    """Draws the failure times of a run from its FaultSpec. Each concern has its own seeded generator per node or
    rack, so a node's failures do not depend on what the scheduler did: two policies run with the same seed see
    the same infrastructure failures (at the same times, as long as the node was up), and the same job-level
    failures per (job, attempt)."""

    def __init__(self, spec: FaultSpec, cluster: ClusterState) -> None:
        self.spec = spec
        n = len(cluster)
        flaky_rng = np.random.default_rng([spec.seed, 10])
        flaky = flaky_rng.random(n) < spec.flaky
        self.node_mtbf_s = np.empty(n)
        for i, node in enumerate(cluster.nodes):
            mtbf = spec.node_mtbf_by_name.get(node.name)
            if mtbf is None:
                mtbf = spec.class_mtbf_s.get(node.gpu_model, spec.class_mtbf_s.get(node.rack, spec.node_mtbf_s))
            self.node_mtbf_s[i] = mtbf / (spec.flaky_factor if flaky[i] else 1.0)
        self.flaky = flaky
        self._node_rng = [np.random.default_rng([spec.seed, 1, i]) for i in range(n)]
        self._gpu_rng = [np.random.default_rng([spec.seed, 2, i]) for i in range(n)]
        self._rack_rng = [np.random.default_rng([spec.seed, 3, r]) for r in range(len(cluster.racks))]
        self.cap_gpus = cluster.cap_gpus
        self._job_draws = SeededDraws(spec.seed, 4)

    def next_node_failure_s(self, node: int) -> float:
        return _exp(self._node_rng[node], self.node_mtbf_s[node])

    def node_repair_s(self, node: int) -> float:
        return _exp(self._node_rng[node], self.spec.node_mttr_s)

    def next_gpu_failure_s(self, node: int) -> float:
        gpus = int(self.cap_gpus[node])
        return _exp(self._gpu_rng[node], self.spec.gpu_mtbf_s / gpus) if gpus else math.inf

    def gpu_repair_s(self, node: int) -> float:
        return _exp(self._gpu_rng[node], self.spec.gpu_mttr_s)

    def gpu_victim(self, node: int, in_service: int, busy: Sequence[tuple[str, int]]) -> str | None:
        """Which job, if any, held the GPU that failed: one of the node's `in_service` GPUs drawn uniformly;
        `busy` lists (job id, GPUs it holds there); a draw past them is a free GPU (None)."""
        pick = self._gpu_rng[node].random() * in_service
        for job_id, gpus in busy:
            if pick < gpus:
                return job_id
            pick -= gpus
        return None

    def next_rack_failure_s(self, rack: int) -> float:
        return _exp(self._rack_rng[rack], self.spec.rack_mtbf_s)

    def rack_repair_s(self, rack: int) -> float:
        return _exp(self._rack_rng[rack], self.spec.rack_mttr_s)

    def job_failure_point(self, job_id: str, attempt: int) -> float | None:
        """Where in its remaining work (0..1) attempt `attempt` of a job fails on its own, or None."""
        if not self.spec.job_fail:
            return None
        fails, point = self._job_draws.draws(zlib.crc32(job_id.encode()), attempt)  # default_rng([seed, 4, ...])
        return point if fails < self.spec.job_fail else None

    def backoff_s(self, failures: int) -> float:
        """Wait before the retry that follows the job's `failures`-th own failure (1, 2, ...)."""
        return self.spec.backoff_s * 2.0 ** (failures - 1)


def _exp(rng: np.random.Generator, mean_s: float) -> float:
    if not math.isfinite(mean_s):
        return math.inf
    return float(rng.exponential(mean_s)) if mean_s > 0 else 0.0



class FaultTarget(Protocol):
    """What the fault driver may do to the simulated world (SimWorld implements it)."""

    engine: Engine
    cluster: ClusterState

    @property
    def over(self) -> bool:
        """Every job reached a terminal state: the driver draws no further failures."""
        ...

    def want_cycle(self, time_s: float) -> None:
        """Run a scheduling cycle at `time_s`."""
        ...

    def node_out(self, node: int, outcome: Outcome) -> None:
        """`node` goes out of service; its running attempts end with `outcome` and their jobs wait again."""
        ...

    def node_back(self, node: int) -> None:
        """`node` is back in service."""
        ...

    def gpus_in_service(self, node: int) -> int:
        """GPUs of `node` not failed."""
        ...

    def gpu_holders(self, node: int) -> list[tuple[str, int]]:
        """The running jobs on `node` and the GPUs each holds there, in start order."""
        ...

    def gpu_out(self, node: int, victim: str | None) -> None:
        """One GPU of `node` fails: `victim` (the job that held it, if any) is interrupted and the GPU leaves
        service."""
        ...

    def failure_seen(self, node: int) -> None:
        """`node` or one of its GPUs failed (what plugins that avoid unreliable nodes learn from)."""
        ...

    def gpu_back(self, node: int) -> None:
        """A failed GPU of `node` is repaired."""
        ...


class FaultDriver:
    """Puts a run's failures and repairs on the event heap and applies them through a FaultTarget. It counts the
    reasons each node is out (a failure, its rack cut off, a leave): a node is back when none is left. Random
    failures draw the next one when they are repaired, and stop once the run is over."""

    def __init__(self, faults: Faults, world: FaultTarget) -> None:
        self.faults = faults
        self.world = world
        self.down = np.zeros(len(world.cluster), dtype=np.int64)

    def plan(self) -> None:
        """Schedule the first random failure of every node, GPU set and rack, and every planned event."""
        faults, cluster, at = self.faults, self.world.cluster, self.world.engine.at
        for i in range(len(cluster)):
            at(faults.next_node_failure_s(i), Kind.FAILURE, self.node_failed, i)
            at(faults.next_gpu_failure_s(i), Kind.FAILURE, self.gpu_failed, i, True, math.inf)
        for r in range(len(cluster.racks)):
            at(faults.next_rack_failure_s(r), Kind.FAILURE, self.rack_failed, r, True, math.inf)
        for event in faults.spec.schedule:
            self._plan_event(event)

    def _plan_event(self, event: ScheduledFault) -> None:
        cluster, at = self.world.cluster, self.world.engine.at
        if event.kind == "rack":
            if event.target not in cluster.racks:
                raise ValueError(f"faults schedule: unknown rack {event.target!r}")
            at(event.at_s, Kind.FAILURE, self.rack_failed, cluster.racks.index(event.target), False, event.for_s)
            return
        node = cluster.index.get(event.target)
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
            self.world.node_out(node, outcome)
        if outcome is Outcome.NODE_FAILED:
            self.world.failure_seen(node)

    def _after(self, delay_s: float, kind: Kind, callback: Callable[..., Any], *args: Any) -> None:
        self.world.engine.at(self.world.engine.now_s + delay_s, kind, callback, *args)

    def bring_up(self, node: int) -> None:
        self.down[node] -= 1
        if self.down[node] == 0:
            self.world.node_back(node)

    def take_down(self, node: int, outcome: Outcome, for_s: float) -> None:
        """A scheduled failure or leave of `node` for `for_s` seconds."""
        if self.world.over:
            return
        self._down(node, outcome)
        if math.isfinite(for_s):
            self._after(for_s, Kind.REPAIR, self.bring_up, node)
        self.world.want_cycle(self.world.engine.now_s)

    def node_failed(self, node: int) -> None:
        """A random node failure: down for a repair time, then its next failure is drawn."""
        if self.world.over:
            return
        self._down(node, Outcome.NODE_FAILED)
        self._after(self.faults.node_repair_s(node), Kind.REPAIR, self.node_repaired, node)
        self.world.want_cycle(self.world.engine.now_s)

    def node_repaired(self, node: int) -> None:
        self.bring_up(node)
        if not self.world.over:
            self._after(self.faults.next_node_failure_s(node), Kind.FAILURE, self.node_failed, node)

    def gpu_failed(self, node: int, random: bool, for_s: float) -> None:
        """One GPU of `node` fails; the job on it, if any, is interrupted; the node runs on with one GPU less."""
        if self.world.over:
            return
        if random:
            self._after(self.faults.next_gpu_failure_s(node), Kind.FAILURE, self.gpu_failed, node, True, math.inf)
        in_service = self.world.gpus_in_service(node)
        if self.down[node] or in_service <= 0:
            return
        self.world.gpu_out(node, self.faults.gpu_victim(node, in_service, self.world.gpu_holders(node)))
        self.world.failure_seen(node)
        repair = self.faults.gpu_repair_s(node) if random else for_s
        if math.isfinite(repair):
            self._after(repair, Kind.REPAIR, self.world.gpu_back, node)

    def rack_failed(self, rack: int, random: bool, for_s: float) -> None:
        """A whole rack is cut off (its switch fails) for a repair time or `for_s`."""
        if self.world.over:
            return
        for node in np.flatnonzero(self.world.cluster.rack_idx == rack):
            self._down(int(node), Outcome.NODE_FAILED)
        repair = self.faults.rack_repair_s(rack) if random else for_s
        if math.isfinite(repair):
            self._after(repair, Kind.REPAIR, self.rack_repaired, rack, random)
        self.world.want_cycle(self.world.engine.now_s)

    def rack_repaired(self, rack: int, random: bool) -> None:
        for node in np.flatnonzero(self.world.cluster.rack_idx == rack):
            self.bring_up(int(node))
        if random and not self.world.over:
            self._after(self.faults.next_rack_failure_s(rack), Kind.FAILURE, self.rack_failed, rack, True, math.inf)
