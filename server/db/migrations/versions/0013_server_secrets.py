"""server secrets: a key the dashboard signs its form tokens with, shared by every process on the database

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26 18:40:00.000000

With JCT_AUTH=none a dashboard form's token was only compared with a cookie, and a page on another port of
the same host can set that cookie (cookies ignore ports). The token is now a MAC of the cookie under a key only
JCT's processes know, kept here so any process behind one address accepts another's forms.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

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


def downgrade() -> None:
    op.drop_table("server_secrets")
