"""The HTTP API of `trimtab serve` (FastAPI; OpenAPI at /docs, served without a CDN): jobs, logs, nodes, queues,
tenants, tokens, /metrics and the dashboard at /.

Bearer tokens: the admin token sees and changes everything; a tenant token sees, submits and cancels only its
tenant's jobs, held to its quota. Errors are JSON `{"detail": message, "field": path}` with a precise 4xx."""

from __future__ import annotations

import json
import time
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from starlette.concurrency import run_in_threadpool
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from trimtab.serve.daemon import Daemon
from trimtab.serve.dashboard import DASHBOARD_HTML
from trimtab.serve.errors import ServeError
from trimtab.serve.metrics import ServeMetrics
from trimtab.serve.requests import Principal
from trimtab.serve.store import JobRow, RunRow, TenantRow, digest_of
from trimtab.serve.submission import JobSpec, SubmissionError, parse_body
from trimtab.serve.views import job_json, runs_by_job, stats

LOG_CHUNK_BYTES = 1 << 20
DOCS_ASSETS_URL = "/docs-assets"  # Swagger UI from the fastapi-offline wheel: /docs needs no CDN
JOB_STATES = ("pending", "running", "completed", "failed", "cancelled")


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tenant: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
    name: str = Field("", max_length=200)
    quota_gpus: int | None = Field(None, ge=0, le=1_000_000)


class QuotaRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    quota_gpus: int | None = Field(None, ge=0, le=1_000_000, description="None: no limit")


class BodyLimit:
    """Refuses request bodies over `max_bytes` with 413, whether or not the client sent a Content-Length."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            await _too_large(self.max_bytes, send)
            return
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                await _too_large(self.max_bytes, send)
                return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _too_large(max_bytes: int, send: Send) -> None:
    payload = json.dumps({"detail": f"request body larger than {max_bytes} bytes", "field": ""}).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})


def principal(request: Request) -> Principal:
    """Who the request's bearer token speaks for; 401 without a known token."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if not header:
        raise ServeError(401, "missing bearer token (Authorization: Bearer <token>)")
    if scheme.lower() != "bearer" or not token.strip():
        raise ServeError(401, "malformed Authorization header; expected 'Bearer <token>'")
    who = request.app.state.daemon.requests.principal(digest_of(token.strip()))
    if who is None:
        raise ServeError(401, "unknown token")
    return who


def admin(who: Annotated[Principal, Depends(principal)]) -> Principal:
    if not who.admin:
        raise ServeError(403, "this needs the admin token")
    return who


Who = Annotated[Principal, Depends(principal)]
Admin = Annotated[Principal, Depends(admin)]
JobId = Annotated[int, PathParam(ge=1, le=2**62)]


def create_app(daemon: Daemon, max_body_bytes: int = 1 << 20) -> FastAPI:
    """The API around a running (or about to run) daemon."""
    app = FastAPI(title="trimtab serve", version="1", description=__doc__, docs_url=None, redoc_url=None)
    metrics = ServeMetrics(daemon)
    app.state.daemon = daemon
    app.state.metrics = metrics
    _add_error_handlers(app)
    _add_submit(app, daemon)
    _add_job_routes(app, daemon)
    _add_log_route(app, daemon)
    _add_cluster_routes(app, daemon)
    _add_tenant_routes(app, daemon)
    _add_service_routes(app, daemon, metrics)
    _add_docs(app)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)  # type: ignore[arg-type]
    return app


def _add_error_handlers(app: FastAPI) -> None:
    """Every refusal as JSON `{"detail": message, "field": path}`."""

    @app.exception_handler(ServeError)
    async def _serve_error(_request: Request, exc: ServeError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse({"detail": exc.detail, "field": exc.field}, status_code=exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path"))
        return JSONResponse({"detail": str(err.get("msg", "invalid request")), "field": field}, status_code=422)


def _add_submit(app: FastAPI, daemon: Daemon) -> None:
    """POST /v1/jobs: a JSON job or a Kubernetes manifest, accepted by the daemon."""

    submit_body = {"requestBody": {"required": True, "content": {
        "application/json": {"schema": JobSpec.model_json_schema(ref_template="#/components/schemas/{model}")},
        "application/yaml": {"schema": {"type": "string", "description": "one workload manifest: a v1 Pod, a "
                                        "batch/v1 Job, a Volcano Job, or a PodGroup with its pods"}},
    }}}

    @app.post("/v1/jobs", status_code=201, openapi_extra=submit_body, tags=["jobs"],
              responses={200: {"description": "the job already accepted under this idempotency key"}})
    async def submit(request: Request, who: Who) -> JSONResponse:
        """Submit a job: a JSON job (see JobSpec) or a Kubernetes Pod / batch/v1 Job in YAML."""
        body = await request.body()
        content_type = request.headers.get("content-type", "application/json")
        data, created = await run_in_threadpool(accept, body, content_type, who)  # keep the event loop free
        return JSONResponse(data, status_code=201 if created else 200)

    def accept(body: bytes, content_type: str, who: Principal) -> tuple[dict[str, Any], bool]:
        try:
            spec = parse_body(body, content_type)
        except SubmissionError as exc:
            raise ServeError(exc.status, exc.message, exc.field) from None
        job_id, created = daemon.requests.submit(spec, who)
        with daemon.store.reader() as s:
            row = s.get(JobRow, job_id)
            assert row is not None
            return job_json(row, []), created


def _add_job_routes(app: FastAPI, daemon: Daemon) -> None:
    """Listing, reading and cancelling jobs."""

    @app.get("/v1/jobs", tags=["jobs"])
    def list_jobs(who: Who, state: Annotated[str | None, Query(pattern="^(pending|running|completed|failed|"
                                                                        "cancelled)$")] = None,
                  tenant: Annotated[str | None, Query(max_length=100)] = None,
                  limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
                  after_id: Annotated[int, Query(ge=0, le=2**62)] = 0) -> dict[str, Any]:
        """Jobs the token may see, oldest first, `limit` at a time after `after_id`."""
        query = select(JobRow).where(JobRow.id > after_id).order_by(JobRow.id).limit(limit)
        if state is not None:
            query = query.where(JobRow.state == state)
        if not who.admin:
            query = query.where(JobRow.tenant == who.tenant)
        elif tenant is not None:
            query = query.where(JobRow.tenant == tenant)
        with daemon.store.reader() as s:
            rows = s.scalars(query).all()
            runs = runs_by_job(s, [r.id for r in rows])
            return {"jobs": [job_json(r, runs[r.id]) for r in rows]}

    @app.get("/v1/jobs/{job_id}", tags=["jobs"])
    def get_job(job_id: JobId, who: Who) -> dict[str, Any]:
        """One job with every run of every attempt."""
        with daemon.store.reader() as s:
            row = _visible_job(s, job_id, who)
            return job_json(row, runs_by_job(s, [job_id])[job_id])

    @app.post("/v1/jobs/{job_id}/cancel", tags=["jobs"])
    def cancel_job(job_id: JobId, who: Who) -> dict[str, Any]:
        """Cancel a job. A pending job is cancelled at once; a running one once its tasks have exited
        (SIGTERM, then SIGKILL after the grace period)."""
        state = daemon.requests.cancel(job_id, who)
        return {"id": job_id, "state": state}

    @app.delete("/v1/jobs/{job_id}", tags=["jobs"])
    def delete_job(job_id: JobId, who: Who) -> dict[str, Any]:
        """The same as POST /v1/jobs/{job_id}/cancel."""
        return cancel_job(job_id, who)


def _add_log_route(app: FastAPI, daemon: Daemon) -> None:
    """A task's output, read from its log file in chunks."""

    @app.get("/v1/jobs/{job_id}/logs", tags=["jobs"], response_class=PlainTextResponse)
    def job_logs(job_id: JobId, who: Who, attempt: Annotated[int | None, Query(ge=1, le=1_000_000)] = None,
                 rank: Annotated[int, Query(ge=0, le=100_000)] = 0,
                 offset: Annotated[int, Query(ge=0, le=2**62)] = 0) -> Response:
        """A task's output (stdout and stderr) from byte `offset`, up to 1 MiB; the latest attempt unless
        `attempt` is given. Headers: X-Trimtab-Offset (where to read next), X-Trimtab-Attempt (the attempt read),
        X-Trimtab-Latest (the job's latest attempt: a follower moves on to it when a retry starts), X-Trimtab-Done
        (1 once the job is terminal and this attempt's output complete)."""
        with daemon.store.reader() as s:
            row = _visible_job(s, job_id, who)
            number = attempt or row.attempts
            run = s.scalar(select(RunRow).where(RunRow.job_id == job_id, RunRow.attempt == number,
                                                RunRow.rank == rank))
            terminal = row.state in ("completed", "failed", "cancelled")
        if run is None:
            if row.attempts == 0 and attempt is None:
                return PlainTextResponse("", headers={"X-Trimtab-Offset": str(offset), "X-Trimtab-Attempt": "0",
                                                      "X-Trimtab-Latest": "0",
                                                      "X-Trimtab-Done": "1" if terminal else "0"})
            raise ServeError(404, f"job {job_id} has no attempt {number} rank {rank}", "attempt")
        data = b""
        path = Path(run.log_path)
        if path.exists():
            with path.open("rb") as f:
                f.seek(offset)
                data = f.read(LOG_CHUNK_BYTES)
        done = terminal and run.state == "exited" and len(data) < LOG_CHUNK_BYTES and number == row.attempts
        return Response(data, media_type="text/plain; charset=utf-8",
                        headers={"X-Trimtab-Offset": str(offset + len(data)), "X-Trimtab-Attempt": str(number),
                                 "X-Trimtab-Latest": str(row.attempts), "X-Trimtab-Done": "1" if done else "0"})


def _add_cluster_routes(app: FastAPI, daemon: Daemon) -> None:
    """Nodes with their GPU map, and queues per tenant."""

    @app.get("/v1/nodes", tags=["cluster"])
    def nodes(who: Who) -> dict[str, Any]:
        """Nodes and their GPUs; each GPU names the jobs holding it and their shares in milli-GPU (other
        tenants' jobs shown as -1)."""
        snap = daemon.snapshot()
        if not who.admin:
            with daemon.store.reader() as s:
                mine = set(s.scalars(select(JobRow.id).where(JobRow.tenant == who.tenant,
                                                             JobRow.state == "running")).all())
            for node in snap["nodes"]:
                for dev in node["devices"]:
                    if dev["job_id"] is not None and dev["job_id"] not in mine:
                        dev["job_id"] = -1
                    for holder in dev["jobs"]:
                        if holder["job_id"] not in mine:
                            holder["job_id"] = -1
        return {"nodes": snap["nodes"], "gpus_total": snap["gpus_total"], "gpus_allocated": snap["gpus_allocated"],
                "policy": snap["policy"], "inventory": snap["inventory"], "executor": snap["executor"]}

    @app.get("/v1/queues", tags=["cluster"])
    def queues(who: Who) -> dict[str, Any]:
        """Pending and running jobs and GPUs held, per tenant, with quotas."""
        snap = daemon.snapshot()
        rows = snap["queues"] if who.admin else [q for q in snap["queues"] if q["tenant"] == who.tenant]
        return {"queues": rows, "gpus_total": snap["gpus_total"], "gpus_allocated": snap["gpus_allocated"]}


def _add_tenant_routes(app: FastAPI, daemon: Daemon) -> None:
    """Tenants, their quotas and their tokens."""

    @app.get("/v1/tenants", tags=["tenants"])
    def tenants(who: Who) -> dict[str, Any]:
        """Tenants and their GPU quotas (a tenant token sees its own)."""
        with daemon.store.reader() as s:
            rows = s.scalars(select(TenantRow).order_by(TenantRow.name)).all()
            return {"tenants": [{"name": t.name, "quota_gpus": t.quota_gpus} for t in rows if who.sees(t.name)]}

    @app.put("/v1/tenants/{name}", tags=["tenants"])
    def set_tenant(name: Annotated[str, Depends(_tenant_name)], body: QuotaRequest, _: Admin) -> dict[str, Any]:
        """Create a tenant or set its GPU quota (admin)."""
        daemon.requests.set_quota(name, body.quota_gpus)
        return {"name": name, "quota_gpus": body.quota_gpus}

    @app.post("/v1/tokens", status_code=201, tags=["tenants"])
    def create_token(body: TokenRequest, _: Admin) -> dict[str, Any]:
        """Create a tenant token (admin); the token is shown only in this answer. Sets the quota if given."""
        token = daemon.requests.create_token(body.tenant, body.name)
        if body.quota_gpus is not None:
            daemon.requests.set_quota(body.tenant, body.quota_gpus)
        return {"token": token, "tenant": body.tenant}


def _add_service_routes(app: FastAPI, daemon: Daemon, metrics: ServeMetrics) -> None:
    """Statistics for the dashboard, Prometheus, the health check and the dashboard itself."""

    @app.get("/v1/stats", tags=["cluster"])
    def get_stats(_: Who, hours: Annotated[float, Query(gt=0, le=24 * 30)] = 6.0) -> dict[str, Any]:
        """Utilisation samples and completions per bucket over the last `hours` (for the dashboard)."""
        since = time.time() - hours * 3600
        with daemon.store.reader() as s:
            return stats(s, since, max(hours * 3600 / 60, 10.0))

    @app.get("/metrics", tags=["cluster"], response_class=PlainTextResponse)
    def prometheus() -> Response:
        """Prometheus exposition (no token: aggregates only)."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz", tags=["cluster"])
    def healthz() -> dict[str, Any]:
        return {"ok": True, "policy": daemon.profile.name, "executor": daemon.executor.name}

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def dashboard() -> HTMLResponse:
        return HTMLResponse(DASHBOARD_HTML)


def _visible_job(s: Any, job_id: int, who: Principal) -> JobRow:
    """The job, if `who` may see it; 404 otherwise."""
    row = s.get(JobRow, job_id)
    if row is None or not who.sees(row.tenant):
        raise ServeError(404, f"no job {job_id}", "job_id")
    return row



def _add_docs(app: FastAPI) -> None:
    """/docs: Swagger UI with its script, style and icon served from this server, so the page works on a machine
    that cannot reach the internet. Swagger UI's online validator is off (it would load a badge from
    validator.swagger.io). No /redoc: ReDoc 2 loads its logo from cdn.redoc.ly whatever it is told."""
    assets = Path(str(files("fastapi_offline") / "static"))
    app.mount(DOCS_ASSETS_URL, StaticFiles(directory=assets), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - API",
            swagger_js_url=f"{root}{DOCS_ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{DOCS_ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{DOCS_ASSETS_URL}/favicon.png",
            swagger_ui_parameters={"validatorUrl": None})


def _tenant_name(name: str) -> str:
    import re

    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$", name):
        raise ServeError(422, "use letters, digits, '.', '_' and '-', starting with a letter or digit", "name")
    return name

