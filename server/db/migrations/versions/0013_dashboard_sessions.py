"""dashboard sessions: a form key every process shares, and the sessions ended by logging out

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26 18:40:00.000000

`server_secrets`: with JCT_AUTH=none a dashboard form's token was only compared with a cookie, and a page on
another port of the same host can set that cookie (cookies ignore ports). The token is now a MAC of the cookie
under a key only JCT's processes know, kept here so any process behind one address accepts another's forms.

`ended_ui_sessions`: a dashboard session is a signed cookie; logging out only deleted it from the browser, so a
copy kept loading pages and posting forms until it expired. The signature of a session ended by logging out is
kept here until then, and every process refuses it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import server.db.types

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "server_secrets",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_server_secrets")),
    )
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
    op.drop_table("server_secrets")
