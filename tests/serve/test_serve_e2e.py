"""End-to-end stories of `trimtab serve` over real HTTP on loopback with virtual GPUs: many jobs, gangs among
them, all complete, and no GPU is ever held by two tasks at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from serve_helpers import Server, overlapping, run_intervals, submit_mix, task_intervals, wait_all_terminal


def _run_mix(tmp_path: Path, count: int, gpus: int, db: str | None = None) -> None:
    out = tmp_path / "out"
    out.mkdir()
    server = Server(tmp_path / "data", "--gpus", str(gpus), db=db).start()
    try:
        with server.client() as client:
            ids = submit_mix(client, out, count, seed=7)
            jobs = wait_all_terminal(client, count, timeout_s=30 + count * 0.5)
    finally:
        server.stop()
    assert sorted(j["id"] for j in jobs) == sorted(ids)
    assert [j["id"] for j in jobs if j["state"] != "completed"] == []
    assert all(j["attempts"] == 1 for j in jobs)
    intervals = task_intervals(out)
    assert len({name for *_, name in intervals}) == sum(j["tasks"] for j in jobs), "every task recorded its run"
    for job in jobs:  # every task saw exactly its own GPUs
        for run in job["runs"]:
            line = (out / f"{job['id']}.{run['rank']}.1").read_text().split()
            assert line[2].split(",") == run["gpus"]
            assert len(run["gpus"]) == job["gpus_per_task"]
    assert overlapping(intervals) == []
    assert overlapping(run_intervals(jobs)) == []
    assert sorted(int(p.name.split(".")[1]) for p in out.glob("marker.*")) == sorted(ids)


def test_a_mix_of_jobs_and_gangs_all_complete_and_no_gpu_is_shared(tmp_path: Path) -> None:
    """60 jobs of 1 to 4 GPUs (gangs of 2 among them) on 8 virtual GPUs: all complete once, each task saw exactly
    its GPUs in CUDA_VISIBLE_DEVICES, and the recorded run intervals never overlap on a GPU."""
    _run_mix(tmp_path, 60, 8)


@pytest.mark.slow
def test_five_hundred_jobs_all_complete_and_no_gpu_is_shared(tmp_path: Path) -> None:
    """The issue's 500-job run."""
    _run_mix(tmp_path, 500, 8)
