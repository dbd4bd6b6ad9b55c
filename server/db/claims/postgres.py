"""The claim on PostgreSQL: one CTE per claim, and the walk past tasks whose touches a holder holds (the
package docstring says why it holds at READ COMMITTED)."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncConnection

from server.db import holds, queries
from server.db.claims.request import (
    BRIEFING_SQL,
    DECISIONS_SHOWN,
    TASK_COLUMNS,
    WALK_BATCH,
    WITHIN_BUDGET,
    ClaimCapReached,
    ClaimRequest,
    next_filters,
)

# {filters} is built from fixed strings only; every value is a bound parameter.
_PG_CLAIM = """
WITH picked AS (
    {picked}
),
claimed AS (
    -- The claim itself. Re-checking status makes a claim-by-id lose cleanly to a concurrent winner. The first
    -- try takes only a task without touches (one with touches is checked against its repository's holders).
    UPDATE tasks SET status = 'running', claimed_at = now(), active_run_id = :run_id
    FROM picked
    WHERE tasks.id = picked.id AND tasks.status = 'queued'{untouched}
    RETURNING {task_columns}
),
run AS (
    -- The run that holds the lease; its attempt is its number among the task's runs (1, 2 after a
    -- needs_changes round or an expiry), the number its page shows.
    -- It records who claimed: the agent, its principal and its connection (the fence checks them).
    INSERT INTO runs (id, task_id, issue_id, mode, executor, actor_id, principal, claim_session, claim_key, status,
                      attempt, lease_expires_at, started_at, budget_ends_at, artifact_root_uri)
    SELECT :run_id, claimed.id, claimed.issue_id, 'agent', CAST(:executor AS jsonb), :actor_id, :principal,
           CAST(:claim_session AS varchar), CAST(:claim_key AS varchar), 'running',
           CAST((SELECT count(*) FROM runs prior WHERE prior.task_id = claimed.id) + 1 AS integer),
           now() + make_interval(secs => :lease_seconds), now(),
           now() + make_interval(secs => claimed.time_budget_seconds), :artifact_root_uri
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
-- The briefing rides back with the claim: no second round trip. A mission's task also gets the decisions made
-- in its mission so far, newest first (none for a task of no mission: the subquery finds no mission_id).
SELECT claimed.*, run.attempt, run.lease_expires_at, {briefing_columns},
    (SELECT coalesce(jsonb_agg(jsonb_build_object('data', d.data, 'task_id', d.task_id, 'run_id', d.run_id,
                                                  'at', d.created_at) ORDER BY d.id DESC), '[]'::jsonb)
     FROM (SELECT e.id, e.data, r.task_id, e.run_id, e.created_at
           FROM tasks mt JOIN runs r ON r.task_id = mt.id JOIN run_events e ON e.run_id = r.id
           WHERE mt.mission_id = claimed.mission_id AND e.kind = 'decision'
           ORDER BY e.id DESC LIMIT {decisions}) d) AS decisions
FROM claimed CROSS JOIN run
LEFT JOIN LATERAL (
    SELECT * FROM context_packets p WHERE p.issue_id = claimed.issue_id ORDER BY p.version DESC LIMIT 1
) packet ON true
LEFT JOIN constraint_snapshots snapshot ON snapshot.id = claimed.constraint_snapshot_id
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
_PG_PICK_ONE = f"""
    SELECT id FROM tasks WHERE id = :task_id AND status = 'queued'{WITHIN_BUDGET} FOR UPDATE"""

# Claim-by-id of a task with touches: its repository and touches, the row held as _PG_PICK_ONE holds it.
_PG_TOUCHING_ONE = (
    f"SELECT target_repo, touches FROM tasks WHERE id = :task_id AND status = 'queued'{WITHIN_BUDGET} FOR UPDATE"
)

# The walk of claim-next past a task with touches: the queued tasks in claim order, a batch at a time from the
# last one seen, read without locking (only the one claimed is locked, by _PG_PICK_SEEN).
_PG_CANDIDATES = """
    SELECT id, target_repo, touches, priority, queued_at FROM tasks
    WHERE status = 'queued'{filters}{after}
    ORDER BY priority, queued_at, id
    LIMIT {batch}"""
_AFTER = " AND (priority, queued_at, id) > (:after_priority, :after_queued_at, :after_id)"

# A task the walk chose, unless a concurrent claimer holds it or took it meanwhile.
_PG_PICK_SEEN = f"""
    SELECT id FROM tasks WHERE id = :task_id AND status = 'queued'{WITHIN_BUDGET} FOR UPDATE SKIP LOCKED"""


async def claim_postgres(conn: AsyncConnection, req: ClaimRequest) -> dict[str, Any] | None:
    if req.max_claims is not None:
        # One principal's claims queue here until commit, so two of them cannot both pass the cap.
        await queries.lock_principal(conn, req.actor_id)
        held = await queries.count_running_claims(conn, req.actor_id)
        if held >= req.max_claims:
            raise ClaimCapReached(held)
    params: dict[str, object] = {
        "run_id": req.run_id,
        "actor_id": req.actor_id,
        "principal": req.principal,
        "claim_session": req.claim_session,
        "claim_key": req.claim_key,
        "actor_kind": req.actor_kind,
        "executor": json.dumps(req.executor),
        "lease_seconds": float(req.lease_seconds),
        "artifact_root_uri": req.artifact_root_uri,
    }
    if req.task_id is not None:
        params["task_id"] = req.task_id
        row = await _claim_picked(conn, _PG_PICK_ONE, params, untouched=True)
        return row if row is not None else await _claim_one_touching(conn, req.task_id, params)
    filters, values = next_filters(req, sqlite=False)
    params |= values
    row = await _claim_picked(conn, _PG_PICK_NEXT.format(filters=filters), params, untouched=True)
    return row if row is not None else await _walk_postgres(conn, filters, params)


async def _claim_picked(
    conn: AsyncConnection, picked: str, params: dict[str, object], *, untouched: bool
) -> dict[str, Any] | None:
    """The claim statement on the task `picked` selects; with `untouched`, only if it has no touches."""
    row = (await conn.execute(_claim_statement(picked, untouched), params)).mappings().first()
    return None if row is None else dict(row)


@lru_cache(maxsize=64)
def _claim_statement(picked: str, untouched: bool) -> TextClause:
    """Built once per shape (a few pickers, the filters' few combinations): `text()` parses the whole statement for
    its parameters, and SQLAlchemy memoizes a statement's cache key on the object, so a new one costs both again."""
    sql = _PG_CLAIM.format(
        picked=picked,
        untouched=" AND tasks.touches IS NULL" if untouched else "",
        task_columns=", ".join(f"tasks.{c}" for c in TASK_COLUMNS),
        briefing_columns=BRIEFING_SQL,
        decisions=DECISIONS_SHOWN,
    )
    return text(sql)


async def _claim_one_touching(conn: AsyncConnection, task_id: str, params: dict[str, object]) -> dict[str, Any] | None:
    """Claim-by-id of a task with touches: waits for its repository's lock, then claims it unless a holder's
    touches overlap (ClaimConflict)."""
    task = (await conn.execute(text(_PG_TOUCHING_ONE), {"task_id": task_id})).mappings().first()
    if task is None or not task["touches"]:
        return None  # not queued (a task without touches was the first try's to take)
    holders = await holds.held_postgres(conn, task["target_repo"], wait=True)
    assert holders is not None
    conflict = holds.first_conflict(task_id, task["touches"], holders)
    if conflict is not None:
        raise holds.ClaimConflict(task_id, conflict)
    return await _claim_picked(conn, _PG_PICK_ONE, params, untouched=False)


async def _walk_postgres(conn: AsyncConnection, filters: str, params: dict[str, object]) -> dict[str, Any] | None:
    """Claim-next past a task with touches: the first queued task in claim order without touches, or whose
    touches overlap none held on its repository, read under the repository's lock (see the package docstring)."""
    held: dict[str, list[holds.Holder] | None] = {}  # per repository; None: its lock is held elsewhere
    after = ""
    while True:
        sql = _PG_CANDIDATES.format(filters=filters, after=after, batch=WALK_BATCH)
        batch = (await conn.execute(text(sql), params)).mappings().all()
        for task in batch:
            if task["touches"]:
                repo = task["target_repo"]
                if repo not in held:
                    held[repo] = await holds.held_postgres(conn, repo, wait=False)
                holders = held[repo]
                if holders is None or holds.first_conflict(task["id"], task["touches"], holders) is not None:
                    continue
            row = await _claim_picked(conn, _PG_PICK_SEEN, params | {"task_id": task["id"]}, untouched=False)
            if row is not None:
                return row
        if len(batch) < WALK_BATCH:
            return None
        last = batch[-1]
        params = params | {
            "after_priority": last["priority"],
            "after_queued_at": last["queued_at"],
            "after_id": last["id"],
        }
        after = _AFTER
