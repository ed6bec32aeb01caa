"""Crash safety of `trimtab serve`: the daemon is SIGKILLed three times at random moments while jobs run and are
being submitted. After each restart it converges; at the end every accepted job completed exactly once, and no
GPU was ever held by two tasks at once."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import httpx
import pytest
from serve_helpers import Server, overlapping, run_intervals, task_command, task_intervals, wait_all_terminal


@pytest.mark.parametrize("count", [20, pytest.param(80, marks=pytest.mark.slow)])
def test_three_sigkills_lose_no_job_and_run_none_twice(tmp_path: Path, count: int) -> None:
    out = tmp_path / "out"
    out.mkdir()
    server = Server(tmp_path / "data", "--gpus", "4").start()
    token = server.admin_token
    rng = random.Random(11)
    accepted: dict[str, int] = {}
    done = threading.Event()

    def submit_all() -> None:
        """Submit `count` jobs, each with an idempotency key, retrying a key until the server answers (a request
        cut by a crash may or may not have been accepted: the key makes the retry safe)."""
        client = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=5)
        for i in range(count):
            sleep_s = 12.0 if i == 0 else rng.choice((0.2, 0.5, 3.0))  # the first one outlives the first crash
            spec = {"name": f"c{i}", "command": task_command(out, sleep_s),
                    "gpus": rng.randint(1, 2), "tasks": 2 if i % 4 == 0 else 1, "idempotency_key": f"key-{i}"}
            while True:
                try:
                    r = client.post("/v1/jobs", json=spec)
                except httpx.HTTPError:
                    time.sleep(0.2)
                    continue
                assert r.status_code in (200, 201), r.text
                accepted[spec["idempotency_key"]] = r.json()["id"]
                break
            time.sleep(0.4)  # submissions go on across the crashes
        done.set()

    submitter = threading.Thread(target=submit_all)
    submitter.start()
    try:
        with server.client() as client:  # the first job must be running at the first crash (it outlives it)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if "key-0" in accepted and client.get(f"/v1/jobs/{accepted['key-0']}").json()["state"] == "running":
                    break
                time.sleep(0.1)
        for _ in range(3):
            time.sleep(rng.uniform(0.5, 2.5))
            server.kill()
            time.sleep(rng.uniform(0.0, 1.0))
            server.start()
        submitter.join(timeout=120)
        assert done.is_set(), "the submitter did not finish"
        with server.client() as client:
            jobs = wait_all_terminal(client, count, timeout_s=120)
    finally:
        server.stop()
    assert len(accepted) == count and len(set(accepted.values())) == count, "one job per key, none lost"
    assert sorted(j["id"] for j in jobs) == sorted(accepted.values())
    assert [j["id"] for j in jobs if j["state"] != "completed"] == []
    for job_id in accepted.values():
        marker = out / f"marker.{job_id}"
        assert marker.exists() and marker.read_text() == "done\n", f"job {job_id} completed exactly once"
    assert overlapping(task_intervals(out)) == []
    assert overlapping(run_intervals(jobs)) == []
    log = server.log.read_text()
    assert log.count("serving on") == 4
    assert " adopted" in log, "some tasks ran across a restart and were re-adopted"
