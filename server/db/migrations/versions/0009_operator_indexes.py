"""operator views: the audit log searched by actor and by action, runs by start time

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23 02:00:00.000000

jct_search_audit walks the audit log newest first filtered by actor or action, and jct_list_agents reads the
runs started within a window; each gets an index so neither scans a table that grows with every change.
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_audit_log_actor_id_id", "audit_log", ["actor_id", "id"])
    op.create_index("ix_audit_log_action_id", "audit_log", ["action", "id"])
    op.create_index("ix_runs_started_at", "runs", ["started_at"])


def downgrade() -> None:
    op.drop_index("ix_runs_started_at", table_name="runs")
    op.drop_index("ix_audit_log_action_id", table_name="audit_log")
    op.drop_index("ix_audit_log_actor_id_id", table_name="audit_log")
