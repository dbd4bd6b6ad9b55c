"""tokens

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 04:23:03.093044
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import server.db.types

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table(
        "tokens",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("roles", server.db.types.Json, nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", server.db.types.UTCDateTime(), nullable=False),
        sa.Column("revoked_at", server.db.types.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tokens")),
        sa.UniqueConstraint("name", name=op.f("uq_tokens_name")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_tokens_token_hash")),
    )


def downgrade() -> None:

    op.drop_table("tokens")
