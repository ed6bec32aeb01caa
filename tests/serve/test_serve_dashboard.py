"""The web dashboard at / of a real `trimtab serve`, in headless Chromium (Debian's `chromium` under playwright;
skipped, saying why, when absent): with a token it lists pending jobs with their reasons, running jobs, the GPU
map with tiles that fit their text (shared GPUs too) and a chart with time and value axes; a job opens on its own
page (details, runs, the end of its log, cancel); without a token, or with a refused one, it says how to give one.
Every request of the page goes to the server, and the console shows no error. The API docs at /docs render there
too, from the server's own assets."""

from __future__ import annotations

import base64
import hashlib
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_helpers import Server

from chromium import browsing
from trimtab.serve.http.dashboard import DASHBOARD_HTML


@pytest.fixture(scope="module")
def busy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, int]]]:
    """4 GPUs: a 2-GPU job running (it prints a line), two half-GPU jobs sharing one GPU, and two 4-GPU jobs
    waiting."""
    server = Server(tmp_path_factory.mktemp("dash") / "data", "--cluster", "1x4:h100-80gb").start()
    ids: dict[str, int] = {}
    with server.client() as client:
        def submit(name: str, **request: Any) -> None:
            r = client.post("/v1/jobs", json={"name": name, "command": ["sleep", "60"], **request})
            assert r.status_code == 201, r.text
            ids[name] = r.json()["id"]

        submit("dash-job", gpus=2, tenant="vision", command=["sh", "-c", "echo hello-from-dash; sleep 60"])
        submit("share-a", gpu_milli=500, tenant="vision")
        submit("share-b", gpu_milli=500, tenant="vision")
        submit("waiting", gpus=4, tenant="nlp")
        submit("to-cancel", gpus=4, tenant="nlp")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(
                client.get(f"/v1/jobs/{ids[n]}").json()["state"] != "running" for n in ("dash-job", "share-a",
                                                                                         "share-b")):
            time.sleep(0.1)
    yield server, ids
    with server.client() as client:
        for job_id in ids.values():
            client.post(f"/v1/jobs/{job_id}/cancel")
    server.stop()


def test_the_page_is_self_contained() -> None:
    """One inline style and one inline script (a CSP allows them by hash), nothing loaded from elsewhere, no inline
    handler or style attribute (a strict CSP refuses them)."""
    page = DASHBOARD_HTML
    assert len(re.findall(r"<script", page)) == len(re.findall(r"<script>", page)) == 1
    assert len(re.findall(r"<style", page)) == len(re.findall(r"<style>", page)) == 1
    assert not re.search(r"""(src|href|url)\s*[=(]\s*["']?(https?:)?//""", page)
    assert "<link rel=\"stylesheet\"" not in page and "@import" not in page
    assert not re.search(r"\son[a-z]+\s*=", page), "no inline event handler"
    assert "style=" not in page, "no style attribute"


def strict_csp(page: Any, server: Server) -> None:
    """Serve / to `page` under a Content-Security-Policy stricter than the server's: its one script and one style
    by hash, nothing inline besides, requests to the server only. A violation is a console error."""
    def digest(text: str) -> str:
        return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()

    [script] = re.findall(r"<script>(.*?)</script>", DASHBOARD_HTML, re.S)
    [style] = re.findall(r"<style>(.*?)</style>", DASHBOARD_HTML, re.S)
    csp = (f"default-src 'self'; script-src 'sha256-{digest(script)}'; style-src 'sha256-{digest(style)}'; "
           "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'")

    def enforce(route: Any) -> None:
        answer = route.fetch()
        route.fulfill(response=answer, headers={**answer.headers, "content-security-policy": csp})

    page.route(f"{server.url}/", enforce)


def wait_until(page: Any, expression: str, timeout_s: float = 20.0) -> None:
    """Poll `expression` in the page until true (wait_for_function would evaluate a string, which the CSP
    refuses)."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"still false after {timeout_s} s: {expression}"
        time.sleep(0.1)


def _gpu_tiles(page: Any) -> list[dict[str, Any]]:
    return page.evaluate("Array.from(document.querySelectorAll('.gpu')).map(t => ({text: t.innerText, "
                         "fits: t.scrollWidth <= t.clientWidth && t.scrollHeight <= t.clientHeight}))")


def test_the_overview_lists_pending_jobs_with_reasons_the_gpu_map_and_a_chart_with_axes(
        busy_server: tuple[Server, dict[str, int]], tmp_path: Path) -> None:
    server, ids = busy_server
    with server.client() as client:
        reason = client.get(f"/v1/jobs/{ids['waiting']}").json()["reason"]
    with browsing(tmp_path) as view:
        page = view.page
        strict_csp(page, server)
        page.goto(f"{server.url}/#token={server.admin_token}")
        page.wait_for_selector("#pending tbody tr")
        wait_until(page, "(document.querySelector('#chart polyline')?.points.length || 0) >= 2")  # 2 samples
        line_x = page.evaluate("(() => { const p = document.querySelector('#chart polyline').points, "
                               "a = document.querySelectorAll('#chart line.axis'); "
                               "return [p[0].x, p[p.length - 1].x, Number(a[a.length - 1].getAttribute('x1')), "
                               "Number(a[a.length - 1].getAttribute('x2'))]; })()")
        pending = page.evaluate("Array.from(document.querySelectorAll('#pending tbody tr'))"
                                ".map(r => Array.from(r.cells).map(c => c.innerText))")
        tiles = _gpu_tiles(page)
        coloured = page.evaluate("Array.from(document.querySelectorAll('.gpu.busy')).every(t => t.style.background)")
        ticks = page.locator("#chart text.tick").all_text_contents()
        values = page.locator("#chart text").all_text_contents()
        summary = page.inner_text("#summary")
        where = page.evaluate("location.href")
        view.screenshot("dashboard")
    assert view.errors == []
    assert [row[1] for row in pending] == ["waiting", "to-cancel"]
    assert pending[0][:4] == [str(ids["waiting"]), "waiting", "nlp", "4"]
    assert pending[0][6] == (reason or "no reason given yet"), "the reason as the API gives it"
    assert "of 4 GPUs allocated" in summary
    assert sum(t["text"].count(f"job {ids['dash-job']}") for t in tiles) == 2, "the 2-GPU job on two tiles"
    shared = [t for t in tiles if f"job {ids['share-a']}" in t["text"]]
    assert len(shared) == 1 and f"job {ids['share-b']}" in shared[0]["text"] and "50%" in shared[0]["text"]
    assert all(t["fits"] for t in tiles), tiles
    assert coloured, "tiles coloured through the CSSOM, which the CSP allows"
    assert len(ticks) >= 2 and all(re.fullmatch(r"\d\d:\d\d(:\d\d)?( [AP]M)?", t) for t in ticks), ticks
    assert "0%" in values and "100%" in values, "the allocation axis"
    first_x, last_x, left_x, right_x = line_x
    assert first_x - left_x < 0.1 * (right_x - left_x) < last_x - first_x, \
        f"the data starts at the left axis, not squeezed to the right edge: {line_x}"
    assert "token=" not in where, "the token leaves the address bar"
    outside = [url for url in view.requested if not url.startswith((server.url, "data:", "blob:"))]
    assert outside == []


def test_a_job_opens_on_its_own_page_with_runs_log_and_cancel(busy_server: tuple[Server, dict[str, int]],
                                                              tmp_path: Path) -> None:
    server, ids = busy_server
    running, doomed = ids["dash-job"], ids["to-cancel"]
    with browsing(tmp_path) as view:
        page = view.page
        strict_csp(page, server)
        page.goto(f"{server.url}/#token={server.admin_token}")
        page.click(f"#running a[href='#job={running}']")
        page.wait_for_selector("#jobview:not([hidden])")
        wait_until(page, "document.getElementById('joblog').textContent.includes('hello-from-dash')")
        title = page.inner_text("#jobtitle")
        runs = page.locator("#jobruns tbody tr").count()
        cancel_shown = page.is_visible("#cancel")
        view.screenshot("dashboard-job")
        page.fill("#jobid", str(doomed))
        page.click("#openjob button")
        wait_until(page, f"document.getElementById('jobtitle').textContent.startsWith('Job {doomed}:')")
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("#cancel")
        wait_until(page, "document.getElementById('jobtitle').textContent.includes('(cancelled)')")
        cancel_after = page.is_visible("#cancel")
        page.fill("#jobid", "999999")
        page.click("#openjob button")
        wait_until(page, "document.getElementById('jobtitle').textContent.includes('not found')")
    assert [e for e in view.errors if "404" not in e] == [], "nothing but the unknown job's own answer"
    assert title == f"Job {running}: dash-job (running)" and runs == 1 and cancel_shown
    assert not cancel_after, "no cancel button once the job is over"
    with server.client() as client:
        assert client.get(f"/v1/jobs/{doomed}").json()["state"] == "cancelled"


def test_without_a_token_or_with_a_wrong_one_it_says_how_to_give_one(busy_server: tuple[Server, dict[str, int]],
                                                                     tmp_path: Path) -> None:
    server, _ = busy_server
    assert httpx.get(f"{server.url}/").status_code == 200
    with browsing(tmp_path) as view:
        page = view.page
        page.goto(f"{server.url}/")
        page.wait_for_selector("#login:not([hidden])")
        missing = (page.inner_text("#loginhead"), page.inner_text("#summary"), page.inner_text("#login"))
        view.screenshot("dashboard-no-token")
        page.fill("#token", "not-a-token")
        page.click("#tokenform button")
        wait_until(page, "document.getElementById('loginhead').textContent.includes('refused')")
        refused = page.inner_text("#summary")
        main_hidden = page.evaluate("document.getElementById('main').hidden")
    assert missing[:2] == ("A token is needed", "no token")
    assert "admin.token" in missing[2] and f"{server.url}/#token=TOKEN" in missing[2]
    assert refused == "token refused" and main_hidden
    assert all("401" in e for e in view.errors), "only the refused request itself"


def test_the_api_docs_render_offline_without_console_errors(busy_server: tuple[Server, dict[str, int]],
                                                            tmp_path: Path) -> None:
    """Swagger UI at /docs lists the API's operations, every request of the page goes to this server, and the
    console shows no error."""
    server, _ = busy_server
    with browsing(tmp_path) as view:
        view.page.goto(f"{server.url}/docs")
        view.page.wait_for_selector(".opblock", timeout=30_000)
        shown = view.page.locator(".opblock").count()
    assert view.errors == []
    assert shown >= 10, "the operations of the API are listed"
    outside = [url for url in view.requested if not url.startswith((server.url, "data:", "blob:"))]
    assert outside == []
