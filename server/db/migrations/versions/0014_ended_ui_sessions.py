"""ended dashboard sessions: logging out ends the session on every process, not only in the browser

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26 19:00:00.000000

A dashboard session is a signed cookie; logging out only deleted it from the browser, so a copy kept loading
pages and posting forms until it expired. The signature of a session ended by logging out is kept here until
then, and every process refuses it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import server.db.types

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ended_ui_sessions",
        sa.Column("signature", sa.String(length=64), nullable=False),
        sa.Column("expires_at", server.db.types.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("signature", name=op.f("pk_ended_ui_sessions")),
    )
    op.create_index(op.f("ix_ended_ui_sessions_expires_at"), "ended_ui_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_ended_ui_sessions_expires_at"), table_name="ended_ui_sessions")
    op.drop_table("ended_ui_sessions")
