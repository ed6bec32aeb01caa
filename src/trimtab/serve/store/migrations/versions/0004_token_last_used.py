"""Tokens remember when they were last used: `tokens.last_used_s` (epoch seconds, to the minute; NULL: never).
Tokens have been stored as SHA-256 digests since 0001, so no stored token needs hashing.

Revision 0004, after 0003."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tokens", sa.Column("last_used_s", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.drop_column("last_used_s")
