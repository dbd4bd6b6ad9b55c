"""evidence packs by task: a mission's page tallies its tasks' reviews without walking every pack

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23 03:20:00.000000

jct_get_mission counts the review states of its tasks' evidence packs; without an index on task_id SQLite
walks every pack in the database (3.3x slower at 1M tasks than at 1k, bench/RESULTS.md section 2b).
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_evidence_packs_task_id", "evidence_packs", ["task_id"])


def downgrade() -> None:
    op.drop_index("ix_evidence_packs_task_id", table_name="evidence_packs")
