"""Stories of the serve API and CLI against a real server on loopback: tokens and tenants, bad input answered with
a precise 4xx that leaves the store unchanged, cancel and logs, /metrics, and the CLI client's --json output."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from serve_helpers import SRC, Server

from trimtab.serve.store import JobRow, Store, sqlite_url


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = Server(tmp_path_factory.mktemp("api") / "data", "--gpus", "4", entry="trimtab.cli").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def team_a(server: Server, admin: httpx.Client) -> Iterator[httpx.Client]:
    r = admin.post("/v1/tokens", json={"tenant": "team-a", "quota_gpus": 2})
    assert r.status_code == 201, r.text
    with server.client(r.json()["token"]) as client:
        yield client


def stored_jobs(server: Server) -> int:
    store = Store(sqlite_url(server.data_dir / "trimtab.db"))
    try:
        with store.reader() as s:
            return s.query(JobRow).count()
    finally:
        store.close()


def wait_state(client: httpx.Client, job_id: int, states: tuple[str, ...], timeout_s: float = 15) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in states:
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} is {job['state']}, not in {states}")


def test_the_admin_token_file_is_private(server: Server) -> None:
    assert (server.data_dir / "admin.token").stat().st_mode & 0o777 == 0o600


def test_requests_without_a_valid_token_are_refused(server: Server) -> None:
    cases = [({}, 401, "missing bearer token"), ({"Authorization": "Bearer nope"}, 401, "unknown token"),
             ({"Authorization": "Basic abc"}, 401, "malformed Authorization")]
    for headers, status, words in cases:
        r = httpx.post(f"{server.url}/v1/jobs", json={"command": ["true"]}, headers=headers)
        assert (r.status_code, words in r.json()["detail"]) == (status, True), r.text
        assert httpx.get(f"{server.url}/v1/jobs", headers=headers).status_code == status


BAD_JSON = [
    ({"command": ["true"], "gpus": -1}, 422, "gpus", "greater than or equal to 0"),
    ({"command": ["true"], "gpus": 10_000}, 422, "gpus", "less than or equal to 64"),
    ({"command": ["true"], "gpus": 3, "tasks": 2}, 422, "gpus", "this server has 4"),
    ({"command": ["true"], "gpu": 1}, 422, "gpu", "unknown field"),
    ({"command": ["true"], "priority_class": "urgent"}, 422, "priority_class", "unknown priority class 'urgent'"),
    ({"command": ["no-such-program-xyz"]}, 422, "command", "was not found on the server's PATH"),
    ({"command": []}, 422, "command", "at least 1 item"),
    ({"gpus": 1}, 422, "command", "Field required"),
    ({"command": ["true"], "env": {"1BAD": "x"}}, 422, "env", "not a valid environment variable name"),
    ({"command": ["true"], "name": "a b"}, 422, "name", "use letters, digits"),
]


@pytest.mark.parametrize(("body", "status", "field", "words"), BAD_JSON, ids=[str(c[0]) for c in BAD_JSON])
def test_a_bad_json_job_gets_a_precise_error_and_stores_nothing(server: Server, admin: httpx.Client, body: dict,
                                                               status: int, field: str, words: str) -> None:
    before = stored_jobs(server)
    r = admin.post("/v1/jobs", json=body)
    assert r.status_code == status, r.text
    assert r.json()["field"] == field and words in r.json()["detail"], r.text
    assert stored_jobs(server) == before


POD = """apiVersion: v1
kind: Pod
metadata: {name: train, namespace: team-a}
spec:
  priorityClassName: %s
  containers:
  - name: main
    image: ignored
    command: [sh, -c, "exit 0"]
    resources: {limits: {nvidia.com/gpu: %s}}
"""

BAD_YAML = [
    ("kind: Pod\nspec: [unclosed", 400, "", "malformed YAML at line 2"),
    (POD % ("normal", "-1"), 422, "spec.containers[0].resources.nvidia.com/gpu", "got -1"),
    (POD % ("normal", "999"), 422, "spec.containers[0].resources.nvidia.com/gpu", "got 999"),
    (POD % ("urgent", "1"), 422, "spec.priorityClassName", "unknown priority class"),
    (POD.replace("image: ignored", "imgae: ignored") % ("normal", "1"), 422, "spec.containers[0].imgae",
     "unknown field"),
    ("apiVersion: v1\nkind: Service\n", 422, "kind", "unsupported kind 'Service'"),
    (POD % ("normal", "1") + "---\n" + POD % ("normal", "1"), 422, "", "exactly one YAML document"),
]


@pytest.mark.parametrize(("text", "status", "field", "words"), BAD_YAML, ids=[c[3] for c in BAD_YAML])
def test_a_bad_manifest_gets_a_precise_error_and_stores_nothing(server: Server, admin: httpx.Client, text: str,
                                                                status: int, field: str, words: str) -> None:
    before = stored_jobs(server)
    r = admin.post("/v1/jobs", content=text, headers={"Content-Type": "application/yaml"})
    assert r.status_code == status, r.text
    assert r.json()["field"] == field and words in r.json()["detail"], r.text
    assert stored_jobs(server) == before


def test_malformed_json_and_an_oversized_body_are_refused(server: Server, admin: httpx.Client) -> None:
    before = stored_jobs(server)
    r = admin.post("/v1/jobs", content=b'{"command": ["true"', headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "malformed JSON at line 1" in r.json()["detail"]
    big = {"command": ["true", "x" * 9000], "env": {f"V{i}": "y" * 9000 for i in range(200)}}
    r = admin.post("/v1/jobs", json=big)
    assert r.status_code == 413 and "larger than" in r.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds for a streamed body too
        for _ in range(300):
            yield b" " * 8192

    r = admin.post("/v1/jobs", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert stored_jobs(server) == before


def test_a_tenant_sees_only_its_jobs_and_is_held_to_its_quota(server: Server, admin: httpx.Client,
                                                              team_a: httpx.Client) -> None:
    other = admin.post("/v1/jobs", json={"command": ["sleep", "30"], "gpus": 0, "tenant": "team-b"}).json()["id"]
    mine = team_a.post("/v1/jobs", json={"command": ["true"], "gpus": 1}).json()["id"]
    seen = {j["id"] for j in team_a.get("/v1/jobs").json()["jobs"]}
    assert mine in seen and other not in seen
    assert {j["id"] for j in team_a.get("/v1/jobs", params={"tenant": "team-a"}).json()["jobs"]} == seen
    r = team_a.get("/v1/jobs", params={"tenant": "team-b"})  # not silently its own list instead
    assert r.status_code == 403 and r.json()["field"] == "tenant"
    assert team_a.get(f"/v1/jobs/{other}").status_code == 404
    assert team_a.post(f"/v1/jobs/{other}/cancel").status_code == 404
    r = team_a.post("/v1/jobs", json={"command": ["true"], "gpus": 3})
    assert r.status_code == 403 and "quota is 2" in r.json()["detail"]
    r = team_a.post("/v1/jobs", json={"command": ["true"], "tenant": "team-b"})
    assert r.status_code == 403 and "cannot submit for tenant team-b" in r.json()["detail"]
    assert team_a.post("/v1/tokens", json={"tenant": "team-a"}).status_code == 403
    assert team_a.put("/v1/tenants/team-a", json={"quota_gpus": 100}).status_code == 403
    assert admin.post(f"/v1/jobs/{other}/cancel").json()["state"] in ("running", "cancelled")
    assert wait_state(admin, other, ("cancelled",))["state"] == "cancelled"


def test_a_manifest_becomes_a_gang_and_its_ranks_log_their_gpus(admin: httpx.Client) -> None:
    job = """apiVersion: batch/v1
kind: Job
metadata: {name: gang, namespace: team-c}
spec:
  parallelism: 2
  backoffLimit: 1
  template:
    spec:
      containers:
      - name: main
        command: [sh, -c]
        args: ['echo "rank $RANK of $WORLD_SIZE gpus $CUDA_VISIBLE_DEVICES"']
        env: [{name: GREETING, value: hi}]
        resources: {limits: {nvidia.com/gpu: 2, cpu: 500m, memory: 1Gi}}
"""
    r = admin.post("/v1/jobs", content=job, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    created = r.json()
    assert (created["tenant"], created["tasks"], created["gpus_per_task"], created["retries"]) == ("team-c", 2, 2, 1)
    assert (created["cpu_milli"], created["mem_mib"]) == (500, 1024)
    done = wait_state(admin, created["id"], ("completed", "failed"))
    assert done["state"] == "completed"
    logs = [admin.get(f"/v1/jobs/{done['id']}/logs", params={"rank": rank}).text for rank in (0, 1)]
    gpus = [run["gpus"] for run in done["runs"]]
    assert logs == [f"rank {rank} of 2 gpus {','.join(gpus[rank])}\n" for rank in (0, 1)]


def test_cancel_stops_a_running_job_and_metrics_count_it(server: Server, admin: httpx.Client) -> None:
    quick = admin.post("/v1/jobs", json={"command": ["true"], "gpus": 0, "tenant": "team-d"}).json()
    wait_state(admin, quick["id"], ("completed",))
    job = admin.post("/v1/jobs", json={"command": ["sleep", "60"], "gpus": 1, "tenant": "team-d"}).json()
    wait_state(admin, job["id"], ("running",))
    metrics = admin.get("/metrics").text
    assert 'trimtab_queue_length{tenant=' in metrics and 'trimtab_gpus_allocated{node=' in metrics
    assert "trimtab_sched_cycle_seconds_bucket" in metrics and "trimtab_jobs_submitted" in metrics
    grafana = (Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json").read_text()
    exported = set(re.findall(r"^(trimtab_\w+)", metrics, re.M))
    assert set(re.findall(r"trimtab_\w+", grafana)) - exported == set(), "the Grafana dashboard plots what exists"
    r = admin.delete(f"/v1/jobs/{job['id']}")
    assert r.status_code == 200
    done = wait_state(admin, job["id"], ("cancelled",))
    assert done["runs"][0]["outcome"] == "cancelled"
    assert admin.post(f"/v1/jobs/{job['id']}/cancel").status_code == 409
    assert admin.get("/v1/jobs/999999").status_code == 404


def trimtab(server: Server, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in-process (Typer's runner: one import of the CLI for all calls), over real HTTP."""
    from typer.testing import CliRunner

    from trimtab.cli import app

    env = {"TRIMTAB_SERVER": server.url, "TRIMTAB_TOKEN": token or server.admin_token,
           "HOME": str(server.data_dir.parent)}
    result = CliRunner().invoke(app, list(args), env=env)
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def trimtab_process(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a separate process, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "TRIMTAB_SERVER": server.url, "TRIMTAB_TOKEN": server.admin_token,
           "HOME": str(server.data_dir.parent)}
    return subprocess.run([sys.executable, "-m", "trimtab.cli", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def test_the_cli_submits_lists_shows_follows_logs_and_cancels(server: Server, tmp_path: Path) -> None:
    out = trimtab_process(server, "submit", "--gpus", "1", "--name", "hello", "--json", "--", "sh", "-c",
                  "echo hello $CUDA_VISIBLE_DEVICES; sleep 0.5; echo bye")
    assert out.returncode == 0, out.stderr
    job_id = json.loads(out.stdout)["id"]
    logs = trimtab(server, "logs", str(job_id), "-f")
    assert logs.returncode == 0 and logs.stdout.startswith("hello ") and logs.stdout.endswith("bye\n")
    shown = json.loads(trimtab(server, "job", str(job_id), "--json").stdout)
    assert {"id", "state", "attempts", "runs"} <= set(shown) and shown["state"] == "completed"
    listed = json.loads(trimtab(server, "jobs", "--json").stdout)
    assert job_id in [j["id"] for j in listed]
    nodes = json.loads(trimtab(server, "nodes", "--json").stdout)
    assert nodes["gpus_total"] == 4
    assert "tenant" in trimtab(server, "queues").stdout
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(POD % ("high", "1"))
    sub = trimtab(server, "submit", str(manifest), "--json")
    assert sub.returncode == 0, sub.stderr
    long = json.loads(trimtab(server, "submit", "--json", "--", "sleep", "60").stdout)["id"]
    cancelled = trimtab(server, "cancel", str(long), "--json")
    assert json.loads(cancelled.stdout)["state"] in ("running", "cancelled")
    bad = trimtab(server, "submit", "--gpus", "99", "--", "true")
    assert bad.returncode == 1 and "gpus" in bad.stderr and "HTTP 422" in bad.stderr
    retried = json.loads(trimtab(server, "submit", "--retries", "1", "--json", "--", "sh", "-c",
                                 'echo "try $TRIMTAB_ATTEMPT"; sleep 0.3; [ "$TRIMTAB_ATTEMPT" -ge 2 ]').stdout)["id"]
    assert trimtab(server, "logs", str(retried), "-f").stdout == "try 1\n--- attempt 2 ---\ntry 2\n"
    token = json.loads(trimtab(server, "token", "create", "--tenant", "team-e", "--json").stdout)["token"]
    assert json.loads(trimtab(server, "jobs", "--json", token=token).stdout) == []


def test_the_api_docs_load_nothing_from_outside_the_server(server: Server) -> None:
    """/docs (Swagger UI) names only this server's own assets (no CDN), and every one of them is served."""
    r = httpx.get(f"{server.url}/docs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert not re.search(r"https?:|//[\w.-]+\.[a-z]{2,}", r.text), "no external host"
    assets = re.findall(r"""(?:src|href)=["']([^"']+)|url: ?'([^']+)'""", r.text)
    urls = [a or b for a, b in assets]
    assert "/openapi.json" in urls and len(urls) == 4, urls
    for url in urls:
        assert url.startswith("/"), url
        got = httpx.get(f"{server.url}{url}")
        assert got.status_code == 200 and len(got.content) > 1000, url
    assert httpx.get(f"{server.url}/redoc").status_code == 404, "ReDoc would load its logo from a CDN"
