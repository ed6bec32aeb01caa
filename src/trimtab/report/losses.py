"""Where the GPU-hours go, drawn and written down: the stacked figure of useful and lost GPU-hours by cause over
time (from a run's `series`), and the record of an advise session in Markdown and self-contained HTML."""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from trimtab.losses import CAUSES

Runs = Mapping[str, Mapping[str, Any]]
_COLOURS = {"useful": "#9bc49b", "fragmentation": "#d95f02", "blocking": "#7570b3", "quota": "#e7298a",
            "preemption": "#e6ab02", "failure": "#a6761d", "slowdown": "#1b9e77", "load": "#bbbbbb"}


def lost_over_time(runs: Runs, path: Path) -> Path | None:
    """One panel per run: useful GPU-hours and GPU-hours lost by cause per window, stacked (load, demand over the
    cluster, drawn apart above, hatched: it is no GPU-time of the cluster). None if no run has the series."""
    runs = {name: run for name, run in runs.items() if "lost_gpu_s" in run["series"]}
    if not runs:
        return None
    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 2.6 * len(runs) + 0.6), sharex=True, squeeze=False)
    for ax, (name, run) in zip(axes[:, 0], runs.items(), strict=True):
        s = run["series"]
        hours = [i * s["window_s"] / 3600.0 for i in range(len(s["useful_gpu_s"]))]
        parts = ["useful", *(c for c in CAUSES if c != "load")]
        values = [s["useful_gpu_s"], *(s["lost_gpu_s"][c] for c in parts[1:])]
        ax.stackplot(hours, [[v / 3600.0 for v in vs] for vs in values], step="post", labels=parts,
                     colors=[_COLOURS[p] for p in parts], linewidth=0)
        ax.step(hours, [v / 3600.0 for v in s["lost_gpu_s"]["load"]], where="post", color="#555555",
                linewidth=0.8, linestyle="--", label="load (demand over the cluster)")
        ax.set_ylabel(f"GPU-h / {s['window_s'] / 3600.0:g} h")
        ax.set_title(name, fontsize=9, loc="left")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper right", fontsize=7, ncols=4)
    axes[-1, 0].set_xlabel("hours since first submission")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_record(document: Mapping[str, Any], steps: Sequence[str], baseline: Mapping[str, Any],
                 profile_yaml: str, out_dir: Path) -> tuple[Path, Path]:
    """Write `advise.md` and `advise.html` (with the figure of the baseline's losses, also as `losses.png`) to
    `out_dir`: the steps taken, the causes, every candidate's effect with its spread over seeds, the check on the
    held-out jobs and the recommended profile. Returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    figure = lost_over_time({f"baseline: {baseline.get('policy') or 'history'}": baseline}, out_dir / "losses.png")
    sections = _sections(document, steps, profile_yaml)
    markdown = "\n\n".join(_markdown(title, body) for title, body in sections)
    if figure is not None:
        markdown += "\n\n![GPU-hours by cause over time](losses.png)\n"
    md_path = out_dir / "advise.md"
    md_path.write_text(markdown)
    img = "" if figure is None else (f'<img alt="GPU-hours by cause" src="data:image/png;base64,'
                                     f'{base64.b64encode(figure.read_bytes()).decode()}">')
    page = ("<!doctype html><html><head><meta charset=\"utf-8\"><title>trimtab advise</title><style>"
            "body{font-family:system-ui,sans-serif;margin:2rem;max-width:1100px;color:#222}table{border-collapse:"
            "collapse;font-size:.9rem}th,td{padding:.3rem .6rem;border-bottom:1px solid #ddd;text-align:right}"
            "th:first-child,td:first-child{text-align:left}img{max-width:100%}pre{background:#f4f4f4;padding:1rem}"
            "</style></head><body>" + "".join(_html(title, body) for title, body in sections) + img + "</body></html>")
    html_path = out_dir / "advise.html"
    html_path.write_text(page)
    return md_path, html_path


Body = list[str] | list[list[str]] | str  # lines of a list, rows of a table (first: the header), or code


def _sections(document: Mapping[str, Any], steps: Sequence[str], profile_yaml: str) -> list[tuple[str, Body]]:
    rec = document["recommended"]
    causes: list[list[str]] = [["cause", "GPU-hours lost", "the scheduler's doing"]] + [
        [c["cause"], f"{c['gpu_hours']:,.1f}", "yes" if c["scheduler"] else "no (demand over the cluster)"]
        for c in document["causes"]]
    candidates: list[list[str]] = [["candidate", "answers", "score", "its cause's GPU-h", "lost GPU-h",
                                    "avg JCT s"]]
    for c in document["candidates"]:
        g = c["gain"]
        candidates.append([c["profile"], c["cause"], f"{c['score']:.3f}", _change(g.get(f"lost.{c['cause']}")),
                           _change(g.get("lost_gpu_hours_scheduler")), _change(g.get("avg_jct_s"))])
    sections: list[tuple[str, Body]] = [("trimtab advise", list(steps)), ("Where the GPU-hours went", causes),
                                        ("Candidates, on the tuning part (mean over seeds, change ± spread)",
                                         candidates)]
    if rec["held_out"]:
        held: list[list[str]] = [["metric", "current", "recommended", "change ± spread"]] + [
            [metric, f"{v['base']:,.4g}", f"{v['candidate']:,.4g}", f"{v['change']:+.1%} ± {v['spread']:.1%}"]
            for metric, v in rec["held_out"]["gain"].items()]
        sections.append((f"Checked on the held-out jobs (score {rec['held_out']['score']})", held))
    sections.append((f"Recommended profile: {rec['profile']}", profile_yaml))
    return sections


def _change(g: Mapping[str, float] | None) -> str:
    return "-" if g is None else f"{g['base']:,.4g} → {g['candidate']:,.4g} ({g['change']:+.0%} ± {g['spread']:.0%})"


def _markdown(title: str, body: Body) -> str:
    if isinstance(body, str):
        return f"## {title}\n\n```yaml\n{body.rstrip()}\n```"
    if body and isinstance(body[0], list):
        rows = [f"| {' | '.join(row)} |" for row in body]  # type: ignore[arg-type]
        return "\n".join([f"## {title}", "", rows[0], "|" + "---|" * len(body[0]), *rows[1:]])
    return "\n".join([f"## {title}", "", *(f"- {line}" for line in body)])


def _html(title: str, body: Body) -> str:
    head = f"<h2>{html.escape(title)}</h2>"
    if isinstance(body, str):
        return f"{head}<pre>{html.escape(body)}</pre>"
    if body and isinstance(body[0], list):
        cells = ["".join(f"<{tag}>{html.escape(cell)}</{tag}>" for cell in row)
                 for tag, row in zip(["th"] + ["td"] * (len(body) - 1), body, strict=True)]
        return head + "<table>" + "".join(f"<tr>{row}</tr>" for row in cells) + "</table>"
    return head + "<ul>" + "".join(f"<li>{html.escape(str(line))}</li>" for line in body) + "</ul>"
