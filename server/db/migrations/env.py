"""Alembic environment: always handed a live connection by server.db.migrate."""

from __future__ import annotations

from alembic import context

from server.db.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through `jct db upgrade`, which supplies the connection")

context.configure(connection=connection, target_metadata=metadata, render_as_batch=True, compare_type=True)
with context.begin_transaction():
    context.run_migrations()
