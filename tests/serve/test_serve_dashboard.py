"""The web dashboard at / in headless Chromium (Debian's `chromium`; skipped, saying why, when absent): with a token
it shows the queues, the running job and its GPUs on the map; without one it asks for a token. It loads nothing
from outside the server. The API docs at /docs render there too, from the server's own assets, with no console
error."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from serve_helpers import Server

from trimtab.serve.dashboard import DASHBOARD_HTML


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("headless Chromium is not installed (apt-get install chromium)")


def dump_dom(url: str, tmp: Path) -> str:
    result = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         f"--user-data-dir={tmp}", "--virtual-time-budget=10000", "--dump-dom", url],
        capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.fixture(scope="module")
def busy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, int]]:
    server = Server(tmp_path_factory.mktemp("dash") / "data", "--gpus", "4").start()
    with server.client() as client:
        job = client.post("/v1/jobs", json={"name": "dash-job", "command": ["sleep", "60"], "gpus": 2,
                                            "tenant": "vision"}).json()
        client.post("/v1/jobs", json={"name": "waiting", "command": ["sleep", "1"], "gpus": 4, "tenant": "nlp"})
        deadline = time.monotonic() + 15
        while client.get(f"/v1/jobs/{job['id']}").json()["state"] != "running" and time.monotonic() < deadline:
            time.sleep(0.1)
    yield server, job["id"]
    with server.client() as client:
        client.post(f"/v1/jobs/{job['id']}/cancel")
    server.stop()


def test_the_page_is_self_contained() -> None:
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", DASHBOARD_HTML)
    assert "<script src" not in DASHBOARD_HTML and "<link" not in DASHBOARD_HTML and "@import" not in DASHBOARD_HTML


def test_with_a_token_it_shows_queues_running_jobs_and_the_gpu_map(busy_server: tuple[Server, int],
                                                                   tmp_path: Path) -> None:
    server, job_id = busy_server
    dom = dump_dom(f"{server.url}/#token={server.admin_token}", tmp_path)
    assert "dash-job" in dom, dom[-3000:]
    assert dom.count(f">job {job_id}<") == 2, "the job's two GPUs on the map"
    assert re.search(r"<td>vision</td><td>0</td><td>1</td><td>2</td>", dom)
    assert re.search(r"<td>nlp</td><td>1</td><td>0</td><td>0</td>", dom)
    assert "2 of 4 GPUs allocated" in dom
    assert "<polyline" in dom, "the utilisation line of the chart"


def test_without_a_token_it_asks_for_one(busy_server: tuple[Server, int], tmp_path: Path) -> None:
    server, _ = busy_server
    assert httpx.get(f"{server.url}/").status_code == 200
    dom = dump_dom(f"{server.url}/", tmp_path)
    assert 'id="login" style="display: block;"' in dom and "a token is needed" in dom


def test_the_api_docs_render_offline_without_console_errors(busy_server: tuple[Server, int]) -> None:
    """Swagger UI at /docs lists the API's operations, every request of the page goes to this server, and the
    console shows no error."""
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright (Python) is not installed")
    server, _ = busy_server
    errors: list[str] = []
    requested: list[str] = []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        try:
            view = browser.new_page()
            view.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
            view.on("pageerror", lambda exc: errors.append(str(exc)))
            view.on("request", lambda req: requested.append(req.url))
            view.goto(f"{server.url}/docs")
            view.wait_for_selector(".opblock", timeout=30_000)
            shown = view.locator(".opblock").count()
        finally:
            browser.close()
    assert errors == []
    assert shown >= 10, "the operations of the API are listed"
    outside = [url for url in requested if not url.startswith((server.url, "data:", "blob:"))]
    assert outside == []
