"""docs/metrics.md's Prometheus section names what `/metrics` of a real server exports, and nothing else."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
from serve_helpers import Server

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
# need two whole one-hour windows, or an allocation sample taken while a job waits (every 10 s)
# and a job that reports its progress (tests/serve/test_serve_elastic.py scrapes those)
NOT_YET = {"trimtab_throughput_cv", "trimtab_goodput_cv", "trimtab_backlogged_util", "trimtab_job_gpu_util",
           "trimtab_job_samples_per_second", "trimtab_job_batch_size"}


def wait_state(client: httpx.Client, job_id: int, state: str) -> None:
    deadline = time.monotonic() + 30
    while client.get(f"/v1/jobs/{job_id}").json()["state"] != state:
        assert time.monotonic() < deadline, f"job {job_id} never {state}"
        time.sleep(0.1)


def test_every_metric_the_page_names_is_exported(tmp_path: Path) -> None:
    """One job completed, one running, one pending on one GPU: every name of the page but the three that need
    more time is in the scrape, and every exported name is on the page."""
    documented = set(re.findall(r"`(trimtab_\w+)", DOC.read_text().split("## Prometheus")[1]))
    server = Server(tmp_path / "data", "--gpus", "1").start()
    try:
        with server.client() as client:
            done = client.post("/v1/jobs", json={"command": ["true"], "gpus": 1}).json()["id"]
            wait_state(client, done, "completed")
            running = client.post("/v1/jobs", json={"command": ["sleep", "30"], "gpus": 1}).json()["id"]
            wait_state(client, running, "running")
            client.post("/v1/jobs", json={"command": ["true"], "gpus": 1})
            time.sleep(2.5)  # past the 2 s cache of the store's aggregates
            scrape = client.get("/metrics").text  # the admin token reads /metrics
            client.post(f"/v1/jobs/{running}/cancel")
    finally:
        server.stop()
    exported = {re.sub(r"_(bucket|count|sum|created)$", "", name)
                for name in re.findall(r"^(trimtab_\w+)", scrape, re.M)}
    assert documented - exported == NOT_YET
    assert exported - documented == set()
