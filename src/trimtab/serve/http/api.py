"""The HTTP API of `trimtab serve` (FastAPI; OpenAPI at /docs, served without a CDN): jobs, logs, nodes, queues,
tenants, tokens, /metrics and the dashboard at /.

Bearer tokens: the admin token sees and changes everything; a tenant token sees, submits and cancels only its
tenant's jobs, held to its quota. /metrics takes the admin token or the scrape token (open with --metrics-public).
Errors are JSON `{"detail": message, "field": path}` with a precise 4xx, quoting at most a short excerpt of the
request. Every answer carries the security headers of trimtab.serve.http.guards."""

from __future__ import annotations

import hmac
import re
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

from trimtab.serve.daemon import Daemon, ServeConfig
from trimtab.serve.errors import ServeError
from trimtab.serve.http.dashboard import DASHBOARD_HTML
from trimtab.serve.http.guards import BodyLimit, ParseGate, SecurityHeaders, page_csp
from trimtab.serve.http.metrics import ServeMetrics
from trimtab.serve.http.views import job_json, runs_by_job, stats
from trimtab.serve.intake.requests import Principal
from trimtab.serve.intake.submission import EXCERPT_CHARS, PRIORITY_CLASSES, JobSpec, SubmissionError, parse_body
from trimtab.serve.store import JobRow, RunRow, TenantRow, digest_of

LOG_CHUNK_BYTES = 1 << 20
MAX_LOG_OFFSET = 1 << 40  # past any log; a larger seek fails in the kernel (EINVAL)
DOCS_ASSETS_URL = "/docs-assets"  # Swagger UI from the fastapi-offline wheel: /docs needs no CDN
JOB_STATES = ("pending", "running", "completed", "failed", "cancelled")


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # "2" and true are no counts
    tenant: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
    name: str = Field("", max_length=200)
    quota_gpus: int | None = Field(None, ge=0, le=1_000_000)


class QuotaRequest(BaseModel):
    """A tenant's quota and limits (serve/intake/limits.py). Fields left out keep their values; null returns a field to
    the server's default (for `quota_gpus`: no quota)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "2" and true are no counts
    quota_gpus: int | None = Field(None, ge=0, le=1_000_000, description="None: no limit")
    priority_classes: list[str] | None = Field(None, min_length=1, max_length=len(PRIORITY_CLASSES),
                                               description="the priority classes its jobs may use")
    max_tasks_per_job: int | None = Field(None, ge=1, le=1_000_000, description="tasks one job may have")
    max_running_tasks: int | None = Field(None, ge=0, le=1_000_000_000, description="tasks its running jobs "
                                          "may hold together (a job waits beyond it)")
    max_cpu_milli: int | None = Field(None, ge=0, le=10**15, description="CPU thousandths its running jobs may "
                                      "request together (a job waits beyond it)")
    max_mem_mib: int | None = Field(None, ge=0, le=10**15, description="memory (MiB) its running jobs may "
                                    "request together (a job waits beyond it)")
    max_pending_jobs: int | None = Field(None, ge=0, le=1_000_000_000, description="pending jobs it may have "
                                         "(a submission beyond it is refused with 429)")
    max_task_log_bytes: int | None = Field(None, ge=1, le=2**50, description="what one task's log keeps of its "
                                           "output (then a line saying it was cut)")
    max_log_bytes: int | None = Field(None, ge=1, le=2**60, description="its logs on disk (beyond it, the logs "
                                      "of its oldest finished jobs are removed)")


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


def create_app(daemon: Daemon, config: ServeConfig | None = None, scrape_token: str | None = None) -> FastAPI:
    """The API around a running (or about to run) daemon, bounded by `config` (its request limits and
    metrics_public). `scrape_token`: a token that reads /metrics and nothing else (None: only the admin token)."""
    config = config or ServeConfig()
    app = FastAPI(title="trimtab serve", version="1", description=__doc__, docs_url=None, redoc_url=None)
    metrics = ServeMetrics(daemon)
    app.state.daemon = daemon
    app.state.metrics = metrics
    app.state.metrics_public = config.metrics_public
    app.state.scrape_token = scrape_token
    _add_error_handlers(app)
    _add_submit(app, daemon)
    _add_job_routes(app, daemon)
    _add_why_route(app, daemon)
    _add_progress_route(app, daemon)
    _add_log_route(app, daemon)
    _add_cluster_routes(app, daemon)
    _add_tenant_routes(app, daemon)
    _add_service_routes(app, daemon, metrics)
    _add_docs(app)
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes,  # type: ignore[arg-type]
                       timeout_s=config.body_timeout_s)
    app.add_middleware(SecurityHeaders)  # type: ignore[arg-type]  # added last: outermost, so 408/413 get them too
    return app


def _add_error_handlers(app: FastAPI) -> None:
    """Every refusal as JSON `{"detail": message, "field": path}`."""

    @app.exception_handler(ServeError)
    async def _serve_error(_request: Request, exc: ServeError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse(_error(exc.detail, exc.field), status_code=exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path"))
        return JSONResponse(_error(str(err.get("msg", "invalid request")), field), status_code=422)


def _error(detail: str, field: str) -> dict[str, str]:
    """An error body. Messages quote the request in short excerpts; this bounds what a message built around a
    long field path or several excerpts may still echo."""
    limit = 2 * EXCERPT_CHARS
    return {"detail": detail if len(detail) <= limit else f"{detail[:limit - 3]}...",
            "field": field if len(field) <= EXCERPT_CHARS else f"{field[:EXCERPT_CHARS - 3]}..."}


def _add_submit(app: FastAPI, daemon: Daemon) -> None:
    """POST /v1/jobs: a JSON job or a Kubernetes manifest, accepted by the daemon (one manifest read at a time per
    tenant)."""
    parses = ParseGate()

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
            if "yaml" in content_type.lower():
                with parses.enter(who.tenant or "the admin"):
                    spec = parse_body(body, content_type)
            else:
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
        """Jobs the token may see, oldest first, `limit` at a time after `after_id`; a tenant token asking for
        another tenant's jobs gets 403."""
        if not who.admin and tenant is not None and tenant != who.tenant:
            raise ServeError(403, f"a token of tenant {who.tenant} lists only its own jobs", "tenant")
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


class ProgressReport(BaseModel):
    """What a running job reports about itself (docs/elastic.md, "Live"); every field optional."""

    model_config = ConfigDict(extra="forbid")
    samples_per_s: float | None = Field(None, ge=0, le=1e12, allow_inf_nan=False, description="throughput now")
    batch_size: int | None = Field(None, ge=1, le=2**31, description="global batch size now")
    gpu_util: float | None = Field(None, ge=0, le=1, allow_inf_nan=False,
                                   description="GPU utilisation (0..1), what virtual GPUs go by")


def _add_progress_route(app: FastAPI, daemon: Daemon) -> None:
    """POST /v1/jobs/{job_id}/progress: the same report as the job's progress file, over the API."""

    @app.post("/v1/jobs/{job_id}/progress", tags=["jobs"])
    def report_progress(job_id: JobId, body: ProgressReport, who: Who) -> dict[str, Any]:
        """Report a running job's progress with a token of its tenant: its throughput, batch size and GPU
        utilisation at its size now, from which the server learns its scaling curve (409 when it is not
        running)."""
        with daemon.store.reader() as s:
            _visible_job(s, job_id, who)
        counted = daemon.report_progress(job_id, body.model_dump(exclude_none=True))
        if counted is None:
            raise ServeError(409, f"job {job_id} is not running", "job_id")
        return counted


def _add_why_route(app: FastAPI, daemon: Daemon) -> None:
    """Why a job waits, computed by the daemon from its scheduler's current books."""

    @app.get("/v1/jobs/{job_id}/why", tags=["jobs"])
    def why_job(job_id: JobId, who: Who) -> dict[str, Any]:
        """A pending job's blocking `cause` (fit, quota, reservation, locality, gang, order, other), its `reason`
        now and what would let it start (`hint`). A job that is not waiting gives its state and stored reason,
        with an empty cause and hint."""
        with daemon.store.reader() as s:
            row = _visible_job(s, job_id, who)
            state, stored = row.state, row.reason
        status = daemon.why(job_id) if state == "pending" else None
        if status is None:
            return {"id": job_id, "state": state, "cause": "", "reason": stored, "hint": ""}
        return {"id": job_id, "state": state, "cause": str(status.cause), "reason": status.reason,
                "hint": status.hint}


def _add_log_route(app: FastAPI, daemon: Daemon) -> None:
    """A task's output, read from its log file in chunks."""

    @app.get("/v1/jobs/{job_id}/logs", tags=["jobs"], response_class=PlainTextResponse)
    def job_logs(job_id: JobId, who: Who, attempt: Annotated[int | None, Query(ge=1, le=1_000_000)] = None,
                 rank: Annotated[int, Query(ge=0, le=100_000)] = 0,
                 offset: Annotated[int, Query(ge=0, le=MAX_LOG_OFFSET)] = 0) -> Response:
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
        tenants' jobs shown as -1). `identity`: whether each tenant's tasks run as its own Unix user."""
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
                "policy": snap["policy"], "inventory": snap["inventory"], "executor": snap["executor"],
                "identity": daemon.launcher.identities.describe()}

    @app.get("/v1/queues", tags=["cluster"])
    def queues(who: Who) -> dict[str, Any]:
        """Pending and running jobs and GPUs held, per tenant, with quotas."""
        snap = daemon.snapshot()
        rows = snap["queues"] if who.admin else [q for q in snap["queues"] if q["tenant"] == who.tenant]
        return {"queues": rows, "gpus_total": snap["gpus_total"], "gpus_allocated": snap["gpus_allocated"]}


def _add_tenant_routes(app: FastAPI, daemon: Daemon) -> None:
    """Tenants, their quotas and their tokens."""

    def tenant_json(name: str, quota_gpus: int | None) -> dict[str, Any]:
        return {"name": name, "quota_gpus": quota_gpus, **daemon.requests.limits[name].as_json()}

    @app.get("/v1/tenants", tags=["tenants"])
    def tenants(who: Who) -> dict[str, Any]:
        """Tenants with their GPU quotas and limits (a tenant token sees its own)."""
        with daemon.store.reader() as s:
            rows = s.scalars(select(TenantRow).order_by(TenantRow.name)).all()
            return {"tenants": [tenant_json(t.name, t.quota_gpus) for t in rows if who.sees(t.name)]}

    @app.put("/v1/tenants/{name}", tags=["tenants"])
    def set_tenant(name: Annotated[str, Depends(_tenant_name)], body: QuotaRequest, _: Admin) -> dict[str, Any]:
        """Create a tenant or set its GPU quota and limits (admin). Fields left out keep their values; null
        returns one to the server's default (for quota_gpus: no quota)."""
        given = body.model_dump(include=body.model_fields_set)
        quota_given, quota_gpus = "quota_gpus" in given, given.pop("quota_gpus", None)
        daemon.requests.set_limits(name, given)  # checked before anything changes; creates the tenant if new
        if quota_given:
            daemon.requests.set_quota(name, quota_gpus)
        return tenant_json(name, daemon.requests.quotas.get(name))

    @app.post("/v1/tokens", status_code=201, tags=["tenants"])
    def create_token(body: TokenRequest, _: Admin) -> dict[str, Any]:
        """Create a tenant token (admin); the token is shown only in this answer. Sets the quota if given."""
        token = daemon.requests.create_token(body.tenant, body.name)
        if body.quota_gpus is not None:
            daemon.requests.set_quota(body.tenant, body.quota_gpus)
        return {"token": token, "tenant": body.tenant}

    @app.get("/v1/tokens", tags=["tenants"])
    def list_tokens(_: Admin) -> dict[str, Any]:
        """Every token (admin): id, tenant (null for the admin token), name, created_s, last_used_s (to the
        minute; null: never). Never the token itself: only its SHA-256 digest is stored."""
        return {"tokens": daemon.requests.list_tokens()}

    @app.delete("/v1/tokens/{token_id}", tags=["tenants"])
    def revoke_token(token_id: Annotated[int, PathParam(ge=1, le=2**62)], _: Admin) -> dict[str, Any]:
        """Revoke a tenant token (admin): from now on it gets 401. The admin token cannot be revoked (409)."""
        return daemon.requests.revoke_token(token_id)


def _add_service_routes(app: FastAPI, daemon: Daemon, metrics: ServeMetrics) -> None:
    """Statistics for the dashboard, Prometheus, the health check and the dashboard itself."""

    @app.get("/v1/stats", tags=["cluster"])
    def get_stats(_: Who, hours: Annotated[float, Query(gt=0, le=24 * 30)] = 6.0) -> dict[str, Any]:
        """Utilisation samples and completions per bucket over the last `hours` (for the dashboard)."""
        since = time.time() - hours * 3600
        with daemon.store.reader() as s:
            return stats(s, since, max(hours * 3600 / 60, 10.0))

    @app.get("/metrics", tags=["cluster"], response_class=PlainTextResponse)
    def prometheus(request: Request) -> Response:
        """Prometheus exposition. Needs the admin token or the scrape token (data dir, metrics.token): it names
        every tenant and its usage. A server started with --metrics-public (loopback only) answers anyone."""
        if not request.app.state.metrics_public:
            _check_scraper(request)
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz", tags=["cluster"])
    def healthz() -> dict[str, Any]:
        return {"ok": True, "policy": daemon.profile.name, "executor": daemon.executor.name}

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def dashboard() -> HTMLResponse:
        return HTMLResponse(DASHBOARD_HTML, headers={"Content-Security-Policy": DASHBOARD_CSP})


DASHBOARD_CSP = page_csp(DASHBOARD_HTML)


def _check_scraper(request: Request) -> None:
    """Raises ServeError 401/403 unless the request bears the scrape token or the admin token."""
    header = request.headers.get("authorization", "")
    token = header.partition(" ")[2].strip()
    scrape_token = request.app.state.scrape_token
    if header and scrape_token and hmac.compare_digest(token.encode(), scrape_token.encode()):
        return
    if not principal(request).admin:  # principal: 401 without a known token
        raise ServeError(403, "/metrics needs the admin token or the scrape token")


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
        page = get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - API",
            swagger_js_url=f"{root}{DOCS_ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{DOCS_ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{DOCS_ASSETS_URL}/favicon.png",
            swagger_ui_parameters={"validatorUrl": None})
        page.headers["Content-Security-Policy"] = page_csp(bytes(page.body).decode())
        return page


def _tenant_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", name):
        raise ServeError(422, "use letters, digits, '.', '_' and '-', starting with a letter or digit", "name")
    return name

