"""claim keys: the secret half of a run_id a claim hands to a caller nothing authenticates

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27 12:00:00.000000

DESIGN sections 3, 5 and 10. Without tokens every caller is `local`, and a run's id is shown to everyone
(jct_get_task, resources, the dashboard, the audit log), so it cannot prove who claimed the run. A claim by a
caller nothing authenticates now returns its run_id with a random key appended; runs.claim_key keeps the
key's SHA-256 hash (never the key). A call naming the run with that key acts on it from any connection or
process; a call naming the bare id acts on it only from the connection that claimed it. Existing runs have
no key: they keep the rule they were claimed under until they end.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("claim_key", sa.String(length=64), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "claim_key")
