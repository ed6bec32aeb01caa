"""Small workloads built to have one bottleneck each, for the advise tests: each gives the cluster, the jobs, the
profile that suffers from it and the run's assumptions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from trimtab.model import Job, Node, Resources
from trimtab.profile import Profile
from trimtab.sim.run import SimConfig


@dataclass(frozen=True)
class Scenario:
    cause: str
    nodes: list[Node]
    jobs: list[Job]
    profile: Profile
    config: SimConfig


def _nodes(count: int, racks: int = 1) -> list[Node]:
    per_rack = -(-count // racks)
    return [Node(f"n{i:02d}", Resources(8, 64_000, 512 * 1024), rack=f"r{i // per_rack}") for i in range(count)]


def _jobs(count: int, seed: int, mean_gap_s: float, shape: Callable[[np.random.Generator], tuple[int, int]],
          duration_s: Callable[[np.random.Generator], float], **kw: object) -> list[Job]:
    """`count` jobs arriving as a Poisson process; each (tasks, GPUs per task) from `shape`."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(mean_gap_s, count))
    out = []
    for i in range(count):
        tasks, per_task = shape(rng)
        out.append(Job(id=f"j{i}", submit_s=float(t[i]), tasks=tasks, task=Resources(gpus=per_task),
                       duration_s=float(duration_s(rng)), **kw))  # type: ignore[arg-type]
    return out


def fragmentation() -> Scenario:
    """Single-task jobs of 1 and 8 GPUs spread over the nodes (least-load): the small ones leave no node whole."""
    jobs = _jobs(300, 1, 500.0, lambda r: (1, 8) if r.random() < 0.25 else (1, 1),
                 lambda r: r.uniform(1800, 7200))
    profile = Profile(name="spread", order=["fifo"], score={"least-load": 1.0}, place="best-node")
    return Scenario("fragmentation", _nodes(4), jobs, profile, SimConfig(timing=False))


def blocking() -> Scenario:
    """Strict FIFO: a gang of 24 GPUs at the head holds back the small jobs behind it while GPUs idle."""
    jobs = _jobs(300, 2, 300.0, lambda r: (24, 1) if r.random() < 0.08 else (int(r.integers(1, 4)), 1),
                 lambda r: r.uniform(600, 3600))
    return Scenario("blocking", _nodes(4), jobs, Profile.load("fifo"), SimConfig(timing=False))


def quota() -> Scenario:
    """One busy queue of two, weight 1 of 4, no borrowing: it waits for its share while 3/4 of the GPUs idle."""
    jobs = _jobs(200, 3, 400.0, lambda r: (int(r.integers(1, 5)), 1), lambda r: r.uniform(1800, 5400),
                 queue="a")
    shares = {"queues": [{"name": "a", "weight": 1}, {"name": "b", "weight": 3}], "borrowing": False}
    profile = Profile(name="quota-shares", admit=["quota"], order=["fifo"], args={"quota": shares})
    return Scenario("quota", _nodes(4), jobs, profile, SimConfig(timing=False))


def preemption() -> Scenario:
    """LAS preempting at will while checkpoints are an hour apart: each preemption throws progress away."""
    jobs = _jobs(300, 4, 200.0, lambda r: (int(r.choice([1, 2, 4, 8])), 1), lambda r: r.lognormal(8.0, 1.0))
    return Scenario("preemption", _nodes(4), jobs, Profile.load("las"), SimConfig(timing=False, checkpoint_s=3600))


def failure() -> Scenario:
    """One node of ten (node 5, as the fault seed draws it) fails 720 times as often (every 2 h) as the others;
    checkpoints are an hour apart, so each failure under a job throws up to an hour of its progress away."""
    jobs = _jobs(600, 5, 300.0, lambda r: (int(r.choice([1, 2, 4])), 1), lambda r: r.uniform(3600, 14400))
    config = SimConfig(timing=False, checkpoint_s=3600, faults="node-mtbf=60d,node-mttr=1h,flaky=0.1,"
                                                                "flaky-factor=720,seed=0")
    return Scenario("failure", _nodes(10), jobs, Profile.load("fifo-backfill"), config)


def slowdown() -> Scenario:
    """Gangs of 4 and 8 GPUs spread over nodes and racks (least-load) under the topology model, in which a gang
    within one node (one NVLink island of 8 GPUs) runs at full speed."""
    jobs = _jobs(200, 6, 900.0, lambda r: (int(r.choice([4, 8])), 1), lambda r: r.uniform(1800, 7200))
    profile = Profile(name="spread-gangs", order=["fifo"], score={"least-load": 1.0}, place="best-node")
    config = SimConfig(timing=False, speed="topology,island-gpus=8")
    return Scenario("slowdown", _nodes(8, racks=4), jobs, profile, config)


ALL = {s.__name__: s for s in (fragmentation, blocking, quota, preemption, failure, slowdown)}
