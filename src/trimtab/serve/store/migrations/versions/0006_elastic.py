"""Elastic jobs (docs/elastic.md, "Live"): `jobs.min_tasks` / `jobs.max_tasks`, the range a job may be resized in
(NULL: a fixed-size job), `jobs.target_gpu_util` (NULL: none), `jobs.resizes` (resizes so far), and the table
`resizes`, one row per resize. Jobs stored before are fixed-size.

Revision 0006, after 0005."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("min_tasks", sa.Integer, nullable=True))
    op.add_column("jobs", sa.Column("max_tasks", sa.Integer, nullable=True))
    op.add_column("jobs", sa.Column("target_gpu_util", sa.Float, nullable=True))
    op.add_column("jobs", sa.Column("resizes", sa.Integer, nullable=False, server_default="0"))
    op.create_table(
        "resizes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False, index=True),
        sa.Column("t_s", sa.Float, nullable=False),
        sa.Column("from_tasks", sa.Integer, nullable=False),
        sa.Column("to_tasks", sa.Integer, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("resizes")
    with op.batch_alter_table("jobs") as batch:
        for name in ("resizes", "target_gpu_util", "max_tasks", "min_tasks"):
            batch.drop_column(name)
