"""verified changes: the run's base commit and the files it changed, the evidence pack's unexpected files

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 02:00:00.000000

- runs.base_commit: the commit target_ref named when the task was claimed (a verifiable task only).
- runs.files_changed: what JCT read in the repository at completion ({files: [...], head, truncated}).
- evidence_packs.unexpected_files: the files the scope check found outside target_path.

Nullable columns added in place (no table rebuild on SQLite).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import server.db.types

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("base_commit", sa.String(length=64), nullable=True))
    op.add_column("runs", sa.Column("files_changed", server.db.types.Json, nullable=True))
    op.add_column("evidence_packs", sa.Column("unexpected_files", server.db.types.Json, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("evidence_packs") as batch:
        batch.drop_column("unexpected_files")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("files_changed")
        batch.drop_column("base_commit")
