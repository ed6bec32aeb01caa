"""The web dashboard at `/`: one self-contained page (no CDN, no external file), put together at import from the
package's `dashboard_files/` (the page, its style and its script, each one block, so a Content-Security-Policy
can allow exactly them by hash; no inline handler, no style attribute, no eval).

The page reads the JSON API every 3 s: queues, pending jobs with their reasons, running jobs, the GPU map, and
completions and allocation over time (a chart with axes and time labels, its window fitted to the data the store
holds, at most 6 hours); `#job=ID` opens one job (details, runs, the end of its log, cancel while it is not
over). The token comes from the URL fragment (`/#token=...`, never sent to the server in a URL) or a form and is
kept in the browser's localStorage; without one, or with one the server refuses, the page says how to get one."""

from __future__ import annotations

from importlib.resources import files


def asset_text(name: str) -> str:
    """The text of one of the dashboard's files."""
    return (files("trimtab.serve.http") / "dashboard_files" / name).read_text(encoding="utf-8")


# str.replace, not str.format: the style and the script are full of braces
DASHBOARD_HTML = (asset_text("dashboard.html").replace("{style}", asset_text("dashboard.css").strip())
                  .replace("{script}", asset_text("dashboard.js").strip()))
