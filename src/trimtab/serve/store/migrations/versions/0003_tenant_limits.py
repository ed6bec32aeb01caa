"""Tenants carry limits beyond GPUs: `tenants.limits`, the admin's overrides of the server's default limits (JSON,
field -> value; {} keeps the defaults).

Revision 0003, after 0002."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tenants", sa.Column("limits", sa.JSON, nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("limits")
