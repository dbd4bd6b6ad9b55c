"""The claim: one atomic statement per dialect (DESIGN section 3).

PostgreSQL does the whole claim in one CTE: pick (or check) the task, flip it to
running, create the run that holds the lease, move the issue, and write both audit
rows. SQLite cannot put DML in a CTE, so it runs the same conditional
UPDATE ... RETURNING and the inserts inside one BEGIN IMMEDIATE transaction, which
holds the database's single write lock from the first statement to the commit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import RowMapping, func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from server.db import tables as t


@dataclass(frozen=True)
class ClaimRequest:
    run_id: str
    actor_id: str
    actor_kind: str
    executor: dict[str, str]
    lease_seconds: int
    artifact_root_uri: str
    task_id: str | None = None  # claim this task; None = claim the best eligible one
    operation: str | None = None
    repo_prefix: str | None = None


@dataclass(frozen=True)
class Claimed:
    task_id: str
    issue_id: str | None
    trace_id: str
    attempt: int
    lease_expires_at: datetime


def _like_prefix(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


# {filters} is built from fixed strings only; every value is a bound parameter.
_PG_CLAIM = """
WITH picked AS (
    {picked}
),
claimed AS (
    -- The claim itself. Re-checking status makes a claim-by-id lose cleanly to a concurrent winner.
    UPDATE tasks SET status = 'running', claimed_at = now(), active_run_id = :run_id
    FROM picked
    WHERE tasks.id = picked.id AND tasks.status = 'queued'
    RETURNING tasks.id, tasks.issue_id, tasks.trace_id, tasks.attempts
),
run AS (
    -- The run that holds the lease; the attempt number counts penalised attempts so far.
    INSERT INTO runs (id, task_id, issue_id, mode, executor, actor_id, status, attempt,
                      lease_expires_at, started_at, artifact_root_uri)
    SELECT :run_id, claimed.id, claimed.issue_id, 'agent', CAST(:executor AS jsonb), :actor_id, 'running',
           claimed.attempts + 1, now() + make_interval(secs => :lease_seconds), now(), :artifact_root_uri
    FROM claimed
    RETURNING lease_expires_at, attempt
),
issue AS (
    -- The issue follows its task into work.
    UPDATE issues SET status = 'running', updated_at = now()
    FROM claimed
    WHERE issues.id = claimed.issue_id
    RETURNING issues.id
),
audit AS (
    -- One row per state change, in the same statement as the change.
    INSERT INTO audit_log (ts, actor_kind, actor_id, action, entity_kind, entity_id, before, after, trace_id)
    SELECT now(), :actor_kind, :actor_id, 'task.claimed', 'Task', claimed.id,
           '{{"status": "queued"}}'::jsonb,
           jsonb_build_object('status', 'running', 'run_id', CAST(:run_id AS text)), claimed.trace_id
    FROM claimed
    UNION ALL
    SELECT now(), :actor_kind, :actor_id, 'issue.running', 'Issue', issue.id,
           '{{"status": "ready"}}'::jsonb, '{{"status": "running"}}'::jsonb, claimed.trace_id
    FROM issue, claimed
)
SELECT claimed.id, claimed.issue_id, claimed.trace_id, run.attempt, run.lease_expires_at
FROM claimed, run
"""

# Claim-next: the best queued task that no concurrent claimer has locked. SKIP LOCKED
# makes a busy queue hand different tasks to different agents instead of a queue of waiters.
_PG_PICK_NEXT = """
    SELECT id FROM tasks
    WHERE status = 'queued'{filters}
    ORDER BY priority, queued_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED"""

# Claim-by-id: that task, only while queued. No SKIP LOCKED: a concurrent claimer makes us
# wait for its commit, and then the status check in `claimed` fails.
_PG_PICK_ONE = """
    SELECT id FROM tasks WHERE id = :task_id AND status = 'queued' FOR UPDATE"""


async def claim_postgres(conn: AsyncConnection, req: ClaimRequest) -> Claimed | None:
    params: dict[str, object] = {
        "run_id": req.run_id,
        "actor_id": req.actor_id,
        "actor_kind": req.actor_kind,
        "executor": json.dumps(req.executor),
        "lease_seconds": float(req.lease_seconds),
        "artifact_root_uri": req.artifact_root_uri,
    }
    if req.task_id is not None:
        picked = _PG_PICK_ONE
        params["task_id"] = req.task_id
    else:
        filters = ""
        if req.operation is not None:
            filters += " AND operation = :operation"
            params["operation"] = req.operation
        if req.repo_prefix is not None:
            filters += " AND target_repo LIKE :repo_prefix ESCAPE '\\'"
            params["repo_prefix"] = _like_prefix(req.repo_prefix)
        picked = _PG_PICK_NEXT.format(filters=filters)
    row = (await conn.execute(text(_PG_CLAIM.format(picked=picked)), params)).mappings().first()
    return None if row is None else _claimed(row)


async def claim_sqlite(conn: AsyncConnection, req: ClaimRequest) -> Claimed | None:
    """Inside BEGIN IMMEDIATE: the conditional UPDATE decides, the inserts ride the same transaction."""
    now = datetime.now(UTC)
    if req.task_id is not None:
        condition = t.tasks.c.id == req.task_id
    else:
        best = select(t.tasks.c.id).where(t.tasks.c.status == "queued")
        if req.operation is not None:
            best = best.where(t.tasks.c.operation == req.operation)
        if req.repo_prefix is not None:
            # Not LIKE: SQLite's LIKE ignores ASCII case, PostgreSQL's does not. substr() compares exactly.
            best = best.where(func.substr(t.tasks.c.target_repo, 1, len(req.repo_prefix)) == req.repo_prefix)
        best = best.order_by(t.tasks.c.priority, t.tasks.c.queued_at, t.tasks.c.id).limit(1)
        condition = t.tasks.c.id == best.scalar_subquery()
    claimed = (
        (
            await conn.execute(
                update(t.tasks)
                .where(condition, t.tasks.c.status == "queued")
                .values(status="running", claimed_at=now, active_run_id=req.run_id)
                .returning(t.tasks.c.id, t.tasks.c.issue_id, t.tasks.c.trace_id, t.tasks.c.attempts)
            )
        )
        .mappings()
        .first()
    )
    if claimed is None:
        return None
    lease_expires_at = now + timedelta(seconds=req.lease_seconds)
    attempt = claimed["attempts"] + 1
    await conn.execute(
        insert(t.runs).values(
            id=req.run_id,
            task_id=claimed["id"],
            issue_id=claimed["issue_id"],
            mode="agent",
            executor=req.executor,
            actor_id=req.actor_id,
            status="running",
            attempt=attempt,
            lease_expires_at=lease_expires_at,
            started_at=now,
            artifact_root_uri=req.artifact_root_uri,
        )
    )
    audit = [
        _audit(now, req, "task.claimed", "Task", claimed["id"], {"status": "queued"}, claimed["trace_id"]),
    ]
    if claimed["issue_id"] is not None:
        await conn.execute(
            update(t.issues).where(t.issues.c.id == claimed["issue_id"]).values(status="running", updated_at=now)
        )
        audit.append(_audit(now, req, "issue.running", "Issue", claimed["issue_id"], None, claimed["trace_id"]))
    await conn.execute(insert(t.audit_log).values(audit))
    return Claimed(claimed["id"], claimed["issue_id"], claimed["trace_id"], attempt, lease_expires_at)


def _audit(
    now: datetime, req: ClaimRequest, action: str, kind: str, entity_id: str, before: object, trace_id: str
) -> dict[str, object]:
    if kind == "Task":
        after: dict[str, str] = {"status": "running", "run_id": req.run_id}
    else:
        before, after = {"status": "ready"}, {"status": "running"}
    return {
        "ts": now,
        "actor_kind": req.actor_kind,
        "actor_id": req.actor_id,
        "action": action,
        "entity_kind": kind,
        "entity_id": entity_id,
        "before": before,
        "after": after,
        "trace_id": trace_id,
    }


def _claimed(row: RowMapping) -> Claimed:
    expires: datetime = row["lease_expires_at"]
    return Claimed(str(row["id"]), row["issue_id"], str(row["trace_id"]), int(row["attempt"]), expires.astimezone(UTC))
