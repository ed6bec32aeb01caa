"""The HTML report: one self-contained page (figures embedded as data URIs, PNGs also written beside it) with the
summary table, best value per column marked."""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trimtab.report import figures
from trimtab.report.table import COLUMNS, best_per_column

_CSS = """
body{font-family:system-ui,sans-serif;margin:2rem;max-width:1100px;color:#222}
table{border-collapse:collapse;font-size:.9rem}th,td{padding:.3rem .6rem;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child{text-align:left}td.best{font-weight:700;background:#e4f4e4}
img{max-width:100%;margin:1rem 0}p.meta{color:#666;font-size:.85rem}
"""


def write_report(runs: Mapping[str, Mapping[str, Any]], out_dir: str | Path, title: str = "trimtab report",
                 subtitle: str = "") -> Path:
    """Write `out_dir/index.html` and the PNG figures for the run records in `runs` (by policy name); returns the
    page's path. The page is self-contained: the figures are embedded, and also written beside it as PNGs."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summaries = {name: run["summary"] for name, run in runs.items()}
    best = best_per_column(summaries)
    head = "".join(f"<th>{html.escape(c.label)}</th>" for c in COLUMNS)
    rows = []
    for name, s in summaries.items():
        cells = "".join(
            f'<td class="{"best" if name in best[c.key] else ""}">{html.escape(c.format(s.get(c.key)))}</td>'
            for c in COLUMNS
        )
        rows.append(f"<tr><td>{html.escape(name)}</td>{cells}</tr>")
    made = [
        ("Throughput over time: completions and goodput per window, evictions and failures, queue length",
         figures.throughput_over_time(runs, out / "throughput.png")),
        ("GPU allocation over time", figures.allocation_over_time(runs, out / "allocation.png")),
        ("GPUs allocated per node over time", figures.node_heatmaps(runs, out / "nodes.png")),
        ("Job completion time and wait, CDFs", figures.cdfs(runs, out / "cdfs.png")),
        ("Share of GPU-time per tenant", figures.tenant_shares(runs, out / "tenants.png")),
    ]
    imgs = "".join(
        f"<h2>{html.escape(caption)}</h2><img alt=\"{html.escape(caption)}\" src=\"data:image/png;base64,"
        f"{base64.b64encode(path.read_bytes()).decode()}\">"
        for caption, path in made
        if path is not None
    )
    page = (
        f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
        f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<p class=\"meta\">{html.escape(subtitle)}</p>"
        f"<h2>Summary</h2><table><thead><tr><th>policy</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        f"<p class=\"meta\">Best value of each column in bold. Metric definitions: docs/metrics.md.</p>"
        f"{imgs}</body></html>"
    )
    index = out / "index.html"
    index.write_text(page)
    return index
