"""count deltas: queue statistics without scanning tasks

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 06:30:00.000000

Adds the derived table count_deltas (server/db/tables.py), the triggers that keep it, and backfills it
from the rows already there. Also gives the operation index the id tie-break of the claim order.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import server.db.types

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# (entity, table, column): each count the triggers keep.
COUNTED = (("task", "tasks", "status"), ("review", "evidence_packs", "review_state"))


def _postgres_triggers(entity: str, table: str, column: str) -> list[str]:
    """Statement-level triggers with transition tables: one delta row per status a statement touched,
    so a bulk load (COPY) of a million tasks writes a handful of rows, and an UPDATE that leaves the
    status alone writes none. TRUNCATE empties the entity's counts."""
    function = f"jct_count_{table}"
    body = f"""
CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM count_deltas WHERE entity = '{entity}';
    ELSIF TG_OP = 'INSERT' THEN
        INSERT INTO count_deltas (entity, status, delta)
        SELECT '{entity}', {column}, count(*) FROM new_rows GROUP BY {column};
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO count_deltas (entity, status, delta)
        SELECT '{entity}', {column}, -count(*) FROM old_rows GROUP BY {column};
    ELSE
        INSERT INTO count_deltas (entity, status, delta)
        SELECT '{entity}', {column}, sum(delta) FROM (
            SELECT {column}, -1 AS delta FROM old_rows
            UNION ALL
            SELECT {column}, 1 AS delta FROM new_rows
        ) AS changed
        GROUP BY {column} HAVING sum(delta) <> 0;
    END IF;
    RETURN NULL;
END
$$"""
    return [
        body,
        f"CREATE TRIGGER {function}_insert AFTER INSERT ON {table} REFERENCING NEW TABLE AS new_rows "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()",
        f"CREATE TRIGGER {function}_update AFTER UPDATE ON {table} "
        f"REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {function}()",
        f"CREATE TRIGGER {function}_delete AFTER DELETE ON {table} REFERENCING OLD TABLE AS old_rows "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()",
        f"CREATE TRIGGER {function}_truncate AFTER TRUNCATE ON {table} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()",
    ]


def _sqlite_triggers(entity: str, table: str, column: str) -> list[str]:
    """Row-level triggers (SQLite has no other kind); every write already holds the database's one write lock."""
    name = f"jct_count_{table}"
    insert = "INSERT INTO count_deltas (entity, status, delta) VALUES"
    return [
        f"CREATE TRIGGER {name}_insert AFTER INSERT ON {table} BEGIN {insert} ('{entity}', NEW.{column}, 1); END",
        f"CREATE TRIGGER {name}_update AFTER UPDATE OF {column} ON {table} "
        f"WHEN OLD.{column} IS NOT NEW.{column} BEGIN "
        f"{insert} ('{entity}', OLD.{column}, -1), ('{entity}', NEW.{column}, 1); END",
        f"CREATE TRIGGER {name}_delete AFTER DELETE ON {table} BEGIN {insert} ('{entity}', OLD.{column}, -1); END",
    ]


def upgrade() -> None:

    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_operation_status_priority_queued_at")
        batch_op.create_index(
            "ix_tasks_operation_status_priority_queued_at_id",
            ["operation", "status", "priority", "queued_at", "id"],
            unique=False,
        )

    op.create_table(
        "count_deltas",
        sa.Column("id", server.db.types.BigId, autoincrement=True, nullable=False),
        sa.Column("entity", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("delta", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_count_deltas")),
    )
    sqlite = op.get_bind().dialect.name == "sqlite"
    for entity, table, column in COUNTED:
        # Triggers first, then the backfill, in this one transaction: on PostgreSQL CREATE TRIGGER locks
        # out writers to the table until commit, so no change falls between the backfill and the triggers.
        for statement in (_sqlite_triggers if sqlite else _postgres_triggers)(entity, table, column):
            op.execute(statement)
        op.execute(
            f"INSERT INTO count_deltas (entity, status, delta) "
            f"SELECT '{entity}', {column}, COUNT(*) FROM {table} GROUP BY {column}"
        )


def downgrade() -> None:

    sqlite = op.get_bind().dialect.name == "sqlite"
    for _entity, table, _column in COUNTED:
        name = f"jct_count_{table}"
        events = ("insert", "update", "delete") if sqlite else ("insert", "update", "delete", "truncate")
        for event in events:
            op.execute(f"DROP TRIGGER IF EXISTS {name}_{event}" + ("" if sqlite else f" ON {table}"))
        if not sqlite:
            op.execute(f"DROP FUNCTION IF EXISTS {name}()")
    op.drop_table("count_deltas")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_operation_status_priority_queued_at_id")
        batch_op.create_index(
            "ix_tasks_operation_status_priority_queued_at",
            ["operation", "status", "priority", "queued_at"],
            unique=False,
        )
