"""The HTML report: one self-contained page (figures embedded as data URIs, PNGs also written beside it). From the
top: the verdict against a baseline policy, the summary table (best values marked, ties all marked, sortable), small
multiples over time in windows sized to the run, the CDFs and tenant shares, and the per-node table with its heat
map on demand."""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trimtab.report import figures
from trimtab.report.losses import lost_over_time
from trimtab.report.table import COLUMNS, TIE_RTOL, best_per_column, mean_summary
from trimtab.report.timeline import (
    WINDOWS_PER_RUN,
    NodeUse,
    common_span_s,
    format_window,
    node_use,
    report_window_s,
    timeline,
)
from trimtab.report.verdict import default_baseline, finding_text, leaders, verdict

Run = Mapping[str, Any]

_CSS = """
body{font-family:system-ui,sans-serif;margin:2rem;max-width:1150px;color:#222}
table{border-collapse:collapse;font-size:.9rem}th,td{padding:.3rem .6rem;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child,td.name{text-align:left}td.best{font-weight:700;background:#e4f4e4}
table.sortable th{cursor:pointer;user-select:none}table.sortable th:hover{background:#f0f0f0}
th[data-dir=asc]::after{content:" \\25B2"}th[data-dir=desc]::after{content:" \\25BC"}
img{max-width:100%;margin:.5rem 0}p.meta{color:#555;font-size:.85rem}
#verdict{background:#f4f7fb;border-left:4px solid #3b7dd8;padding:.6rem 1rem}#verdict li{margin:.2rem 0}
details summary{cursor:pointer;margin:.6rem 0}.scroll{max-height:32rem;overflow:auto}
"""

_JS = """
"use strict";
function sortBy(table, col, th) {
  const up = th.dataset.dir !== "asc";
  table.querySelectorAll("th").forEach(h => delete h.dataset.dir);
  th.dataset.dir = up ? "asc" : "desc";
  const key = r => { const c = r.cells[col]; return c.dataset.v !== undefined ? c.dataset.v : c.textContent; };
  const rows = Array.from(table.tBodies[0].rows);
  rows.sort((a, b) => {
    const x = key(a), y = key(b), nx = parseFloat(x), ny = parseFloat(y);
    const c = isNaN(nx) || isNaN(ny) ? x.localeCompare(y) : nx - ny;
    return up ? c : -c;
  });
  rows.forEach(r => table.tBodies[0].appendChild(r));
}
document.querySelectorAll("table.sortable").forEach(t =>
  t.querySelectorAll("th").forEach((th, i) => th.addEventListener("click", () => sortBy(t, i, th))));
const pick = document.getElementById("nodepolicy");
if (pick) {
  pick.addEventListener("change", () => document.querySelectorAll("#nodes tbody tr").forEach(r => {
    r.hidden = pick.value !== "" && r.dataset.policy !== pick.value; }));
}
"""


def write_report(runs: Mapping[str, Sequence[Run]], out_dir: str | Path, title: str = "trimtab report",
                 subtitle: str = "", baseline: str | None = None, window_s: float | None = None) -> Path:
    """Write `out_dir/index.html` and its PNG figures for the run records in `runs` (by policy name, one record
    per seed; the figures draw each policy's first); returns the page's path. `baseline` (default: fifo if it
    ran, else the first policy) is what the verdict measures against; `window_s` (default: sized to the run, at
    most `WINDOWS_PER_RUN` windows) is the width of the windows over time. A `baseline` not in `runs` is a
    ValueError naming the policies."""
    if not runs or any(not seeds for seeds in runs.values()):
        raise ValueError("a report needs at least one run of each policy")
    baseline = baseline or default_baseline(list(runs))
    findings = verdict(runs, baseline)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    first = {name: seeds[0] for name, seeds in runs.items()}
    span_s = common_span_s(list(first.values()))
    auto = window_s is None
    window_s = window_s or report_window_s(span_s)
    if window_s <= 0:
        raise ValueError(f"--window-s {window_s:g}: a window must be longer than 0 s")
    lines = {name: timeline(run, window_s, span_s) for name, run in first.items()}
    used = {name: node_use(run, lines[name].edges) for name, run in first.items()}
    window, axis = format_window(window_s), figures.Axis(span_s)
    made = [(caption.format(w=window), figures.small_multiples(first, lines, field, axis, window, out / f"{field}.png"))
            for field, caption in _TIME_FIGURES.items()]
    made += [("Job completion time and wait, CDFs", figures.cdfs(first, out / "cdfs.png")),
             ("Share of GPU-time per tenant", figures.tenant_shares(first, out / "tenants.png")),
             ("Where the GPU-hours go: useful, and lost by cause, per window (docs/metrics.md)",
              lost_over_time(first, out / "losses.png"))]
    heat = figures.node_heatmaps(used, lines, axis, out / "nodes.png")
    seeds = max(len(s) for s in runs.values())
    sized = f"sized to the run (at most {WINDOWS_PER_RUN} per run)" if auto else "as asked"
    windows_note = f"Windows of {window} {sized}; set another width with --window-s SECONDS."
    body = "".join([
        f"<h1>{html.escape(title)}</h1><p class=\"meta\">{html.escape(subtitle)}</p>",
        _verdict_html(findings, baseline, seeds),
        _summary_html(runs),
        f"<p class=\"meta\">{html.escape(windows_note)}</p>",
        "<h2>Figures</h2>" + "".join(_figure(caption, path) for caption, path in made if path is not None),
        _nodes_html(used, baseline, heat),
    ])
    page = (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body>{body}<script>{_JS}</script></body></html>")
    index = out / "index.html"
    index.write_text(page)
    return index


# Timeline field | caption of its small multiples
_TIME_FIGURES = {
    "completions": "Jobs completed per {w}, one panel per policy (evictions and failures marked along the bottom)",
    "goodput_gpu_h": "Goodput per {w}: GPU-hours of progress kept",
    "gpus_allocated": "GPUs allocated, mean per {w}",
    "queue_len": "Jobs waiting, mean per {w}",
}


def _figure(caption: str, path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return (f"<h3>{html.escape(caption)}</h3>"
            f"<img alt=\"{html.escape(caption)}\" src=\"data:image/png;base64,{data}\">")


def _verdict_html(findings: list[Any], baseline: str, seeds: int) -> str:
    top, wins = leaders(findings)
    if top:
        lead = (f"<b>{html.escape(' and '.join(top))}</b> {'is' if len(top) == 1 else 'are'} best (or tied best) "
                f"on {wins} of {len(findings)} headline metrics.")
    else:
        lead = "No policy stands out: every headline metric is the same for all within the tie tolerance."
    items = []
    for f in findings:
        label, _, rest = finding_text(f, baseline).partition(": ")
        items.append(f"<li><b>{html.escape(label)}</b>: {html.escape(rest)}</li>")
    seeds_note = f" Each value is the mean over {seeds} seeds, with its range." if seeds > 1 else ""
    return (f"<section id=\"verdict\"><h2>Verdict</h2><p class=\"lead\">{lead}</p><ul>{''.join(items)}</ul>"
            f"<p class=\"meta\">Baseline: {html.escape(baseline)} (choose another with --baseline POLICY). Values "
            f"within {TIE_RTOL:.1%} of each other count as the same and are said as ties.{seeds_note}</p></section>")


def _summary_html(runs: Mapping[str, Sequence[Run]]) -> str:
    summaries = {name: mean_summary([r["summary"] for r in seeds]) for name, seeds in runs.items()}
    best = best_per_column(summaries)
    head = "".join(f"<th>{html.escape(c.label)}</th>" for c in COLUMNS)
    rows = []
    for name, s in summaries.items():
        cells = "".join(
            f'<td class="{"best" if name in best[c.key] else ""}" data-v="{_number(s.get(c.key))}">'
            f"{html.escape(c.format(s.get(c.key)))}</td>" for c in COLUMNS)
        rows.append(f"<tr><td class=\"name\">{html.escape(name)}</td>{cells}</tr>")
    return (f"<h2>Summary</h2><table class=\"sortable\" id=\"summary\"><thead><tr><th>policy</th>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table><p class=\"meta\">The best value of each column is highlighted; "
            f"values within {TIE_RTOL:.1%} of it too, and none where all are the same. Click a header to sort. "
            f"Metric definitions: docs/metrics.md.</p>")


def _number(value: Any) -> str:
    return "" if value is None else f"{value:.6g}"


def _nodes_html(used: Mapping[str, Sequence[NodeUse]], baseline: str, heat: Path) -> str:
    options = "".join(f"<option value=\"{html.escape(name)}\"{' selected' if name == baseline else ''}>"
                      f"{html.escape(name)}</option>" for name in used)
    rows = []
    for name, nodes in used.items():
        for u in nodes:
            rows.append(
                f"<tr data-policy=\"{html.escape(name)}\"{'' if name == baseline else ' hidden'}>"
                f"<td class=\"name\">{html.escape(name)}</td><td class=\"name\">{html.escape(u.node)}</td>"
                f"<td>{u.mean_gpus:.2f}</td><td>{u.peak_gpus:g}</td><td data-v=\"{u.busy_fraction:.4f}\">"
                f"{u.busy_fraction:.0%}</td><td>{u.runs}</td><td>{u.evictions}</td><td>{u.node_failures}</td>"
                f"<td>{u.job_failures}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("policy", "node", "mean GPUs allocated", "peak GPUs allocated",
                                            "busy (any GPU held)", "runs started", "evictions", "node failures",
                                            "job failures"))
    data = base64.b64encode(heat.read_bytes()).decode()
    return (f"<h2>Nodes</h2><p>Policy: <select id=\"nodepolicy\"><option value=\"\">all</option>{options}</select>"
            f" <span class=\"meta\">Click a header to sort (e.g. by evictions).</span></p>"
            f"<div class=\"scroll\"><table class=\"sortable\" id=\"nodes\"><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>"
            f"<details><summary>Heat map: GPUs allocated on each node over time, per policy</summary>"
            f"<img alt=\"GPUs allocated per node over time\" src=\"data:image/png;base64,{data}\"></details>")
