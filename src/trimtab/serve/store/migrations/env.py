"""Alembic environment of the serve store: runs migrations on the connection the Store hands over.

Run by `Store.upgrade()`; there is no alembic.ini, the script location is set in code."""

from __future__ import annotations

from alembic import context

from trimtab.serve.store import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
