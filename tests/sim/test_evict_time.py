"""`SimConfig.evict_s`: a preempted job's GPUs take that long to come free; a job started on its node waits."""

from __future__ import annotations

from typing import Any

import pytest

from builders import nodes
from trimtab.model import Job, Resources
from trimtab.sim.run import SimConfig, simulate


def one_task(jid: str, gpus: int, submit_s: float = 0.0, duration_s: float = 100.0, priority: int = 0) -> Job:
    return Job(id=jid, submit_s=submit_s, tasks=1, task=Resources(gpus=gpus), duration_s=duration_s,
               priority=priority)


def runs(record: dict[str, Any], job_id: str) -> list[dict[str, Any]]:
    return next(j for j in record["jobs"] if j["id"] == job_id)["runs"]


def run(evict_s: float, jobs: list[Job], cluster: int = 1) -> dict[str, Any]:
    return simulate(nodes(cluster, 4), jobs, "priority",
                    SimConfig(checkpoint_s=0.0, restart_s=0.0, evict_s=evict_s, timing=False))


def test_the_preemptor_makes_progress_once_its_victims_gpus_are_free():
    jobs = [one_task("low", 4, duration_s=300.0), one_task("high", 4, submit_s=50.0, priority=10)]
    instant, slow = run(0.0, jobs), run(3.0, jobs)
    assert runs(instant, "high")[0]["progress_from"] == 50.0
    high = runs(slow, "high")[0]
    assert (high["start"], high["progress_from"], high["end"]) == (50.0, 53.0, 153.0)
    assert runs(slow, "low")[0]["end"] == 50.0  # the victim stops at once; its GPUs are the preemptor's, idle


def test_a_start_on_another_node_does_not_wait_for_an_eviction():
    jobs = [one_task("low", 4, duration_s=300.0), one_task("busy", 2, duration_s=300.0),
            one_task("high", 4, submit_s=50.0, priority=10), one_task("small", 2, submit_s=50.0)]
    record = run(3.0, jobs, cluster=2)
    assert runs(record, "low")[0]["end"] == 50.0
    assert runs(record, "high")[0]["progress_from"] == 53.0
    small = runs(record, "small")[0]
    assert small["nodes"] == runs(record, "busy")[0]["nodes"] and small["progress_from"] == 50.0


def test_a_negative_evict_time_is_refused():
    with pytest.raises(ValueError, match="evict_s"):
        SimConfig(evict_s=-1.0)
