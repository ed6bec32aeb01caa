"""What one request may cost a real `trimtab serve`: alias bombs, deep nesting, many documents, long numbers and
quantities, huge log offsets, short and slow bodies and heads, each answered quickly with a 4xx naming the limit
while /healthz stays fast; strict counts and names; /metrics behind a token; security headers on every answer.
The server runs with an empty PATH, so no accepted command but /bin/echo can run on this machine."""

from __future__ import annotations

import base64
import hashlib
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from serve_helpers import SRC, Server

from trimtab.serve.intake.submission import EXCERPT_CHARS

YAML = {"Content-Type": "application/yaml"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    empty = tmp_path_factory.mktemp("empty-path")
    server = Server(tmp_path_factory.mktemp("security") / "data", "--gpus", "2", "--body-timeout-s", "1",
                    "--header-timeout-s", "1", "--max-header-bytes", "8192", env={"PATH": str(empty)}).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tenant(server: Server, admin: httpx.Client) -> Iterator[httpx.Client]:
    r = admin.post("/v1/tokens", json={"tenant": "team-a"})
    assert r.status_code == 201, r.text
    with server.client(r.json()["token"]) as client:
        yield client


def alias_bomb() -> str:
    """A batch/v1 Job whose spec.parallelism is an 8-level, 9-wide nest of aliases: 9^8 (43 million) values."""
    levels = ["&a0 [x, x, x, x, x, x, x, x, x]"]
    levels += [f"&a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    return ("apiVersion: batch/v1\nkind: Job\nmetadata: {name: bomb}\nspec:\n  parallelism: [\n    "
            + ",\n    ".join(levels) + "]\n")


def healthz_latencies_during(server: Server, attack: Callable[[], None]) -> list[float]:
    """/healthz answer times (s), polled from another thread while `attack` runs."""
    latencies: list[float] = []
    done = threading.Event()

    def poll() -> None:
        with httpx.Client(base_url=server.url, timeout=5) as client:
            while not done.is_set():
                start = time.monotonic()
                assert client.get("/healthz").status_code == 200
                latencies.append(time.monotonic() - start)
                time.sleep(0.01)

    def samples_after(count: int) -> None:
        deadline = time.monotonic() + 5
        while len(latencies) <= count and time.monotonic() < deadline:
            time.sleep(0.005)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        samples_after(0)
        attack()
        samples_after(len(latencies) + 1)  # one more answer, asked while the attack was being answered
    finally:
        done.set()
        poller.join()
    return latencies


def post_quickly(client: httpx.Client, body: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """POST /v1/jobs; the answer must be a 4xx within 1 s and quote little of the body."""
    start = time.monotonic()
    r = client.post("/v1/jobs", content=body.encode(), headers=headers or {"Content-Type": "application/json"})
    assert time.monotonic() - start < 1.0, f"{r.status_code} after {time.monotonic() - start:.2f} s"
    assert 400 <= r.status_code < 500, r.text
    assert len(r.content) < 3 * EXCERPT_CHARS, len(r.content)
    return r


def test_the_alias_bomb_is_refused_at_once_while_healthz_stays_fast(server: Server, tenant: httpx.Client) -> None:
    bomb = alias_bomb()
    assert len(bomb) < 600
    answers: list[httpx.Response] = []
    latencies = healthz_latencies_during(server, lambda: answers.extend(
        post_quickly(tenant, bomb, YAML) for _ in range(10)))
    assert answers[0].status_code == 422 and "aliases" in answers[0].json()["detail"], answers[0].text
    assert latencies and max(latencies) < 0.1, max(latencies)


@pytest.mark.parametrize("kind", ["json", "yaml", "yaml-job"])
def test_nesting_100000_deep_is_refused_at_once(server: Server, tenant: httpx.Client, kind: str) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    body, headers = {
        "json": ('{"command": ["true"], "env": ' + deep + "}", None),
        "yaml": (deep, YAML),
        "yaml-job": ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: " + deep + "}\n", YAML),
    }[kind]
    answers: list[httpx.Response] = []
    latencies = healthz_latencies_during(server, lambda: answers.append(post_quickly(tenant, body, headers)))
    assert "nest" in answers[0].json()["detail"], answers[0].text  # ours, or libyaml's own bound (1000 levels)
    assert latencies and max(latencies) < 0.1, max(latencies)


def test_eight_flow_sequences_of_500000_values_at_once_are_refused_quickly(server: Server,
                                                                            tenant: httpx.Client) -> None:
    """1 MB of `[1,1,...]` took 3.5 s to build and eight at once 28 s, with /healthz at 2.3 s: the values are now
    counted before any is built, and a tenant has one manifest read at a time (the others answered 429)."""
    flood = "[" + ",".join(["1"] * 500_000) + "]"
    assert len(flood) < 1 << 20  # under the body limit: the YAML bounds must refuse it
    answers: list[httpx.Response] = []

    def attack() -> None:
        with ThreadPoolExecutor(8) as pool:
            answers.extend(pool.map(lambda _: post_quickly(tenant, flood, YAML), range(8)))

    latencies = healthz_latencies_during(server, attack)
    assert {r.status_code for r in answers} <= {422, 429} and any(r.status_code == 422 for r in answers)
    assert all("values in one document" in r.json()["detail"] for r in answers if r.status_code == 422)
    assert latencies and max(latencies) < 0.1, max(latencies)


def test_ten_thousand_documents_are_refused_quickly(tenant: httpx.Client) -> None:
    docs = "".join(f"---\napiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: c{i}}}\n"
                   f"value: {i}\n" for i in range(10_000))
    r = post_quickly(tenant, docs, YAML)
    assert "documents (the limit)" in r.json()["detail"], r.text


@pytest.mark.parametrize(("body", "headers"), [
    ('{"command": ["true"], "gpus": ' + "9" * 5000 + "}", None),
    ("command: ['true']\ngpus: " + "9" * 5000 + "\n", YAML),
    ("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  parallelism: " + "9" * 5000 + "\n", YAML),
], ids=["json", "yaml-job", "manifest"])
def test_numbers_of_5000_digits_are_refused(tenant: httpx.Client, body: str, headers: dict[str, str] | None) -> None:
    r = post_quickly(tenant, body, headers)
    assert "digits is over the limit" in r.json()["detail"], r.text


def pod(resources: str, name: str = "p", namespace: str = "") -> str:
    ns = f", namespace: {namespace}" if namespace else ""
    return (f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}{ns}}}\nspec:\n  containers:\n  - name: c\n"
            f"    image: i\n    command: ['true']\n    resources: {{requests: {resources}}}\n")


@pytest.mark.parametrize(("resources", "field"), [
    ("{cpu: '" + "9" * 400 + "'}", "spec.containers[0].resources.cpu"),
    ("{memory: '" + "9" * 400 + "Gi'}", "spec.containers[0].resources.memory"),
], ids=["cpu", "memory"])
def test_quantities_of_400_nines_are_refused(tenant: httpx.Client, resources: str, field: str) -> None:
    r = post_quickly(tenant, pod(resources), YAML)
    assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert "out of range" in r.json()["detail"]


def test_a_log_offset_past_any_file_is_refused(admin: httpx.Client) -> None:
    job = admin.post("/v1/jobs", json={"command": ["/bin/echo", "hello"], "gpus": 0}).json()
    deadline = time.monotonic() + 15
    while admin.get(f"/v1/jobs/{job['id']}").json()["state"] != "completed" and time.monotonic() < deadline:
        time.sleep(0.1)
    r = admin.get(f"/v1/jobs/{job['id']}/logs", params={"offset": 17592186044416})
    assert r.status_code == 422 and r.json()["field"] == "offset", r.text
    assert "hello" in admin.get(f"/v1/jobs/{job['id']}/logs").text
    far = admin.get(f"/v1/jobs/{job['id']}/logs", params={"offset": 1 << 40})
    assert far.status_code == 200 and far.text == "" and far.headers["x-trimtab-offset"] == str(1 << 40)


def test_an_error_quotes_only_an_excerpt(tenant: httpx.Client) -> None:
    long_name = "n" * 9000
    r = post_quickly(tenant, pod("{cpu: '1'}", name=long_name), YAML)
    assert r.json()["field"] == "metadata.name" and "..." in r.json()["detail"], r.text
    r = post_quickly(tenant, '{"command": ["true"], "env": {"' + "x-" * 4000 + '": "v"}}')
    assert r.json()["field"] == "env", r.text


@pytest.mark.parametrize(("spec", "field"), [
    ({"gpus": "2"}, "gpus"), ({"gpus": True}, "gpus"), ({"tasks": "2"}, "tasks"), ({"retries": False}, "retries"),
    ({"name": "job\n"}, "name"), ({"name": "job\x07"}, "name"), ({"tenant": "team-b\n"}, "tenant"),
    ({"workdir": "/tmp\n"}, "workdir"), ({"node_selector": {"zone": "a\n"}}, "node_selector"),
])
def test_no_coercion_to_counts_and_no_newlines_in_names(admin: httpx.Client, spec: dict, field: str) -> None:
    r = admin.post("/v1/jobs", json={"command": ["true"], **spec})
    assert r.status_code == 422 and r.json()["field"] == field, r.text


@pytest.mark.parametrize(("body", "field"), [
    ("command: ['true']\ngpus: '2'\n", "gpus"),
    ("command: ['true']\ngpus: true\n", "gpus"),
    ("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  parallelism: '2'\n  template:\n    spec:\n"
     "      containers: [{name: c, image: i, command: ['true']}]\n", "spec.parallelism"),
    (pod("{cpu: '1'}", name='"p\\n"'), "metadata.name"),
    (pod("{cpu: '1'}", namespace='"team-a\\n"'), "metadata.namespace"),
], ids=["yaml-gpus-string", "yaml-gpus-bool", "parallelism-string", "name-newline", "namespace-newline"])
def test_manifests_are_held_to_the_same_counts_and_names(admin: httpx.Client, body: str, field: str) -> None:
    r = admin.post("/v1/jobs", content=body.encode(), headers=YAML)
    assert r.status_code == 422 and r.json()["field"] == field, r.text


def test_tenant_names_and_quotas_are_strict(admin: httpx.Client) -> None:
    assert admin.put("/v1/tenants/team-c%0A", json={"quota_gpus": 1}).status_code == 422
    assert admin.put("/v1/tenants/team-c", json={"quota_gpus": "1"}).status_code == 422
    assert admin.post("/v1/tokens", json={"tenant": "team-c", "quota_gpus": True}).status_code == 422
    assert admin.put("/v1/tenants/team-c", json={"quota_gpus": 1}).status_code == 200


def raw_exchange(server: Server, parts: list[bytes], pause_s: float = 0.0) -> tuple[bytes, float]:
    """Send `parts` on one connection (`pause_s` between them), then read until the server closes it."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        for part in parts:
            try:
                sock.sendall(part)
            except OSError:
                break  # the server gave up on us: read its answer
            time.sleep(pause_s)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer, time.monotonic() - start


def test_a_body_shorter_than_its_content_length_is_dropped_quickly(server: Server) -> None:
    head = (f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.admin_token}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n").encode()
    answer, took_s = raw_exchange(server, [head + b'{"command":'])
    assert answer.startswith(b"HTTP/1.1 408") and b"--body-timeout-s" in answer, answer
    assert took_s < 2.0


def test_a_slow_body_is_dropped_quickly(server: Server) -> None:
    head = (f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.admin_token}\r\n"
            "Content-Type: application/json\r\nContent-Length: 40\r\n\r\n").encode()
    answer, took_s = raw_exchange(server, [head] + [b" "] * 40, pause_s=0.1)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert took_s < 2.5


def test_a_slow_or_large_request_head_is_refused(server: Server) -> None:
    answer, took_s = raw_exchange(server, [b"GET /healthz HTTP/1.1\r\nHost: x\r\n"])
    assert answer.startswith(b"HTTP/1.1 408") and b"--header-timeout-s" in answer, answer
    assert took_s < 2.0
    big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"a" * 20_000 + b"\r\n\r\n"
    answer, _ = raw_exchange(server, [big])
    assert answer.startswith(b"HTTP/1.1 431") and b"--max-header-bytes" in answer, answer


def test_metrics_need_the_admin_or_scrape_token(server: Server, admin: httpx.Client,
                                                tenant: httpx.Client) -> None:
    assert httpx.get(f"{server.url}/metrics").status_code == 401
    assert tenant.get("/metrics").status_code == 403
    assert "trimtab_jobs_submitted" in admin.get("/metrics").text
    scrape_token = (server.data_dir / "metrics.token").read_text().strip()
    assert (server.data_dir / "metrics.token").stat().st_mode & 0o077 == 0
    with server.client(scrape_token) as scraper:
        assert scraper.get("/metrics").status_code == 200
        assert scraper.get("/v1/jobs").status_code == 401, "the scrape token reads /metrics and nothing else"


def test_metrics_public_opens_them_on_loopback_only(tmp_path: Path) -> None:
    server = Server(tmp_path / "data", "--gpus", "1", "--metrics-public").start()
    try:
        assert httpx.get(f"{server.url}/metrics").status_code == 200
    finally:
        server.stop()
    refused = subprocess.run([sys.executable, "-m", "trimtab.cli", "serve", "--data-dir", str(tmp_path / "d2"),
                              "--gpus", "1", "--host", "0.0.0.0", "--metrics-public"], capture_output=True,
                             text=True, env={"PYTHONPATH": str(SRC), "PATH": ""}, timeout=60)
    assert refused.returncode == 2 and "loopback" in refused.stderr + refused.stdout


def test_every_answer_carries_security_headers(server: Server, admin: httpx.Client) -> None:
    for path in ("/healthz", "/v1/jobs", "/v1/jobs/999999", "/docs", "/"):
        r = admin.get(path)
        assert r.headers["x-content-type-options"] == "nosniff", path
        assert r.headers["x-frame-options"] == "DENY", path
        assert r.headers["referrer-policy"] == "no-referrer", path
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"], path
    assert httpx.get(f"{server.url}/v1/jobs").headers["x-frame-options"] == "DENY", "refusals too"
    for path in ("/", "/docs"):
        page = admin.get(path)
        csp = page.headers["content-security-policy"]
        scripts = re.findall(r"<script>(.*?)</script>", page.text, re.S)
        assert scripts, path
        for script in scripts:  # every inline script of the page may run, and nothing else inline
            digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
            assert f"'sha256-{digest}'" in csp, path
        assert "'unsafe-inline'" not in csp.split("script-src")[1].split(";")[0], path
        assert not re.search(r"\son[a-z]+=", page.text), f"{path}: inline event handlers would be blocked"
        assert "default-src 'none'" in admin.get("/v1/jobs").headers["content-security-policy"]
