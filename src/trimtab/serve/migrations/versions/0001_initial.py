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
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(200), nullable=False, server_default=""),
        sa.Column("tenant", sa.String(100), nullable=False),
        sa.Column("user", sa.String(100), nullable=False, server_default=""),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("priority", sa.Integer, nullable=False, server_default="0"),
        sa.Column("priority_class", sa.String(100), nullable=False, server_default=""),
        sa.Column("tasks", sa.Integer, nullable=False),
        sa.Column("gpus_per_task", sa.Integer, nullable=False),
        sa.Column("cpu_milli", sa.Integer, nullable=False, server_default="0"),
        sa.Column("mem_mib", sa.Integer, nullable=False, server_default="0"),
        sa.Column("gpu_models", sa.JSON, nullable=False),
        sa.Column("node_selector", sa.JSON, nullable=False),
        sa.Column("command", sa.JSON, nullable=False),
        sa.Column("env", sa.JSON, nullable=False),
        sa.Column("workdir", sa.Text, nullable=True),
        sa.Column("max_retries", sa.Integer, nullable=False, server_default="0"),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("failures", sa.Integer, nullable=False, server_default="0"),
        sa.Column("preemptions", sa.Integer, nullable=False, server_default="0"),
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
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("rank", sa.Integer, nullable=False),
        sa.Column("node", sa.String(200), nullable=False),
        sa.Column("gpu_ids", sa.JSON, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("handle", sa.JSON, nullable=True),
        sa.Column("start_s", sa.Float, nullable=False),
        sa.Column("end_s", sa.Float, nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("outcome", sa.String(32), nullable=False, server_default=""),
        sa.Column("log_path", sa.Text, nullable=False, server_default=""),
        sa.UniqueConstraint("job_id", "attempt", "rank", name="uq_runs_job_attempt_rank"),
    )
    op.create_index("ix_runs_job_id", "runs", ["job_id"])
    op.create_index("ix_runs_state", "runs", ["state"])
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("tenant", sa.String(100), nullable=True),
        sa.Column("admin", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("name", sa.String(200), nullable=False, server_default=""),
        sa.Column("created_s", sa.Float, nullable=False),
    )
    op.create_table(
        "tenants",
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("quota_gpus", sa.Integer, nullable=True),
        sa.Column("created_s", sa.Float, nullable=False),
    )
    op.create_table(
        "samples",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("t_s", sa.Float, nullable=False),
        sa.Column("gpus_allocated", sa.Integer, nullable=False),
        sa.Column("gpus_total", sa.Integer, nullable=False),
        sa.Column("pending", sa.Integer, nullable=False),
        sa.Column("running", sa.Integer, nullable=False),
        sa.Column("completed_total", sa.Integer, nullable=False),
    )
    op.create_index("ix_samples_t_s", "samples", ["t_s"])


def downgrade() -> None:
    for table in ("samples", "tenants", "tokens", "runs", "jobs"):
        op.drop_table(table)
