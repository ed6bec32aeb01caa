"""The HTML report tells the story: a verdict against a baseline with ties said as ties and the spread over seeds,
small multiples in windows sized to the run, a sortable node table with the heat map on demand; every figure has
labelled axes with tick labels; the page renders in headless Chromium (nine policies) with no console error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pytest

from builders import nodes
from chromium import browsing
from trimtab.cli.sim import DEMO_POLICIES
from trimtab.report import figures, write_report
from trimtab.report.table import best_per_column, same
from trimtab.report.timeline import node_use, report_window_s, run_span, timeline
from trimtab.report.verdict import finding_text, verdict
from trimtab.sim.compare import compare
from trimtab.sim.run import SimConfig
from trimtab.sim.workload import synthetic

POLICIES = DEMO_POLICIES.split(",")


def _run(jobs: list[dict[str, Any]], summary: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"summary": summary or {}, "series": {}, "jobs": jobs}


def _job(jid: str, submit: float, end: float | None, runs: list[tuple[float, float, str, str]], gpus: int = 1,
         state: str = "completed") -> dict[str, Any]:
    return {"id": jid, "tenant": "t", "gpus": gpus, "tasks": gpus, "submit": submit, "end": end, "state": state,
            "runs": [{"start": a, "end": b, "nodes": [node], "node_tasks": [gpus], "outcome": outcome,
                      "useful_s": b - a if outcome == "completed" else 0.0, "progress_from": a, "slowdown": 1.0}
                     for a, b, node, outcome in runs]}


# a ten-minute run: A holds 2 GPUs on n0 for 300 s; B waits, is evicted from n1 at 500 s, waits 20 s, completes
SHORT = _run([_job("A", 0.0, 300.0, [(0.0, 300.0, "n0", "completed")], gpus=2),
              _job("B", 0.0, 600.0, [(300.0, 500.0, "n1", "preempted"), (520.0, 600.0, "n0", "completed")])])


def test_differences_within_half_a_percent_are_ties_and_a_tie_of_all_bolds_none() -> None:
    assert same(100.0, 100.4) and not same(100.0, 101.0) and same(0.0, 0.0)
    best = best_per_column({"a": {"avg_jct_s": 1000.0, "gpu_util": 0.5000001},
                            "b": {"avg_jct_s": 1003.0, "gpu_util": 0.5},
                            "c": {"avg_jct_s": 1200.0, "gpu_util": 0.5}})
    assert best["avg_jct_s"] == {"a", "b"}, "1000 and 1003 are the same within 0.5%"
    assert best["gpu_util"] == set(), "a 1e-7 difference bolds nobody"


def _runs(summaries: dict[str, list[dict[str, float]]]) -> dict[str, list[dict[str, Any]]]:
    """Run records holding only these summaries (one per seed)."""
    return {name: [{"summary": summary} for summary in seeds] for name, seeds in summaries.items()}


def test_the_verdict_names_the_best_by_how_much_against_the_baseline_with_the_spread_over_seeds() -> None:
    groups = {"fifo": [{"avg_jct_s": 200.0}, {"avg_jct_s": 220.0}],
              "sjf": [{"avg_jct_s": 100.0}, {"avg_jct_s": 140.0}],
              "las": [{"avg_jct_s": 150.0}, {"avg_jct_s": 150.0}]}
    jct = next(f for f in verdict(_runs(groups), "fifo") if f.column.key == "avg_jct_s")
    assert jct.best == ("sjf",) and jct.change == pytest.approx(120 / 210 - 1)
    assert (jct.seeds_better, jct.seeds_paired) == (2, 2)
    text = finding_text(jct, "fifo")
    assert text == ("average job completion time: sjf, 120 s (100 to 140 s over 2 seeds), 42.9% lower than fifo "
                    "(210 s); better in 2 of 2 seeds")
    against_las = next(f for f in verdict(_runs(groups), "las") if f.column.key == "avg_jct_s")
    assert "lower than las" in finding_text(against_las, "las")
    with pytest.raises(ValueError, match=r"--baseline drf: no such policy.*fifo, sjf, las"):
        verdict(_runs(groups), "drf")


def test_a_tie_is_said_as_a_tie() -> None:
    groups = {"fifo": [{"avg_wait_s": 50.0}], "sjf": [{"avg_wait_s": 40.0}], "las": [{"avg_wait_s": 40.1}]}
    wait = next(f for f in verdict(_runs(groups), "fifo") if f.column.key == "avg_wait_s")
    assert wait.best == ("sjf", "las")
    assert finding_text(wait, "fifo").startswith("average wait: sjf and las tie within 0.5%, 40 s, 20.0% lower")
    alike = {"fifo": [{"avg_wait_s": 50.0}], "sjf": [{"avg_wait_s": 50.0}]}
    assert "all policies the same within 0.5%" in finding_text(verdict(_runs(alike), "fifo")[3], "fifo")


def test_windows_are_sized_to_the_run() -> None:
    assert report_window_s(600.0) == 30.0, "a ten-minute run gets 30 s windows, not one flat hour"
    assert report_window_s(5 * 86400) == 10800.0
    assert run_span(SHORT) == (0.0, 600.0)
    line = timeline(SHORT, 30.0, 600.0)
    assert line.edges.size - 1 == 20 and line.completions.sum() == 2
    window_s = np.diff(line.edges)
    assert float((line.gpus_allocated * window_s).sum()) == pytest.approx(2 * 300 + 200 + 80)
    assert float((line.queue_len * window_s).sum()) == pytest.approx(300 + 20), "B waits 300 s, then 20 s"
    assert float(line.goodput_gpu_h.sum()) == pytest.approx((600 + 80) / 3600), "the evicted run kept nothing"


def test_the_node_summary_counts_use_and_evictions() -> None:
    used = {u.node: u for u in node_use(SHORT, np.array([0.0, 300.0, 600.0]))}
    assert used["n0"].peak_gpus == 2 and used["n0"].busy_fraction == pytest.approx(380 / 600)
    assert used["n0"].mean_gpus == pytest.approx((600 + 80) / 600)
    assert used["n1"].evictions == 1 and used["n1"].runs == 1 and used["n0"].runs == 2
    assert list(used["n0"].per_window) == pytest.approx([2.0, 80 / 300])


Report = tuple[Path, dict[str, list[dict[str, Any]]], dict[str, list[str]]]


@pytest.fixture(scope="module")
def nine(tmp_path_factory: pytest.TempPathFactory) -> Report:
    """The nine built-in policies on the demo's generator, scaled to a 16-GPU cluster so that they differ; with
    what is missing from each figure's axes as it is saved (no tick labels, no axis label)."""
    jobs = synthetic(jobs=300, seed=1, load=0.9, cluster_gpus=16)
    runs = compare(nodes(2, gpus=8, racks=2), jobs, POLICIES, SimConfig(seed=1, timing=False), workers=2)
    groups = {name: [run] for name, run in runs.items()}
    missing: dict[str, list[str]] = {}
    save = figures._save

    def inspect(fig: plt.Figure, path: Path) -> Path:
        fig.canvas.draw()
        gaps = missing.setdefault(path.name, [])
        for k, ax in enumerate(fig.axes):
            if ax.get_visible() and ax.get_label() != "<colorbar>":
                gaps += [f"axes {k}: {which} tick labels" for which, labels in
                         (("x", ax.get_xticklabels()), ("y", ax.get_yticklabels()))
                         if not any(t.get_text() for t in labels)]
        gaps += [f"{which} axis label" for which in ("x", "y")
                 if not any(getattr(ax, f"get_{which}label")() for ax in fig.axes)]
        return save(fig, path)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(figures, "_save", inspect)
        index = write_report(groups, tmp_path_factory.mktemp("report"), subtitle="demo generator, 300 jobs")
    return index, groups, missing


def test_the_page_holds_verdict_table_small_multiples_and_nodes(nine: Report) -> None:
    index, groups, _ = nine
    page = index.read_text()
    assert page.index('id="verdict"') < page.index('id="summary"'), "the verdict comes first"
    assert "Baseline: fifo" in page and "lower than fifo" in page
    assert page.count('<tr><td class="name">') == 9
    for png in ("completions", "goodput_gpu_h", "gpus_allocated", "queue_len", "cdfs", "nodes"):
        assert (index.parent / f"{png}.png").stat().st_size > 5_000
    assert "<details><summary>Heat map" in page
    assert page.count('<tr data-policy="') == sum(len(node_use(g[0], np.array([0.0, 1.0]))) for g in groups.values())
    assert "Windows of 3 h sized to the run" in page and "--window-s" in page


def test_every_figure_has_labelled_axes_with_tick_labels(nine: Report) -> None:
    missing = nine[2]
    assert sorted(missing) == sorted(["completions.png", "goodput_gpu_h.png", "gpus_allocated.png", "queue_len.png",
                                      "cdfs.png", "tenants.png", "nodes.png"])
    assert {name: gaps for name, gaps in missing.items() if gaps} == {}


def test_the_report_of_nine_policies_renders_in_chromium(nine: Report, tmp_path: Path) -> None:
    index = nine[0]
    with browsing(tmp_path) as view:
        view.page.goto(index.as_uri())
        view.page.wait_for_load_state("load")
        images = view.page.evaluate("Array.from(document.images).map(i => [i.complete, i.naturalWidth])")
        verdict_items = view.page.locator("#verdict li").count()
        view.screenshot("report")
        view.page.select_option("#nodepolicy", "las")
        shown = view.page.evaluate("Array.from(document.querySelectorAll('#nodes tbody tr'))"
                                   ".filter(r => !r.hidden).map(r => r.dataset.policy)")
        view.page.click("#nodes th:nth-child(7)")  # evictions
        view.page.click("#nodes th:nth-child(7)")
        evictions = view.page.evaluate("Array.from(document.querySelectorAll('#nodes tbody tr'))"
                                       ".filter(r => !r.hidden).map(r => Number(r.cells[6].textContent))")
        view.page.click("details summary")
        view.screenshot("report-nodes")
        opened = view.page.evaluate("document.querySelector('details').open")
    assert view.errors == []
    assert len(images) >= 6 and all(done and width > 0 for done, width in images)
    assert verdict_items == 8
    assert shown and set(shown) == {"las"}
    assert evictions == sorted(evictions, reverse=True), "sorted by evictions, most first"
    assert opened


@pytest.mark.slow
def test_a_philly_slice_or_else_the_whole_demo_renders_in_chromium(tmp_path: Path) -> None:
    """The first 3,000 jobs of the Philly-derived list on 7r8x8 with failures, when the traces are present (else
    the demo's 3,000 jobs on 2r8x8): nine policies, one page, no console error; a screenshot for the eye."""
    from builders import TRACES
    from trimtab.formats.cluster import load_cluster
    from trimtab.formats.traces import load_trace

    philly = TRACES / "pollux-adaptdl" / "simulator" / "traces" / "philly.csv"
    if philly.exists():
        name, cluster, config = "philly", load_cluster("7r8x8"), SimConfig(
            seed=1, timing=False, faults="node-mtbf=7d,node-mttr=2h,job-fail=0.02,seed=1")
        jobs = sorted(load_trace(str(philly)), key=lambda j: j.submit_s)[:3000]
    else:
        name, cluster, config = "demo", load_cluster("2r8x8"), SimConfig(seed=1, timing=False)
        jobs = synthetic(jobs=3000, seed=1, load=0.9, cluster_gpus=128)
    runs = compare(cluster, jobs, POLICIES, config, workers=2)
    index = write_report({p: [run] for p, run in runs.items()}, tmp_path / "report", subtitle=f"{name} slice")
    with browsing(tmp_path) as view:
        view.page.goto(index.as_uri())
        view.page.wait_for_load_state("load")
        view.screenshot(f"report-{name}")
        items = view.page.locator("#verdict li").count()
    assert view.errors == [] and items == 8
