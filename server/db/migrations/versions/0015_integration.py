"""integration: touches, the merge state of a task, a run's workspace, the merge queue and its integrators

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26 21:40:00.000000

DESIGN section 16. `tasks.touches` (path globs the task will edit) and `tasks.merge` (where its work stands on
the way to the target branch) decide which queued task a claim may hand out; `runs.workspace` is the branch
and worktree a run works in; `integrations` is the merge queue (one row per approved run, in approval order per
repository and ref) and `integrators` the lease one process holds to integrate one (repository, ref).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import server.db.types

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tasks", sa.Column("touches", server.db.types.Json, nullable=True))
    op.add_column("tasks", sa.Column("merge", sa.String(length=16), nullable=True))
    op.add_column("runs", sa.Column("workspace", server.db.types.Json, nullable=True))
    op.create_table(
        "integrations",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("task_id", sa.String(length=36), nullable=False),
        sa.Column("repo", sa.String(length=512), nullable=False),
        sa.Column("ref", sa.String(length=256), nullable=False),
        sa.Column("base_commit", sa.String(length=64), nullable=False),
        sa.Column("head_commit", sa.String(length=64), nullable=False),
        sa.Column("strategy", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("commit", sa.String(length=64), nullable=True),
        sa.Column("conflicting_files", server.db.types.Json, nullable=True),
        sa.Column("check_output", sa.Text(), nullable=True),
        sa.Column("waiting", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("queued_at", server.db.types.UTCDateTime(), nullable=False),
        sa.Column("started_at", server.db.types.UTCDateTime(), nullable=True),
        sa.Column("ended_at", server.db.types.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_integrations_run_id_runs")),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], name=op.f("fk_integrations_task_id_tasks")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_integrations")),
        sa.UniqueConstraint("run_id", name=op.f("uq_integrations_run_id")),
    )
    op.create_index(op.f("ix_integrations_task_id"), "integrations", ["task_id"])
    op.create_index(op.f("ix_integrations_status_repo_ref_id"), "integrations", ["status", "repo", "ref", "id"])
    op.create_table(
        "integrators",
        sa.Column("repo", sa.String(length=512), nullable=False),
        sa.Column("ref", sa.String(length=256), nullable=False),
        sa.Column("holder", sa.String(length=64), nullable=False),
        sa.Column("expires_at", server.db.types.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("repo", "ref", name=op.f("pk_integrators")),
    )


def downgrade() -> None:
    op.drop_table("integrators")
    op.drop_index(op.f("ix_integrations_status_repo_ref_id"), table_name="integrations")
    op.drop_index(op.f("ix_integrations_task_id"), table_name="integrations")
    op.drop_table("integrations")
    op.drop_column("runs", "workspace")
    op.drop_column("tasks", "merge")
    op.drop_column("tasks", "touches")
