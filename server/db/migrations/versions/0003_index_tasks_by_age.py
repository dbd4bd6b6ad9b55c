"""index tasks by age

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 04:49:30.848842
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:

    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index("ix_tasks_queued_at_id", ["queued_at", "id"], unique=False)


def downgrade() -> None:

    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_queued_at_id")
