"""the fence on the run: who claimed a run, idempotency keys per principal, reusable token names

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 23:00:00.000000

- runs.principal (who authenticated when the run was claimed; existing runs: their actor) and
  runs.claim_session (the connection the claim came through; NULL for existing runs).
- tasks.idempotency_scope: an idempotency key is unique per principal, not across the whole queue.
- tokens: a name is unique among live tokens only, so a revoked name can be used again.

SQLite cannot drop a table's UNIQUE constraint in place, so `tasks` and `tokens` are rebuilt there (batch
mode); the count triggers of `tasks` (migration 0004) go with the old table and are made again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# Migration 0004's SQLite triggers on tasks, made again after the rebuild (the same text).
_TASK_TRIGGERS_SQLITE = (
    "CREATE TRIGGER jct_count_tasks_insert AFTER INSERT ON tasks BEGIN "
    "INSERT INTO count_deltas (entity, status, delta) VALUES ('task', NEW.status, 1); END",
    "CREATE TRIGGER jct_count_tasks_update AFTER UPDATE OF status ON tasks WHEN OLD.status IS NOT NEW.status BEGIN "
    "INSERT INTO count_deltas (entity, status, delta) VALUES ('task', OLD.status, -1), ('task', NEW.status, 1); END",
    "CREATE TRIGGER jct_count_tasks_delete AFTER DELETE ON tasks BEGIN "
    "INSERT INTO count_deltas (entity, status, delta) VALUES ('task', OLD.status, -1); END",
)


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"

    op.add_column("runs", sa.Column("principal", sa.String(length=256), nullable=False, server_default=""))
    op.add_column("runs", sa.Column("claim_session", sa.String(length=64), nullable=True))
    op.execute("UPDATE runs SET principal = actor_id")

    # On SQLite the rebuild drops `tasks` while runs and artifacts point at it: migrations run with foreign
    # keys off there (server/db/engine.py `schema_change`), and are checked before commit.
    with op.batch_alter_table("tasks") as batch_op:
        batch_op.add_column(sa.Column("idempotency_scope", sa.String(length=256), nullable=True))
        batch_op.drop_constraint("uq_tasks_idempotency_key", type_="unique")
        batch_op.create_unique_constraint(
            "uq_tasks_idempotency_scope_idempotency_key", ["idempotency_scope", "idempotency_key"]
        )
    # Keys used so far belong to whoever enqueued them.
    op.execute("UPDATE tasks SET idempotency_scope = requested_by WHERE idempotency_key IS NOT NULL")
    if sqlite:
        for statement in _TASK_TRIGGERS_SQLITE:
            op.execute(statement)

    with op.batch_alter_table("tokens") as batch_op:
        batch_op.drop_constraint("uq_tokens_name", type_="unique")
        batch_op.create_index(
            "ix_tokens_name_live",
            ["name"],
            unique=True,
            sqlite_where=sa.text("revoked_at IS NULL"),
            postgresql_where=sa.text("revoked_at IS NULL"),
        )


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    with op.batch_alter_table("tokens") as batch_op:
        batch_op.drop_index("ix_tokens_name_live")
        batch_op.create_unique_constraint("uq_tokens_name", ["name"])
    with op.batch_alter_table("tasks") as batch_op:
        batch_op.drop_constraint("uq_tasks_idempotency_scope_idempotency_key", type_="unique")
        batch_op.create_unique_constraint("uq_tasks_idempotency_key", ["idempotency_key"])
        batch_op.drop_column("idempotency_scope")
    if sqlite:
        for statement in _TASK_TRIGGERS_SQLITE:
            op.execute(statement)
    op.drop_column("runs", "claim_session")
    op.drop_column("runs", "principal")
