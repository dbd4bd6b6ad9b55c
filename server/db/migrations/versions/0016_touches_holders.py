"""touches holders: the index through which a claim finds the tasks of a repository that hold their touches

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27 09:00:00.000000

DESIGN section 16. A claim of a task with touches reads the touches held on its repository: those of the tasks
running there, or whose work waits for review or in the merge queue (server/db/holds.py). A partial index on
target_repo over just those tasks keeps that read as small as the holders are many, whatever the table holds.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

# server/db/tables.py HOLDING, as it was written here: the claim's query repeats it word for word.
_HOLDING = sa.text("touches IS NOT NULL AND (status = 'running' OR merge IN ('pending', 'queued', 'merging'))")


def upgrade() -> None:
    op.create_index(
        "ix_tasks_holding_touches", "tasks", ["target_repo"], postgresql_where=_HOLDING, sqlite_where=_HOLDING
    )


def downgrade() -> None:
    op.drop_index("ix_tasks_holding_touches", table_name="tasks")
