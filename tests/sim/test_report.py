"""The HTML report: the best value of each column is marked, and the page renders in headless Chromium with every
image loaded and no console error."""

import shutil

import pytest

from builders import nodes
from trimtab.report import best_per_column, write_report
from trimtab.sim.compare import compare
from trimtab.sim.run import SimConfig
from trimtab.sim.workload import synthetic

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    jobs = synthetic(jobs=300, seed=4, load=1.3, cluster_gpus=16, tenants=3)
    runs = compare(nodes(2, gpus=8, racks=2), jobs, ["fifo", "las", "sjf"], SimConfig(window_s=1800.0), workers=1)
    return write_report(runs, out), runs


def test_best_values_are_marked_per_column():
    summaries = {"a": {"avg_jct_s": 10.0, "gpu_util": 0.5}, "b": {"avg_jct_s": 5.0, "gpu_util": 0.5},
                 "c": {"avg_jct_s": None, "gpu_util": 0.7}}
    best = best_per_column(summaries)
    assert best["avg_jct_s"] == {"b"} and best["gpu_util"] == {"c"}
    assert best["preemptions"] == set()


def test_page_holds_the_table_and_every_figure(report):
    index, runs = report
    page = index.read_text()
    assert page.count("<tr>") == 1 + len(runs)
    assert 'class="best"' in page
    for png in ("throughput.png", "allocation.png", "nodes.png", "cdfs.png", "tenants.png"):
        assert (index.parent / png).stat().st_size > 5_000
    assert page.count("data:image/png;base64,") == 5


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
def test_page_renders_in_headless_chromium_without_errors(report):
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright (Python) is not installed")
    index, runs = report
    errors: list[str] = []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        page = browser.new_page()
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(index.as_uri())
        page.wait_for_load_state("load")
        images = page.evaluate("Array.from(document.images).map(i => [i.complete, i.naturalWidth])")
        rows = page.evaluate("document.querySelectorAll('tbody tr').length")
        browser.close()
    assert errors == []
    assert len(images) == 5 and all(done and width > 0 for done, width in images)
    assert rows == len(runs)
