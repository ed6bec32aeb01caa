"""GPU shares end to end: `trimtab serve` on one virtual node with one GPU of 80 GiB, real task processes. Two
half-GPU jobs run at once on GPU 0, each told its share through the MPS variables; a whole-GPU job waits for both;
a SIGKILLed server re-adopts the shares on the GPU they hold, and no GPU is ever held beyond 1000 milli."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
from serve_helpers import (
    Server,
    overcommitted,
    run_intervals,
    task_command,
    task_env,
    task_intervals,
    wait_all_terminal,
)

CLUSTER = "1x1:h100-80gb"  # a virtual GPU whose model name states its memory: 80 GiB
SHARE_ENV = {"CUDA_VISIBLE_DEVICES": "0", "TRIMTAB_GPU_MILLI": "500", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
             "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40960M"}


def submit(client: httpx.Client, out: Path, sleep_s: float, **request: Any) -> int:
    r = client.post("/v1/jobs", json={"command": task_command(out, sleep_s, record_env=True), **request})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def wait_running(client: httpx.Client, ids: list[int], timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(client.get(f"/v1/jobs/{j}").json()["state"] == "running" for j in ids):
            return
        time.sleep(0.1)
    raise AssertionError(f"jobs {ids} did not all run within {timeout_s} s")


def span(out: Path, job_id: int) -> tuple[float, float]:
    [(_, start, end, _)] = [i for i in task_intervals(out) if i[3] == f"{job_id}.0.1"]
    return start, end


def check_gpu_map(client: httpx.Client, shares: list[int], whole: int) -> None:
    [node] = client.get("/v1/nodes").json()["nodes"]
    [gpu] = node["devices"]
    assert sorted(h["job_id"] for h in gpu["jobs"]) == sorted(shares)
    assert {h["milli"] for h in gpu["jobs"]} == {500}
    assert gpu["milli_allocated"] == 1000 and gpu["memory_mib"] == 80 * 1024
    assert client.get(f"/v1/jobs/{whole}").json()["state"] == "pending"


def check_end(out: Path, jobs: list[dict[str, Any]], shares: list[int], whole: int) -> None:
    assert [j["state"] for j in jobs] == ["completed"] * 3
    assert [j["attempts"] for j in jobs] == [1, 1, 1]
    for job_id in shares:
        assert task_env(out, job_id) == SHARE_ENV
        assert (out / f"marker.{job_id}").read_text() == "done\n", f"job {job_id} ran exactly once"
    assert task_env(out, whole) == {"CUDA_VISIBLE_DEVICES": "0"}, "a whole GPU gets no MPS limits"
    (a0, a1), (b0, b1), (w0, _) = span(out, shares[0]), span(out, shares[1]), span(out, whole)
    assert max(a0, b0) < min(a1, b1), "the two shares ran at the same time"
    assert w0 >= max(a1, b1), "the whole-GPU job started after both shares ended"
    milli = {str(j["id"]): j["gpu_milli"] or 1000 for j in jobs}
    assert overcommitted(task_intervals(out), milli) == []
    assert overcommitted(run_intervals(jobs), milli) == []


def test_two_half_gpu_jobs_run_at_once_on_gpu_0_and_a_whole_gpu_job_waits(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    server = Server(tmp_path / "data", "--cluster", CLUSTER).start()
    try:
        with server.client() as client:
            shares = [submit(client, out, 2.0, gpu_milli=500) for _ in range(2)]
            whole = submit(client, out, 0.2, gpus=1)
            wait_running(client, shares)
            check_gpu_map(client, shares, whole)
            jobs = wait_all_terminal(client, 3, timeout_s=30)
    finally:
        server.stop()
    check_end(out, jobs, shares, whole)


def test_a_sigkilled_server_adopts_the_shares_on_their_gpu_and_never_overfills_it(tmp_path: Path) -> None:
    """The server dies while both shares run. The new one re-adopts them (not relaunched), books them on GPU 0
    again (1000 milli: the whole-GPU job still waits), and all three complete once."""
    out = tmp_path / "out"
    out.mkdir()
    server = Server(tmp_path / "data", "--cluster", CLUSTER).start()
    try:
        with server.client() as client:
            # long enough to outlive a slow restart on a busy machine: the new server must find them running
            shares = [submit(client, out, 15.0, gpu_milli=500) for _ in range(2)]
            whole = submit(client, out, 0.2, gpus=1)
            wait_running(client, shares)
        server.kill()
        server.start()
        with server.client() as client:
            check_gpu_map(client, shares, whole)
            jobs = wait_all_terminal(client, 3, timeout_s=60)
    finally:
        server.stop()
    assert "recovered: 2 adopted" in server.log.read_text()
    check_end(out, jobs, shares, whole)
