"""Kubernetes gangs run live: a Volcano Job submitted with `trimtab submit`, and a PodGroup with its pods posted to
the API, to a real `trimtab serve` with virtual GPUs and local processes; every task runs once, with its rank."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_helpers import SRC, Server

RECORD = 'echo "$RANK $WORLD_SIZE $CUDA_VISIBLE_DEVICES" > "$OUT/$TRIMTAB_JOB_ID.$RANK"'

VOLCANO_JOB = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: pair}}
spec:
  minAvailable: 2
  schedulerName: volcano
  tasks:
    - name: worker
      replicas: 2
      template:
        spec:
          containers:
            - name: w
              image: busybox
              command: [sh, -c, '{record}']
              env: [{{name: OUT, value: "{out}"}}]
              resources: {{limits: {{nvidia.com/gpu: 1}}}}
"""

POD_GROUP = """
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {{name: group}}
spec: {{minMember: 2}}
""" + "".join("""---
apiVersion: v1
kind: Pod
metadata: {{name: member-{i}, annotations: {{scheduling.k8s.io/group-name: group}}}}
spec:
  containers:
    - name: m
      command: [sh, -c, '{record}']
      env: [{{name: OUT, value: "{out}"}}]
      resources: {{limits: {{nvidia.com/gpu: 1}}}}
""".replace("{i}", str(i)) for i in range(2))


@pytest.fixture
def server(tmp_path: Path) -> Any:
    server = Server(tmp_path / "data", "--gpus", "4").start()
    try:
        yield server
    finally:
        server.stop()


def _wait_done(client: httpx.Client, job_id: int, timeout_s: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in ("completed", "failed", "cancelled"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not end: {job}")


def _ranks_seen(out: Path, job_id: int) -> list[list[str]]:
    return [(out / f"{job_id}.{rank}").read_text().split() for rank in range(2)]


def test_a_volcano_job_gang_submitted_with_trimtab_submit_runs_both_tasks(server: Server, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    manifest = tmp_path / "pair.yaml"
    manifest.write_text(VOLCANO_JOB.format(record=RECORD, out=out))
    env = {**os.environ, "PYTHONPATH": str(SRC), "TRIMTAB_SERVER": server.url, "TRIMTAB_TOKEN": server.admin_token}
    done = subprocess.run([sys.executable, "-m", "trimtab.cli", "submit", str(manifest)], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    with server.client() as client:
        job_id = max(j["id"] for j in client.get("/v1/jobs").json()["jobs"])
        job = _wait_done(client, job_id)
    assert (job["state"], job["name"], job["tasks"]) == ("completed", "pair", 2), job
    seen = _ranks_seen(out, job_id)
    assert [(rank, world) for rank, world, _ in seen] == [("0", "2"), ("1", "2")]
    assert seen[0][2] != seen[1][2], "each task has its own GPU"


def test_a_pod_group_with_its_pods_runs_as_one_gang(server: Server, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with server.client() as client:
        answer = client.post("/v1/jobs", content=POD_GROUP.format(record=RECORD, out=out),
                             headers={"Content-Type": "application/yaml"})
        assert answer.status_code in (200, 201), answer.text
        job = _wait_done(client, answer.json()["id"])
    assert (job["state"], job["tasks"], job["attempts"]) == ("completed", 2, 1), job
    assert [(rank, world) for rank, world, _ in _ranks_seen(out, job["id"])] == [("0", "2"), ("1", "2")]
