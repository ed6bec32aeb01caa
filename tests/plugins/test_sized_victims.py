"""lower-order's victims the size of the need (`max_victim_gpus_per_gpu`, `victim_size_wait_s`) and its victim
levels (`level_depth`): a new job passes over victims far larger than it needs for a while, the limit a refused job
had holds for the jobs after it in the cycle, and victims alike in their first key parts are alike to the search."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builders import job, nodes
from trimtab.cluster import Allocation, ClusterState
from trimtab.model import Job
from trimtab.plugins.preempt import LowerOrder
from trimtab.policy import CycleContext, Decision, RunningJob
from trimtab.profile import Profile
from trimtab.sim.run import SimConfig, simulate

CONFIG = SimConfig(checkpoint_s=600.0, restart_s=30.0, timing=False)


def las_with(**lower_order: object) -> Profile:
    return Profile.load("las").model_copy(update={"args": {"lower-order": {"min_runtime_s": 0, **lower_order}}})


def runs_of(jobs: list[Job], profile: Profile) -> dict[str, list[dict]]:
    return {r["id"]: r["runs"] for r in simulate(nodes(1), jobs, profile, CONFIG)["jobs"]}


@pytest.mark.parametrize(("sized", "victim"), [(False, "gang"), (True, "s4")])
def test_a_new_job_passes_over_a_victim_far_larger_than_its_need(sized: bool, victim: str) -> None:
    """One node: a 4-GPU gang (LAS queue 2 at 4,000 s: the worst victim) and four one-GPU jobs (queue 1). A new
    one-GPU job stops the gang, four GPUs for one, unless victims are sized: then it stops one of its size (the
    worst of them, last in FIFO order)."""
    args = {"max_victim_gpus_per_gpu": 2} if sized else {}
    jobs = [job("gang", 4, duration_s=20_000.0), *(job(f"s{i}", 1, duration_s=20_000.0) for i in range(1, 5)),
            job("new", 1, submit_s=4000.0, duration_s=100.0)]
    runs = runs_of(jobs, las_with(**args))
    assert runs["new"][0]["start"] == 4000.0
    assert [jid for jid, r in runs.items() if r[0]["outcome"] == "preempted"] == [victim]


@pytest.mark.parametrize(("wait_s", "start_s"), [(300.0, 4300.0), (0.0, 4000.0)])
def test_after_its_wait_a_new_job_stops_the_large_victim(wait_s: float, start_s: float) -> None:
    """Only an 8-GPU gang runs: the new one-GPU job waits `victim_size_wait_s` from its submission (the scheduler
    looks again then, not at the gang's end), then stops it."""
    jobs = [job("gang", 8, duration_s=20_000.0), job("new", 1, submit_s=4000.0, duration_s=100.0)]
    runs = runs_of(jobs, las_with(max_victim_gpus_per_gpu=2, victim_size_wait_s=wait_s))
    assert runs["new"][0]["start"] == start_s and runs["gang"][0]["outcome"] == "preempted"


def context(now_s: float, running: list[tuple[Job, int, tuple[float, float], float]]) -> CycleContext:
    """Two 8-GPU nodes and the `running` jobs: (job, its node, its order key, its start)."""
    state = ClusterState(nodes(2))
    books, keys = {}, {}
    for run, node, key, start_s in running:
        alloc = Allocation(np.array([node]), np.array([run.tasks]), run.task)
        state.allocate(alloc)
        books[run.id], keys[run.id] = RunningJob(run, alloc, start_s, 0.0, 0.0), key
    ranked = sorted((key, books[jid].start_s, jid) for jid, key in keys.items())
    return CycleContext(now_s, state, [], books, {}, {}, np.random.default_rng(0), running_keys=keys,
                        running_ranked=ranked, order_key=lambda j: (0, j.submit_s))


def full_nodes(*victims: tuple[Job, int, tuple[float, float], float]) -> CycleContext:
    """`victims` (one GPU each) and, on each node, a 7-GPU job the waiting jobs may not stop (LAS queue 0)."""
    fillers = [(job(f"keep{node}", 7, duration_s=20_000.0), node, (0, 0.0), 0.0) for node in (0, 1)]
    return context(4000.0, [*fillers, *victims])


def test_a_refused_job_passes_its_limit_to_the_jobs_after_it_in_the_cycle() -> None:
    """A new one-GPU job is refused the 8-GPU gang (8 > 2 x 1 GPUs); a 4-GPU job after it in the same cycle, old
    enough to stop any victim, is refused too (the cycle takes answers as monotone), and gets the gang in the
    next cycle. The scheduler is asked to look again when the new job's wait ends."""
    gang = job("gang", 8, duration_s=20_000.0)
    ctx = context(4000.0, [(gang, 0, (2, 0.0), 0.0), (job("keep", 8, duration_s=20_000.0), 1, (0, 0.0), 0.0)])
    new, old = job("new", 1, submit_s=3900.0), job("old", 4, submit_s=10.0)
    plugin = LowerOrder(max_victim_gpus_per_gpu=2)
    plugin.open(ctx)
    assert plugin.preempt(new, ctx) is None and plugin.preempt(old, ctx) is None
    assert plugin.close(ctx, Decision()) == 4200.0
    plugin.open(ctx)
    assert plugin.preempt(old, ctx) == ["gang"]


@pytest.mark.parametrize(("level_depth", "victim"), [(None, "worst"), (1, "later")])
def test_victims_alike_in_their_level_are_alike_to_the_search(level_depth: int | None, victim: str) -> None:
    """Two one-GPU victims of LAS queue 2 on two full nodes: with the whole key as level the worst goes; with the
    queue alone (level_depth 1) they are alike, and the search stops the one that started later (less lost)."""
    ctx = full_nodes((job("worst", 1, duration_s=20_000.0), 0, (2, 50.0), 0.0),
                     (job("later", 1, duration_s=20_000.0), 1, (2, 10.0), 1000.0))
    plugin = LowerOrder(level_depth=level_depth)
    plugin.open(ctx)
    assert plugin.preempt(job("new", 1, submit_s=3990.0), ctx) == [victim]


@pytest.mark.parametrize("args", [{"max_victim_gpus_per_gpu": 0.5}, {"victim_size_wait_s": -1.0},
                                  {"level_depth": 0}])
def test_the_sizes_and_levels_are_validated(args: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be >= "):
        LowerOrder(**args)  # type: ignore[arg-type]


def test_the_sized_victims_profile_is_steady_with_lower_orders_sizes() -> None:
    """docs/steady/sized-victims.yaml (the profile docs/steady.md measures) is steady but for lower-order's args."""
    sized = Profile.load(str(Path(__file__).parents[2] / "docs" / "steady" / "sized-victims.yaml"))
    steady = Profile.load("steady")
    assert sized.args["lower-order"] == {**steady.args["lower-order"], "level_depth": 2,
                                         "max_victim_gpus_per_gpu": 2, "victim_size_wait_s": 300}
    assert sized.model_copy(update={"name": steady.name, "description": steady.description,
                                    "args": steady.args}) == steady
