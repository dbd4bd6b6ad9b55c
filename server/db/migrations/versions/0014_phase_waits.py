"""phase waits: a task's phase blocker kept apart from its dependency count

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26 20:00:00.000000

`tasks.blockers` counted a blocked task's unapproved dependencies plus one for the phase before its own, and the
approval that finished a phase took one from every blocked task of the next: a task added to a phase that was
done neither blocked the next phase again nor kept its approval from taking a dependency's blocker. Now
`blockers` counts dependencies only and `waits_for_phase` says whether a phase before the task's own has a task
not approved (server/db/missions.py). Both are derived here from the graph for the tasks not yet started, and
their status follows.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_NOT_STARTED = "mission_id IS NOT NULL AND status IN ('queued', 'blocked')"


def upgrade() -> None:
    op.add_column("tasks", sa.Column("waits_for_phase", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.execute(
        f"""UPDATE tasks SET
        blockers = (SELECT count(*) FROM task_dependencies d JOIN tasks dep ON dep.id = d.depends_on
                    WHERE d.task_id = tasks.id AND dep.approved_at IS NULL),
        waits_for_phase = EXISTS (SELECT 1 FROM mission_phases p WHERE p.mission_id = tasks.mission_id
                                  AND p."index" < tasks.phase AND p.remaining > 0)
        WHERE {_NOT_STARTED}"""
    )
    op.execute(
        f"""UPDATE tasks SET status = CASE WHEN blockers > 0 OR waits_for_phase THEN 'blocked' ELSE 'queued' END
        WHERE {_NOT_STARTED}"""
    )


def downgrade() -> None:
    op.execute(
        f"""UPDATE tasks SET blockers = blockers + CASE WHEN waits_for_phase THEN 1 ELSE 0 END
        WHERE {_NOT_STARTED}"""
    )
    op.drop_column("tasks", "waits_for_phase")
