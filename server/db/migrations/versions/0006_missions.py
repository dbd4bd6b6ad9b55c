"""missions: phases of dependent tasks, blocked tasks, human blockers

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 00:00:00.000000

Adds missions and their phases, task dependencies, the mission columns of tasks (mission_id, phase, blockers,
approved_at) and runs.requires_human. Columns are added in place (no table rebuild on SQLite).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import server.db.types

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "missions",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("goal", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_by", sa.String(length=256), nullable=False),
        sa.Column("workflow", server.db.types.Json, nullable=True),
        sa.Column("remaining", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=256), nullable=True),
        sa.Column("idempotency_scope", sa.String(length=256), nullable=True),
        sa.Column("request_hash", sa.String(length=64), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", server.db.types.UTCDateTime(), nullable=False),
        sa.Column("completed_at", server.db.types.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_missions")),
        sa.UniqueConstraint(
            "idempotency_scope", "idempotency_key", name=op.f("uq_missions_idempotency_scope_idempotency_key")
        ),
    )
    op.create_index("ix_missions_status_created_at_id", "missions", ["status", "created_at", "id"])
    op.create_table(
        "mission_phases",
        sa.Column("mission_id", sa.String(length=36), nullable=False),
        sa.Column("index", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("remaining", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["mission_id"], ["missions.id"], name=op.f("fk_mission_phases_mission_id_missions")),
        sa.PrimaryKeyConstraint("mission_id", "index", name=op.f("pk_mission_phases")),
    )
    op.create_table(
        "task_dependencies",
        sa.Column("task_id", sa.String(length=36), nullable=False),
        sa.Column("depends_on", sa.String(length=36), nullable=False),
        sa.ForeignKeyConstraint(["depends_on"], ["tasks.id"], name=op.f("fk_task_dependencies_depends_on_tasks")),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], name=op.f("fk_task_dependencies_task_id_tasks")),
        sa.PrimaryKeyConstraint("task_id", "depends_on", name=op.f("pk_task_dependencies")),
    )
    op.create_index("ix_task_dependencies_depends_on", "task_dependencies", ["depends_on"])
    op.add_column("tasks", sa.Column("mission_id", sa.String(length=36), nullable=True))
    op.add_column("tasks", sa.Column("phase", sa.Integer(), nullable=True))
    op.add_column("tasks", sa.Column("blockers", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("tasks", sa.Column("approved_at", server.db.types.UTCDateTime(), nullable=True))
    op.create_index("ix_tasks_mission_id_phase", "tasks", ["mission_id", "phase"])
    op.add_column("runs", sa.Column("requires_human", sa.Boolean(), nullable=False, server_default=sa.false()))
    # Work approved before missions existed is approved now too (for the record; nothing waits on it).
    op.execute(
        "UPDATE tasks SET approved_at = completed_at WHERE status = 'completed' AND id IN "
        "(SELECT task_id FROM evidence_packs WHERE review_state = 'approved')"
    )


def downgrade() -> None:
    op.drop_column("runs", "requires_human")
    op.drop_index("ix_tasks_mission_id_phase", table_name="tasks")
    for column in ("approved_at", "blockers", "phase", "mission_id"):
        op.drop_column("tasks", column)
    op.drop_index("ix_task_dependencies_depends_on", table_name="task_dependencies")
    op.drop_table("task_dependencies")
    op.drop_table("mission_phases")
    op.drop_index("ix_missions_status_created_at_id", table_name="missions")
    op.drop_table("missions")
