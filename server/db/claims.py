"""The claim: one atomic statement per dialect (DESIGN section 3).

PostgreSQL does the whole claim in one CTE: pick (or check) the task, flip it to
running, create the run that holds the lease, move the issue, and write both audit
rows. SQLite cannot put DML in a CTE, so it runs the same conditional
UPDATE ... RETURNING and the inserts inside one BEGIN IMMEDIATE transaction, which
holds the database's single write lock from the first statement to the commit.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from server.db import rawsqlite
from server.db import tables as t


@dataclass(frozen=True)
class ClaimRequest:
    run_id: str
    actor_id: str
    principal: str
    claim_session: str | None
    actor_kind: str
    executor: dict[str, str]
    lease_seconds: int
    artifact_root_uri: str
    task_id: str | None = None  # claim this task; None = claim the best eligible one
    operation: str | None = None
    repo_prefix: str | None = None


# How many of its mission's decisions a claim of a mission's task carries, newest first.
DECISIONS_SHOWN = 10

# What a claim hands back: the task's columns, the run's attempt and lease, and the briefing
# (latest context packet and constraint snapshot, prefixed), in one flat row.
TASK_COLUMNS = (
    "id",
    "issue_id",
    "trace_id",
    "attempts",
    "objective",
    "operation",
    "target_repo",
    "target_ref",
    "target_path",
    "time_budget_seconds",
    "constraint_snapshot_id",
    "active_run_id",
    "mission_id",
)
PACKET_COLUMNS = (
    "id",
    "version",
    "summary",
    "prior_art",
    "files_of_interest",
    "acceptance_criteria",
    "data",
    "review_feedback",
)
SNAPSHOT_COLUMNS = ("id", "scope", "time_budget_seconds", "allow_network", "allow_secrets", "allowed_paths")
BRIEFING_SQL = ", ".join(
    [f"packet.{c} AS packet_{c}" for c in PACKET_COLUMNS] + [f"snapshot.{c} AS snapshot_{c}" for c in SNAPSHOT_COLUMNS]
)


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
    RETURNING {task_columns}
),
run AS (
    -- The run that holds the lease; its attempt is its number among the task's runs (1, 2 after a
    -- needs_changes round or an expiry), the number its page shows.
    -- It records who claimed: the agent, its principal and its connection (the fence checks them).
    INSERT INTO runs (id, task_id, issue_id, mode, executor, actor_id, principal, claim_session, status, attempt,
                      lease_expires_at, started_at, budget_ends_at, artifact_root_uri)
    SELECT :run_id, claimed.id, claimed.issue_id, 'agent', CAST(:executor AS jsonb), :actor_id, :principal,
           CAST(:claim_session AS varchar), 'running',
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
_PG_PICK_ONE = """
    SELECT id FROM tasks WHERE id = :task_id AND status = 'queued' FOR UPDATE"""


async def claim_postgres(conn: AsyncConnection, req: ClaimRequest) -> dict[str, Any] | None:
    params: dict[str, object] = {
        "run_id": req.run_id,
        "actor_id": req.actor_id,
        "principal": req.principal,
        "claim_session": req.claim_session,
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
    sql = _PG_CLAIM.format(
        picked=picked,
        task_columns=", ".join(f"tasks.{c}" for c in TASK_COLUMNS),
        briefing_columns=BRIEFING_SQL,
        decisions=DECISIONS_SHOWN,
    )
    row = (await conn.execute(text(sql), params)).mappings().first()
    return None if row is None else dict(row)


async def claim_sqlite(conn: AsyncConnection, req: ClaimRequest) -> dict[str, Any] | None:
    """Inside BEGIN IMMEDIATE: the conditional UPDATE decides, the inserts ride the same transaction.

    The whole claim runs as ONE call on aiosqlite's worker thread, with the sqlite3 connection
    SQLAlchemy has already begun the transaction on: five statements for the price of one thread
    hop (each SQLAlchemy execute would be a hop of its own). Values are stored exactly as the
    column types in server/db/types.py store them; tests read them back through SQLAlchemy.
    """
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    assert driver is not None
    row: dict[str, Any] | None = await driver._execute(claim_on_sqlite_thread, driver._conn, req)
    return row


def claim_on_sqlite_thread(db: sqlite3.Connection, req: ClaimRequest) -> dict[str, Any] | None:
    """The claim's statements, on aiosqlite's thread inside BEGIN IMMEDIATE: from claim_sqlite, or as
    the whole transaction through Database.write_in_one_call (one hop instead of three)."""
    now = datetime.now(UTC)
    stamp = rawsqlite.sqlite_time(now)
    params: list[Any] = [stamp, req.run_id]
    if req.task_id is not None:
        target = "id = ?"
        params.append(req.task_id)
    else:
        filters = ""
        if req.operation is not None:
            filters += " AND operation = ?"
            params.append(req.operation)
        if req.repo_prefix is not None:
            # Not LIKE: SQLite's LIKE ignores ASCII case, PostgreSQL's does not. substr() compares exactly.
            filters += " AND substr(target_repo, 1, ?) = ?"
            params += [len(req.repo_prefix), req.repo_prefix]
        target = (
            f"id = (SELECT id FROM tasks WHERE status = 'queued'{filters} ORDER BY priority, queued_at, id LIMIT 1)"
        )
    cursor = db.execute(
        f"UPDATE tasks SET status = 'running', claimed_at = ?, active_run_id = ? "
        f"WHERE {target} AND status = 'queued' RETURNING {', '.join(TASK_COLUMNS)}",
        params,
    )
    found = cursor.fetchone()
    if found is None:
        return None
    claimed = dict(zip(TASK_COLUMNS, found, strict=True))
    lease_expires_at = now + timedelta(seconds=req.lease_seconds)
    # The run's number among its task's runs (see the PostgreSQL statement).
    attempt = int(db.execute("SELECT count(*) FROM runs WHERE task_id = ?", (claimed["id"],)).fetchone()[0]) + 1
    db.execute(
        "INSERT INTO runs (id, task_id, issue_id, mode, executor, actor_id, principal, claim_session, status, "
        "attempt, lease_expires_at, started_at, budget_ends_at, artifact_root_uri) "
        "VALUES (?, ?, ?, 'agent', ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?)",
        (
            req.run_id,
            claimed["id"],
            claimed["issue_id"],
            json.dumps(req.executor),
            req.actor_id,
            req.principal,
            req.claim_session,
            attempt,
            rawsqlite.sqlite_time(lease_expires_at),
            stamp,
            rawsqlite.sqlite_time(now + timedelta(seconds=int(claimed["time_budget_seconds"]))),
            req.artifact_root_uri,
        ),
    )
    audit = [_audit(req, "task.claimed", "Task", claimed["id"], {"status": "queued"}, claimed["trace_id"])]
    if claimed["issue_id"] is not None:
        db.execute("UPDATE issues SET status = 'running', updated_at = ? WHERE id = ?", (stamp, claimed["issue_id"]))
        audit.append(_audit(req, "issue.running", "Issue", claimed["issue_id"], None, claimed["trace_id"]))
    db.executemany(
        "INSERT INTO audit_log (ts, actor_kind, actor_id, action, entity_kind, entity_id, before, after, trace_id) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                stamp,
                a["actor_kind"],
                a["actor_id"],
                a["action"],
                a["entity_kind"],
                a["entity_id"],
                json.dumps(a["before"]) if a["before"] is not None else None,
                json.dumps(a["after"]),
                a["trace_id"],
            )
            for a in audit
        ],
    )
    briefing = db.execute(
        f"SELECT {BRIEFING_SQL} FROM (SELECT 1) AS one "
        "LEFT JOIN (SELECT * FROM context_packets WHERE issue_id = ? ORDER BY version DESC LIMIT 1) AS packet "
        "ON 1 = 1 LEFT JOIN constraint_snapshots AS snapshot ON snapshot.id = ?",
        (claimed["issue_id"], claimed["constraint_snapshot_id"]),
    )
    names = [d[0] for d in briefing.description]
    row = dict(zip(names, briefing.fetchone(), strict=True))
    for name in _JSON_COLUMNS:
        row[name] = json.loads(row[name]) if row[name] is not None else None
    for name in ("snapshot_allow_network", "snapshot_allow_secrets"):
        row[name] = bool(row[name]) if row[name] is not None else None
    row["decisions"] = _decisions_sqlite(db, claimed["mission_id"])
    return claimed | row | {"attempt": attempt, "lease_expires_at": lease_expires_at}


def _decisions_sqlite(db: sqlite3.Connection, mission_id: str | None) -> list[dict[str, Any]]:
    """The decisions made in the mission so far, newest first (the PostgreSQL claim's `decisions`)."""
    if mission_id is None:
        return []
    rows = rawsqlite.fetch_all(
        db,
        t.run_events,
        "SELECT e.data, r.task_id, e.run_id, e.created_at "
        "FROM tasks mt JOIN runs r ON r.task_id = mt.id JOIN run_events e ON e.run_id = r.id "
        "WHERE mt.mission_id = :mission_id AND e.kind = 'decision' ORDER BY e.id DESC LIMIT :shown",
        {"mission_id": mission_id, "shown": DECISIONS_SHOWN},
    )
    return [
        {"data": row["data"], "task_id": row["task_id"], "run_id": row["run_id"], "at": row["created_at"]}
        for row in rows
    ]


_JSON_COLUMNS = (
    "packet_prior_art",
    "packet_files_of_interest",
    "packet_acceptance_criteria",
    "packet_data",
    "packet_review_feedback",
    "snapshot_allowed_paths",
)


def _audit(
    req: ClaimRequest, action: str, kind: str, entity_id: str, before: object, trace_id: str
) -> dict[str, object]:
    if kind == "Task":
        after: dict[str, str] = {"status": "running", "run_id": req.run_id}
    else:
        before, after = {"status": "ready"}, {"status": "running"}
    return {
        "actor_kind": req.actor_kind,
        "actor_id": req.actor_id,
        "action": action,
        "entity_kind": kind,
        "entity_id": entity_id,
        "before": before,
        "after": after,
        "trace_id": trace_id,
    }
