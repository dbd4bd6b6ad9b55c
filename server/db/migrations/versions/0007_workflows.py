"""workflows: a task's workflow step and its review rounds

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 01:50:00.000000

Adds tasks.step (the workflow step a task carries out: its workflow and version, declared outputs and
quality gate) and tasks.review_rounds (how many times a review asked for changes). Columns are added in
place (no table rebuild on SQLite).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import server.db.types

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tasks", sa.Column("step", server.db.types.Json, nullable=True))
    op.add_column("tasks", sa.Column("review_rounds", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("tasks", "review_rounds")
    op.drop_column("tasks", "step")
