"""The first schema of the serve store: jobs, runs, tokens, tenants, samples.

Revision 0001; later schema changes add revisions after it, never edit it."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    _jobs()
    _runs()
    _tokens()
    _tenants()
    _samples()


def _int(name: str, default: str | None = None) -> sa.Column:
    """A required integer column, `default` its server default."""
    return sa.Column(name, sa.Integer, nullable=False, server_default=default)


def _str(name: str, length: int, default: str | None = "") -> sa.Column:
    """A required string column of at most `length` characters, `default` its server default."""
    return sa.Column(name, sa.String(length), nullable=False, server_default=default)


def _id() -> sa.Column:
    return sa.Column("id", sa.Integer, primary_key=True, autoincrement=True)


def _jobs() -> None:
    op.create_table(
        "jobs", _id(),
        _str("name", 200), _str("tenant", 100, None), _str("user", 100), _str("state", 16, None),
        _int("priority", "0"), _str("priority_class", 100), _int("tasks"), _int("gpus_per_task"),
        _int("cpu_milli", "0"), _int("mem_mib", "0"),
        *(sa.Column(name, sa.JSON, nullable=False) for name in ("gpu_models", "node_selector", "command", "env")),
        sa.Column("workdir", sa.Text, nullable=True),
        *(_int(name, "0") for name in ("max_retries", "attempts", "failures", "preemptions")),
        sa.Column("submit_s", sa.Float, nullable=False),
        sa.Column("first_start_s", sa.Float, nullable=True),
        sa.Column("end_s", sa.Float, nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("reason", sa.Text, nullable=False, server_default=""),
        sa.Column("cancel_requested", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("idempotency_key", sa.String(200), nullable=True),
        sa.UniqueConstraint("tenant", "idempotency_key", name="uq_jobs_tenant_key"),
    )
    op.create_index("ix_jobs_tenant", "jobs", ["tenant"])
    op.create_index("ix_jobs_state", "jobs", ["state"])


def _runs() -> None:
    op.create_table(
        "runs", _id(),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False),
        _int("attempt"), _int("rank"), _str("node", 200, None),
        sa.Column("gpu_ids", sa.JSON, nullable=False),
        _str("state", 16, None),
        sa.Column("handle", sa.JSON, nullable=True),
        sa.Column("start_s", sa.Float, nullable=False),
        sa.Column("end_s", sa.Float, nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        _str("outcome", 32),
        sa.Column("log_path", sa.Text, nullable=False, server_default=""),
        sa.UniqueConstraint("job_id", "attempt", "rank", name="uq_runs_job_attempt_rank"),
    )
    op.create_index("ix_runs_job_id", "runs", ["job_id"])
    op.create_index("ix_runs_state", "runs", ["state"])


def _tokens() -> None:
    op.create_table(
        "tokens", _id(),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("tenant", sa.String(100), nullable=True),
        sa.Column("admin", sa.Boolean, nullable=False, server_default=sa.false()),
        _str("name", 200),
        sa.Column("created_s", sa.Float, nullable=False),
    )


def _tenants() -> None:
    op.create_table(
        "tenants",
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("quota_gpus", sa.Integer, nullable=True),
        sa.Column("created_s", sa.Float, nullable=False),
    )


def _samples() -> None:
    op.create_table(
        "samples", _id(),
        sa.Column("t_s", sa.Float, nullable=False),
        *(_int(name) for name in ("gpus_allocated", "gpus_total", "pending", "running", "completed_total")),
    )
    op.create_index("ix_samples_t_s", "samples", ["t_s"])


def downgrade() -> None:
    for table in ("samples", "tenants", "tokens", "runs", "jobs"):
        op.drop_table(table)
