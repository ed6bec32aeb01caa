"""Jobs keep where they may run: `jobs.tolerations` (a list), `jobs.affinity` (a mapping, NULL for none) and
`jobs.labels` (the tasks' pod labels), in the shape a Kubernetes pod spec writes them (serve/intake/placement.py).
Jobs stored before have none of them.

Revision 0005, after 0004."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("tolerations", sa.JSON, nullable=False, server_default="[]"))
    op.add_column("jobs", sa.Column("affinity", sa.JSON, nullable=True))
    op.add_column("jobs", sa.Column("labels", sa.JSON, nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for name in ("labels", "affinity", "tolerations"):
            batch.drop_column(name)
