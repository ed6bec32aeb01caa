"""The web dashboard at `/`: one page of the server's own (no CDN, no external file), its script and style served
beside it (`/dashboard.js`, `/dashboard.css`, `/favicon.svg`, from the package's `dashboard_files/`), so a strict
Content-Security-Policy (`default-src 'self'`) holds: no inline script, style attribute or handler.

The page reads the JSON API every 3 s: queues, pending jobs with their reasons, running jobs, the GPU map, and
completions and allocation over time (a chart with axes and time labels, its window fitted to the data the store
holds, at most 6 hours); `#job=ID` opens one job (details, runs, the end of its log, cancel while it is not
over). The token comes from the URL fragment (`/#token=...`, never sent to the server in a URL) or a form and is
kept in the browser's localStorage; without one, or with one the server refuses, the page says how to get one."""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import Response

# route | file | media type
_ASSETS = {
    "/": ("dashboard.html", "text/html; charset=utf-8"),
    "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
    "/dashboard.css": ("dashboard.css", "text/css; charset=utf-8"),
    "/favicon.svg": ("favicon.svg", "image/svg+xml"),
}


def asset_text(name: str) -> str:
    """The text of one of the dashboard's files (tests read them too)."""
    return (files("trimtab.serve") / "dashboard_files" / name).read_text(encoding="utf-8")


def dashboard_router() -> APIRouter:
    """The routes of the page and its files, read once; `serve/api.py` includes them (no token: the page holds no
    data, it asks the API with the browser's token)."""
    router = APIRouter(include_in_schema=False)
    for path, (name, media_type) in _ASSETS.items():
        body = asset_text(name)

        def serve(body: str = body, media_type: str = media_type) -> Response:
            return Response(body, media_type=media_type)

        router.add_api_route(path, serve, methods=["GET"])
    return router
