"""stuck work found by index: a run's budget end, its newest event, a mission's failed tasks, an action's rows

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-23 05:00:00.000000

jct_list_stuck judged every running run in Python after joining its task for the time budget and reading its
newest event, and walked every blocked task for a failed dependency; at 1M tasks that was over three times
jct_queue_stats. A run now carries the moment its budget ends (set at claim, filled in here for the runs
already running); its events are indexed by (run_id, created_at), so the newest is one index probe; a
mission's failed and cancelled tasks are in a partial index, so the walk starts at the active missions; and
the audit log's action index carries ts, so the throughput chart reads the index alone.
"""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from alembic import op

from server.db.types import UTCDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("budget_ends_at", UTCDateTime(), nullable=True))
    runs = sa.table(
        "runs",
        sa.column("id", sa.String),
        sa.column("task_id", sa.String),
        sa.column("status", sa.String),
        sa.column("started_at", UTCDateTime()),
        sa.column("budget_ends_at", UTCDateTime()),
    )
    tasks = sa.table("tasks", sa.column("id", sa.String), sa.column("time_budget_seconds", sa.Integer))
    bind = op.get_bind()
    running = bind.execute(
        sa.select(runs.c.id, runs.c.started_at, tasks.c.time_budget_seconds)
        .join(tasks, tasks.c.id == runs.c.task_id)
        .where(runs.c.status == "running")
    ).all()
    for run_id, started_at, budget in running:
        bind.execute(
            runs.update().where(runs.c.id == run_id).values(budget_ends_at=started_at + timedelta(seconds=int(budget)))
        )
    ended_badly = sa.text("status IN ('failed', 'cancelled') AND mission_id IS NOT NULL")
    op.create_index(
        "ix_tasks_mission_id_ended_badly",
        "tasks",
        ["mission_id"],
        postgresql_where=ended_badly,
        sqlite_where=ended_badly,
    )
    op.create_index("ix_run_events_run_id_created_at", "run_events", ["run_id", "created_at"])
    op.drop_index("ix_run_events_run_id", table_name="run_events")
    op.create_index("ix_audit_log_action_id_ts", "audit_log", ["action", "id", "ts"])
    op.drop_index("ix_audit_log_action_id", table_name="audit_log")


def downgrade() -> None:
    op.drop_index("ix_tasks_mission_id_ended_badly", table_name="tasks")
    op.create_index("ix_audit_log_action_id", "audit_log", ["action", "id"])
    op.drop_index("ix_audit_log_action_id_ts", table_name="audit_log")
    op.create_index("ix_run_events_run_id", "run_events", ["run_id"])
    op.drop_index("ix_run_events_run_id_created_at", table_name="run_events")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("budget_ends_at")
