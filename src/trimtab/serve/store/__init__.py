"""The serve store: SQLAlchemy 2 tables for jobs, task runs, tokens, tenants and utilisation samples.

SQLite in WAL mode by default, PostgreSQL by URL; the schema is created and upgraded by Alembic (migrations/)."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    select,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
TERMINAL_STATES = ("completed", "failed", "cancelled")


class Base(DeclarativeBase):
    pass


class JobRow(Base):
    """One accepted job (a gang of `tasks` identical tasks, each with `gpus_per_task` whole GPUs or a `gpu_milli`
    share of one GPU). `attempts` counts started attempts; `failures` the failed ones (held against
    `max_retries`). Times are Unix epoch seconds."""

    __tablename__ = "jobs"
    __table_args__ = (UniqueConstraint("tenant", "idempotency_key", name="uq_jobs_tenant_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    tenant: Mapped[str] = mapped_column(String(100), index=True)
    user: Mapped[str] = mapped_column(String(100), default="")
    state: Mapped[str] = mapped_column(String(16), index=True)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    priority_class: Mapped[str] = mapped_column(String(100), default="")
    tasks: Mapped[int] = mapped_column(Integer)
    gpus_per_task: Mapped[int] = mapped_column(Integer)
    gpu_milli: Mapped[int] = mapped_column(Integer, default=0)  # a share of one GPU per task; 0: whole GPUs
    cpu_milli: Mapped[int] = mapped_column(Integer, default=0)
    mem_mib: Mapped[int] = mapped_column(Integer, default=0)
    gpu_models: Mapped[list[str]] = mapped_column(JSON, default=list)
    node_selector: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    # where its tasks may run, as a Kubernetes pod spec writes it (serve/intake/placement.py)
    tolerations: Mapped[list[dict[str, str]]] = mapped_column(JSON, default=list)
    affinity: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    labels: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    command: Mapped[list[str]] = mapped_column(JSON)
    env: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    workdir: Mapped[str | None] = mapped_column(Text, nullable=True)
    max_retries: Mapped[int] = mapped_column(Integer, default=0)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    submit_s: Mapped[float] = mapped_column(Float)
    first_start_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    end_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    idempotency_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    # elastic jobs (docs/elastic.md, "Live"): the range of tasks it may be resized in (None: fixed size), the GPU
    # utilisation it is resized toward (None: none), and how many times it was resized
    min_tasks: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_tasks: Mapped[int | None] = mapped_column(Integer, nullable=True)
    target_gpu_util: Mapped[float | None] = mapped_column(Float, nullable=True)
    resizes: Mapped[int] = mapped_column(Integer, default=0)

    @property
    def gpus(self) -> int:
        return self.tasks * self.gpus_per_task

    @property
    def gpu_milli_total(self) -> int:
        """GPU thousandths of the gang: 1000 per whole GPU plus the shares."""
        return self.tasks * (self.gpus_per_task * 1000 + self.gpu_milli)


class RunRow(Base):
    """One task of one attempt. `state`: launching (row written, process maybe not yet), running (the executor's
    `handle` is recorded), exited. A row not yet exited holds its `gpu_ids` on `node` (wholly, or its job's
    `gpu_milli` share of the one GPU listed)."""

    __tablename__ = "runs"
    __table_args__ = (UniqueConstraint("job_id", "attempt", "rank", name="uq_runs_job_attempt_rank"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    rank: Mapped[int] = mapped_column(Integer)
    node: Mapped[str] = mapped_column(String(200))
    gpu_ids: Mapped[list[str]] = mapped_column(JSON, default=list)
    state: Mapped[str] = mapped_column(String(16), index=True)
    handle: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    start_s: Mapped[float] = mapped_column(Float)
    end_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    outcome: Mapped[str] = mapped_column(String(32), default="")
    log_path: Mapped[str] = mapped_column(Text, default="")


class TokenRow(Base):
    """A bearer token, kept only as its SHA-256 digest (a token is 256 random bits, so a digest is as good as a
    salted hash and can be looked up). `tenant` None with `admin` True: the admin token. `last_used_s`: when it
    last authenticated a request, to the minute (None: never)."""

    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    tenant: Mapped[str | None] = mapped_column(String(100), nullable=True)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    name: Mapped[str] = mapped_column(String(200), default="")
    created_s: Mapped[float] = mapped_column(Float)
    last_used_s: Mapped[float | None] = mapped_column(Float, nullable=True)


class TenantRow(Base):
    """A tenant, its quota (the most GPUs its jobs may hold at once; None: no limit) and the admin's overrides of
    the server's default limits (`limits`: field of serve.intake.limits.TenantLimits -> value; {}: the defaults)."""

    __tablename__ = "tenants"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    quota_gpus: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_s: Mapped[float] = mapped_column(Float)
    limits: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class ResizeRow(Base):
    """One resize of a running elastic job: at `t_s` its `from_tasks` tasks were stopped, to run again as
    `to_tasks` tasks in attempt `attempt`."""

    __tablename__ = "resizes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    t_s: Mapped[float] = mapped_column(Float)
    from_tasks: Mapped[int] = mapped_column(Integer)
    to_tasks: Mapped[int] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer)


class SampleRow(Base):
    """A periodic snapshot for the dashboard and utilisation metrics."""

    __tablename__ = "samples"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    t_s: Mapped[float] = mapped_column(Float, index=True)
    gpus_allocated: Mapped[int] = mapped_column(Integer)
    gpus_total: Mapped[int] = mapped_column(Integer)
    pending: Mapped[int] = mapped_column(Integer)
    running: Mapped[int] = mapped_column(Integer)
    completed_total: Mapped[int] = mapped_column(Integer)


def digest_of(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return "tt_" + secrets.token_urlsafe(32)


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


class Store:
    """The database behind the daemon. `upgrade()` brings the schema to the newest migration; `session()` is a
    unit of work that commits on a clean exit and rolls back on an exception.

    For SQLite the store turns on WAL (readers never block the writer, and a SIGKILLed writer loses nothing it
    committed) and a busy timeout, so the API's readers and the daemon's writer share the file safely."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        kwargs: dict[str, Any] = {}
        if self.is_sqlite:
            kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
        else:
            kwargs["pool_pre_ping"] = True
        self.engine: Engine = create_engine(url, **kwargs)
        if self.is_sqlite:
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    def upgrade(self) -> None:
        """Apply every Alembic migration not yet applied (creates the schema on a new database)."""
        from alembic import command
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        with self.engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions() as session, session.begin():
            yield session

    def reader(self) -> Session:
        """A session for reads only (the caller closes it)."""
        return self._sessions()

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------------------------------------- tokens

    def ensure_admin_token(self, now_s: float) -> str | None:
        """Create the admin token if the database has none; returns it (the only time it is seen in clear)."""
        with self.session() as s:
            if s.scalar(select(TokenRow.id).where(TokenRow.admin.is_(True)).limit(1)) is not None:
                return None
            token = new_token()
            s.add(TokenRow(digest=digest_of(token), tenant=None, admin=True, name="admin", created_s=now_s))
            return token


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")  # durable against a process crash, which is what WAL is for here
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
