"""telemetry totals, doctrine by repository prefix

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23 02:00:00.000000

- telemetry_deltas: what agents report spending (tokens, cost, time), one row per report and number, summed
  by jct_queue_stats; backfilled from the telemetry runs already hold.
- doctrine_refs.repo_prefix (every task of a repository under it gets the doctrine) and updated_at.
"""

from __future__ import annotations

import json
import math

import sqlalchemy as sa
from alembic import op

import server.db.types

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

NUMBERS = ("tokens_input", "tokens_output", "cost_usd", "duration_seconds")


def upgrade() -> None:
    deltas = op.create_table(
        "telemetry_deltas",
        sa.Column("id", server.db.types.BigId, autoincrement=True, nullable=False),
        sa.Column("key", sa.String(length=32), nullable=False),
        sa.Column("amount", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_telemetry_deltas")),
    )
    sums = dict.fromkeys(NUMBERS, 0.0)
    rows = op.get_bind().execute(sa.text("SELECT telemetry FROM runs WHERE telemetry IS NOT NULL"))
    for (telemetry,) in rows:
        found = json.loads(telemetry) if isinstance(telemetry, str) else telemetry
        if not isinstance(found, dict):
            continue
        for key in NUMBERS:
            value = found.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
                sums[key] += value
    backfill = [{"key": key, "amount": amount} for key, amount in sums.items() if amount]
    if backfill:
        op.bulk_insert(deltas, backfill)
    op.add_column("doctrine_refs", sa.Column("repo_prefix", sa.String(length=512), nullable=True))
    op.add_column("doctrine_refs", sa.Column("updated_at", server.db.types.UTCDateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("doctrine_refs") as batch_op:
        batch_op.drop_column("updated_at")
        batch_op.drop_column("repo_prefix")
    op.drop_table("telemetry_deltas")
