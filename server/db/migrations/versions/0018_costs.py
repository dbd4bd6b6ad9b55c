"""costs: what runs spent as columns, and a mission's budget and closing summary

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27 13:00:00.000000

DESIGN section 17 (what the fleet costs). A run's telemetry numbers become columns (tokens = tokens_input +
tokens_output, cost_usd, duration_seconds), so costs are summed in SQL per agent, task and mission; a mission
gains a budget (max_cost_usd, max_tokens), the sums the claim compares with it (spent_cost_usd, spent_tokens),
and a closing summary. The columns are filled here from the telemetry already reported.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_RUN_NUMBERS = ("tokens", "cost_usd", "duration_seconds")


def _number(key: str, dialect: str) -> str:
    """The telemetry's number `key` (0 when it is missing or not a number), in the dialect's JSON functions."""
    if dialect == "sqlite":
        return (
            f"(CASE WHEN json_type(telemetry, '$.{key}') IN ('integer', 'real') "
            f"THEN json_extract(telemetry, '$.{key}') ELSE 0 END)"
        )
    return f"(CASE WHEN jsonb_typeof(telemetry -> '{key}') = 'number' THEN (telemetry ->> '{key}')::float ELSE 0 END)"


def upgrade() -> None:
    for name in _RUN_NUMBERS:
        op.add_column("runs", sa.Column(name, sa.Float(), nullable=False, server_default="0"))
    op.add_column("missions", sa.Column("max_cost_usd", sa.Float(), nullable=True))
    op.add_column("missions", sa.Column("max_tokens", sa.BigInteger(), nullable=True))
    op.add_column("missions", sa.Column("spent_cost_usd", sa.Float(), nullable=False, server_default="0"))
    op.add_column("missions", sa.Column("spent_tokens", sa.Float(), nullable=False, server_default="0"))
    op.add_column("missions", sa.Column("summary", sa.Text(), nullable=True))
    dialect = op.get_bind().dialect.name
    tokens = f"{_number('tokens_input', dialect)} + {_number('tokens_output', dialect)}"
    op.execute(
        f"""UPDATE runs SET tokens = {tokens}, cost_usd = {_number("cost_usd", dialect)},
        duration_seconds = {_number("duration_seconds", dialect)}
        WHERE telemetry IS NOT NULL"""
    )
    op.execute(
        """UPDATE missions SET
        spent_tokens = (SELECT coalesce(sum(r.tokens), 0) FROM runs r JOIN tasks k ON k.id = r.task_id
                        WHERE k.mission_id = missions.id),
        spent_cost_usd = (SELECT coalesce(sum(r.cost_usd), 0) FROM runs r JOIN tasks k ON k.id = r.task_id
                          WHERE k.mission_id = missions.id)"""
    )


def downgrade() -> None:
    for name in ("summary", "spent_tokens", "spent_cost_usd", "max_tokens", "max_cost_usd"):
        op.drop_column("missions", name)
    for name in _RUN_NUMBERS:
        op.drop_column("runs", name)
