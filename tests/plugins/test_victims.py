"""The one victim search on random clusters where GPUs, CPU and memory all bind: its answer, once stopped, lets the
job fit on the nodes it may use; a gang's answer has no victim it could give back; no answer only when the job
fits already or stopping every candidate would not make it fit."""

import numpy as np
import pytest

from builders import nodes
from trimtab.cluster import Allocation, ClusterState
from trimtab.model import Job, Resources
from trimtab.plugins.victims import fewest_victims
from trimtab.policy import CycleContext, RunningJob


def fits(cluster: ClusterState, job: Job, allowed: np.ndarray) -> bool:
    return int(np.minimum(np.where(allowed, cluster.fit_counts(job.task), 0), job.tasks).sum()) >= job.tasks


def fits_without(cluster: ClusterState, job: Job, allowed: np.ndarray, running: dict[str, RunningJob],
                 victims: list[str]) -> bool:
    with cluster.txn() as txn:  # discarded on leaving
        for jid in victims:
            txn.release(running[jid].alloc)
        return fits(cluster, job, allowed)


def random_world(seed: int) -> tuple[ClusterState, dict[str, RunningJob], np.random.Generator]:
    """Six nodes of 4 GPUs, 16 cores and 64 GiB, filled by jobs of 1-2 tasks (some on two nodes) asking random
    GPUs, CPU and memory, until one does not fit."""
    rng = np.random.default_rng(seed)
    cluster = ClusterState(nodes(6, gpus=4, cpu_milli=16_000, mem_mib=64 * 1024))
    running: dict[str, RunningJob] = {}
    for i in range(40):
        task = Resources(int(rng.integers(0, 3)), int(rng.integers(1, 9)) * 1000, int(rng.integers(1, 17)) * 1024)
        picked = np.sort(rng.choice(6, size=int(rng.integers(1, 3)), replace=False))
        alloc = Allocation(picked, np.ones(len(picked), dtype=np.int64), task)
        try:
            cluster.allocate(alloc)
        except ValueError:
            continue  # it does not fit there: the cluster is as full as this draw makes it
        job = Job(f"r{i:02d}", 0.0, len(picked), task, 100.0)
        running[job.id] = RunningJob(job, alloc, float(i), 0.0, 0.0)
    return cluster, running, rng


@pytest.mark.parametrize("seed", range(60))
def test_the_answer_frees_enough_and_a_gang_keeps_no_victim_it_could_give_back(seed):
    cluster, running, rng = random_world(seed)
    tasks = int(rng.integers(1, 4))
    job = Job("waiting", 0.0, tasks, Resources(int(rng.integers(1, 4)), int(rng.integers(1, 9)) * 1000,
                                                 int(rng.integers(1, 33)) * 1024), 100.0)
    allowed = rng.random(6) < 0.8  # the filters
    ctx = CycleContext(0.0, cluster, [], running, {}, {}, rng, node_mask=lambda _: allowed)
    walk = [(int(level), jid) for level, jid in zip(sorted(rng.integers(0, 4, len(running))), running, strict=True)]
    before = (cluster.free_gpus.copy(), cluster.free_cpu_milli.copy(), cluster.free_mem_mib.copy())

    victims = fewest_victims(job, ctx, iter(walk))

    assert all((a == b).all() for a, b in zip(before, (cluster.free_gpus, cluster.free_cpu_milli,
                                                       cluster.free_mem_mib), strict=True))  # looked, changed nothing
    if victims is None:
        assert fits(cluster, job, allowed) or not fits_without(cluster, job, allowed, running, list(running))
        return
    assert victims and len(set(victims)) == len(victims) and set(victims) <= set(running)
    assert fits_without(cluster, job, allowed, running, victims)
    if tasks > 1:
        for spared in victims:
            assert not fits_without(cluster, job, allowed, running, [v for v in victims if v != spared]), spared
