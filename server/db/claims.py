"""The claim: one atomic statement per dialect (DESIGN section 3).

PostgreSQL does the whole claim in one CTE: pick (or check) the task, flip it to
running, create the run that holds the lease, move the issue, and write both audit
rows. SQLite cannot put DML in a CTE, so it runs the same conditional
UPDATE ... RETURNING and the inserts inside one BEGIN IMMEDIATE transaction, which
holds the database's single write lock from the first statement to the commit.

`claim` is the one way in, for both: the dialect fork is there and nowhere else.

Touches (DESIGN section 16). A claim never hands out a task whose touches overlap those of a task that holds
its own on the same repository (server/db/holds.py says who holds). A task without touches is never held back
and holds nothing, so a claim first tries the task in line as before, in one statement, taking it only if it
has no touches; only when that task has touches does the claim walk on, in the same transaction:

- SQLite: BEGIN IMMEDIATE admits one claimer at a time, so the walk reads the queued tasks in claim order and
  takes the first with no touches or none that overlap its repository's holders, read in the same transaction.
- PostgreSQL: claim-next reads the queued tasks in claim order without locking them; for one with touches it
  takes the repository's transaction-scoped advisory lock with pg_try_advisory_xact_lock (never waiting, so
  claims cannot deadlock on it: a lock held elsewhere skips the repository's tasks, as SKIP LOCKED skips rows),
  then reads the repository's holders and, if none overlaps, claims the task (its row FOR UPDATE SKIP LOCKED,
  its status checked again) before the commit releases the lock. Claim-by-id holds one task's row and may
  wait for its repository's lock. Why this holds at READ COMMITTED: a task only starts holding its touches
  by being claimed (it then stays a holder until it ends or its work is merged; touches never change), and
  every claim of a task with touches makes that change under its repository's lock. The lock is released
  only when its transaction ends, after the commit is visible to every new snapshot; the next holder reads the
  holders in a statement after the one that took the lock, so with a snapshot that sees every claim made
  under the lock before. Two overlapping tasks of one repository can therefore not both pass the check. A
  holder that ends meanwhile may still be seen: the task waits one claim longer, never the other way round.

The walk costs what it passes over: each queued task held back ahead of the one taken is read once, and each
repository's holders once per claim (through ix_tasks_holding_touches, as many rows as there are holders).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.ext.asyncio import AsyncConnection

from server.db import holds, queries, rawsqlite
from server.db import tables as t
from server.db.engine import Database


@dataclass(frozen=True)
class ClaimRequest:
    run_id: str
    actor_id: str
    principal: str
    claim_session: str | None
    actor_kind: str
    executor: dict[str, str]
    lease_seconds: float
    artifact_root_uri: str
    task_id: str | None = None  # claim this task; None = claim the best eligible one
    operation: str | None = None
    repo_prefix: str | None = None
    # With tokens on, the most running claims one principal may hold (JCT_MAX_CLAIMS_PER_AGENT); None: no cap.
    max_claims: int | None = None
    # The SHA-256 of the claim key the caller gets with its run_id (no tokens); None with tokens.
    claim_key: str | None = None


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
    "touches",
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


# A mission's budget is spent once what its runs reported reaches either limit (NULL: no limit, never true).
# Both sums move in the transaction of each report (server/db/changes.py Spend).
SPENT = "(m.spent_cost_usd >= m.max_cost_usd OR m.spent_tokens >= m.max_tokens)"

# Not a task of a mission whose budget is spent: such tasks are passed over, never handed out. A scalar subquery,
# not NOT EXISTS: PostgreSQL turns that into a hashed subplan that reads every spent mission on each claim; this is
# one primary-key read per mission task the claim looks at (none for a task of no mission). NULL (no limit) is
# not spent.
WITHIN_BUDGET = (
    f" AND (tasks.mission_id IS NULL OR (SELECT {SPENT} FROM missions m WHERE m.id = tasks.mission_id) IS NOT TRUE)"
)


def _like_prefix(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def _next_filters(req: ClaimRequest, *, sqlite: bool) -> tuple[str, dict[str, Any]]:
    """Claim-next's conditions after `status = 'queued'`, from fixed strings only, and their bound values."""
    filters, values = _asked(req.operation, req.repo_prefix, sqlite=sqlite)
    return WITHIN_BUDGET + filters, values


def _asked(operation: str | None, repo_prefix: str | None, *, sqlite: bool) -> tuple[str, dict[str, Any]]:
    """The conditions a claim-next's filters add, and their bound values."""
    filters = ""
    values: dict[str, Any] = {}
    if operation is not None:
        filters += " AND tasks.operation = :operation"
        values["operation"] = operation
    if repo_prefix is None:
        return filters, values
    if sqlite:
        # Not LIKE: SQLite's LIKE ignores ASCII case, PostgreSQL's does not. substr() compares exactly.
        filters += " AND substr(tasks.target_repo, 1, :prefix_length) = :repo_prefix"
        return filters, values | {"prefix_length": len(repo_prefix), "repo_prefix": repo_prefix}
    filters += " AND tasks.target_repo LIKE :repo_prefix ESCAPE '\\'"
    return filters, values | {"repo_prefix": _like_prefix(repo_prefix)}


# What a refused claim names, read only when a claim found nothing: first the active missions whose budget is
# spent (ix_missions_status_created_at_id: the active ones, none to read further in the usual case), then among
# their queued tasks the one the claim would have taken, with its mission and how many of its tasks wait.
_SPENT_MISSIONS = f"SELECT m.id FROM missions m WHERE m.status = 'active' AND {SPENT} LIMIT 1000"
_HELD_BY_BUDGET = """
SELECT m.id, m.title, m.max_cost_usd, m.max_tokens, m.spent_cost_usd, m.spent_tokens,
       (SELECT count(*) FROM tasks w WHERE w.mission_id = m.id AND w.status = 'queued') AS waiting
FROM tasks JOIN missions m ON m.id = tasks.mission_id
WHERE tasks.mission_id IN :spent AND tasks.status = 'queued'{filters}
ORDER BY tasks.priority, tasks.queued_at, tasks.id
LIMIT 1"""


async def held_by_budget(
    conn: AsyncConnection, *, task_id: str | None = None, operation: str | None = None, repo_prefix: str | None = None
) -> dict[str, Any] | None:
    """Why a claim found nothing, when it is a spent budget: the mission (id, title, budget, spending, tasks
    waiting) that holds back the task `task_id`, or else the first queued task the claim-next filters match."""
    spent = [row[0] for row in (await conn.execute(text(_SPENT_MISSIONS))).all()]
    if not spent:
        return None
    if task_id is not None:
        filters, values = " AND tasks.id = :task_id", {"task_id": task_id}
    else:
        filters, values = _asked(operation, repo_prefix, sqlite=conn.dialect.name == "sqlite")
    query = text(_HELD_BY_BUDGET.format(filters=filters)).bindparams(bindparam("spent", expanding=True))
    row = (await conn.execute(query, values | {"spent": spent})).mappings().first()
    return None if row is None else dict(row)


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

# Queued tasks the walk reads at a time.
WALK_BATCH = 64


class ClaimCapReached(Exception):
    """The principal already holds `held` running claims, `ClaimRequest.max_claims` or more: nothing was claimed."""

    def __init__(self, held: int) -> None:
        super().__init__(f"{held} claims held")
        self.held = held


async def claim(db: Database, req: ClaimRequest) -> dict[str, Any] | None:
    """The claim, whichever the database: the flat claimed row (task, run, briefing), or None when nothing
    was claimable. Raises ClaimCapReached, having claimed nothing, when the cap of `req.max_claims` is met, and
    holds.ClaimConflict when the task claimed by id overlaps a holder's touches.

    The one dialect fork of the claim. PostgreSQL: one statement in an ordinary transaction (a few more past a
    task with touches, in the same transaction: see the module docstring). SQLite: the
    whole BEGIN IMMEDIATE transaction as ONE call on aiosqlite's thread, which pays against the same steps
    through SQLAlchemy (several thread hops per statement): the figures are in bench/README.md."""
    if db.is_sqlite:
        return await db.write_in_one_call(partial(claim_on_sqlite_thread, req=req))
    async with db.write() as conn:
        return await _claim_postgres(conn, req)


async def _claim_postgres(conn: AsyncConnection, req: ClaimRequest) -> dict[str, Any] | None:
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
    filters, values = _next_filters(req, sqlite=False)
    params |= values
    row = await _claim_picked(conn, _PG_PICK_NEXT.format(filters=filters), params, untouched=True)
    return row if row is not None else await _walk_postgres(conn, filters, params)


async def _claim_picked(
    conn: AsyncConnection, picked: str, params: dict[str, object], *, untouched: bool
) -> dict[str, Any] | None:
    """The claim statement on the task `picked` selects; with `untouched`, only if it has no touches."""
    sql = _PG_CLAIM.format(
        picked=picked,
        untouched=" AND tasks.touches IS NULL" if untouched else "",
        task_columns=", ".join(f"tasks.{c}" for c in TASK_COLUMNS),
        briefing_columns=BRIEFING_SQL,
        decisions=DECISIONS_SHOWN,
    )
    row = (await conn.execute(text(sql), params)).mappings().first()
    return None if row is None else dict(row)


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
    touches overlap none held on its repository, read under the repository's lock (see the module docstring)."""
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


def claim_on_sqlite_thread(db: sqlite3.Connection, req: ClaimRequest) -> dict[str, Any] | None:
    """The claim's statements in plain sqlite3, on aiosqlite's thread inside BEGIN IMMEDIATE, which holds the
    database's single write lock from the first statement to the commit: the PostgreSQL statement's steps,
    one by one. Values are stored through the column types (server/db/rawsqlite.py)."""
    now = rawsqlite.server_now()
    if req.max_claims is not None:
        # BEGIN IMMEDIATE already serialises every claim: the count cannot move before the commit.
        held = db.execute(
            "SELECT count(*) FROM runs WHERE actor_id = ? AND status = 'running'", (req.actor_id,)
        ).fetchone()[0]
        if held >= req.max_claims:
            raise ClaimCapReached(int(held))
    params: dict[str, Any] = rawsqlite.encode(t.tasks, {"claimed_at": now}) | {"run_id": req.run_id}
    if req.task_id is not None:
        # Claim-by-id: that task, only while queued and its mission's budget is not spent.
        target = f"id = :task_id{WITHIN_BUDGET}"
        params["task_id"] = req.task_id
    else:
        # Claim-next: the best queued task (no SKIP LOCKED to need: the write lock admits one claimer at a time).
        filters, values = _next_filters(req, sqlite=True)
        params |= values
        target = (
            f"id = (SELECT id FROM tasks WHERE status = 'queued'{filters} ORDER BY priority, queued_at, id LIMIT 1)"
        )
    # The first try takes the task only if it has no touches: one statement, as before touches.
    claimed = _update_sqlite(db, f"{target} AND touches IS NULL", params)
    if claimed is None:
        # It has touches (or there is none): the first task in line that overlaps no holder's.
        task_id = _touching_sqlite(db, req)
        if task_id is None:
            return None
        claimed = _update_sqlite(db, "id = :chosen", params | {"chosen": task_id})
        assert claimed is not None, "read as queued in this transaction"
    lease_expires_at = now + timedelta(seconds=req.lease_seconds)
    # The run that holds the lease; its attempt is its number among the task's runs (see the PostgreSQL statement).
    attempt = int(db.execute("SELECT count(*) FROM runs WHERE task_id = ?", (claimed["id"],)).fetchone()[0]) + 1
    run = {
        "id": req.run_id,
        "task_id": claimed["id"],
        "issue_id": claimed["issue_id"],
        "mode": "agent",
        "executor": req.executor,
        "actor_id": req.actor_id,
        "principal": req.principal,
        "claim_session": req.claim_session,
        "claim_key": req.claim_key,
        "status": "running",
        "attempt": attempt,
        "lease_expires_at": lease_expires_at,
        "started_at": now,
        "budget_ends_at": now + timedelta(seconds=int(claimed["time_budget_seconds"])),
        "artifact_root_uri": req.artifact_root_uri,
    }
    rawsqlite.insert(db, t.runs, [run])
    # One audit row per state change, in the same transaction as the change.
    audit = [_audit(req, now, "task.claimed", "Task", claimed["id"], {"status": "queued"}, claimed["trace_id"])]
    if claimed["issue_id"] is not None:
        # The issue follows its task into work.
        rawsqlite.update(db, t.issues, claimed["issue_id"], {"status": "running", "updated_at": now}, None)
        audit.append(_audit(req, now, "issue.running", "Issue", claimed["issue_id"], None, claimed["trace_id"]))
    rawsqlite.insert(db, t.audit_log, audit)
    # The briefing rides back with the claim: the issue's latest context packet and the task's constraints.
    packet = rawsqlite.fetch_one(
        db,
        t.context_packets,
        f"SELECT {', '.join(PACKET_COLUMNS)} FROM context_packets WHERE issue_id = :issue_id "
        "ORDER BY version DESC LIMIT 1",
        {"issue_id": claimed["issue_id"]},
    )
    snapshot = rawsqlite.fetch_one(
        db,
        t.constraint_snapshots,
        f"SELECT {', '.join(SNAPSHOT_COLUMNS)} FROM constraint_snapshots WHERE id = :id",
        {"id": claimed["constraint_snapshot_id"]},
    )
    briefing = {f"packet_{c}": (packet or {}).get(c) for c in PACKET_COLUMNS}
    briefing |= {f"snapshot_{c}": (snapshot or {}).get(c) for c in SNAPSHOT_COLUMNS}
    decisions = _decisions_sqlite(db, claimed["mission_id"])
    return claimed | briefing | {"attempt": attempt, "lease_expires_at": lease_expires_at, "decisions": decisions}


def _update_sqlite(db: sqlite3.Connection, target: str, params: dict[str, Any]) -> dict[str, Any] | None:
    # The claim itself: the status check makes a claim of a task no longer queued match nothing.
    return rawsqlite.fetch_one(
        db,
        t.tasks,
        f"UPDATE tasks SET status = 'running', claimed_at = :claimed_at, active_run_id = :run_id "
        f"WHERE {target} AND status = 'queued' RETURNING {', '.join(TASK_COLUMNS)}",
        params,
    )


def _touching_sqlite(db: sqlite3.Connection, req: ClaimRequest) -> str | None:
    """The task to claim past a first try that found one with touches: claim-by-id's own task unless a holder's
    touches overlap (ClaimConflict); claim-next's first queued task in claim order with no touches or none that
    overlap, each repository's holders read once. BEGIN IMMEDIATE keeps all of it true until the commit."""
    if req.task_id is not None:
        task = rawsqlite.fetch_one(
            db,
            t.tasks,
            f"SELECT target_repo, touches FROM tasks WHERE id = :task_id AND status = 'queued'{WITHIN_BUDGET}",
            {"task_id": req.task_id},
        )
        if task is None or not task["touches"]:
            return None
        conflict = holds.first_conflict(req.task_id, task["touches"], holds.held_sqlite(db, task["target_repo"]))
        if conflict is not None:
            raise holds.ClaimConflict(req.task_id, conflict)
        return req.task_id
    filters, values = _next_filters(req, sqlite=True)
    cursor = db.execute(
        f"SELECT id, target_repo, touches FROM tasks WHERE status = 'queued'{filters} ORDER BY priority, queued_at, id",
        values,
    )
    held: dict[str, list[holds.Holder]] = {}
    try:
        while batch := cursor.fetchmany(WALK_BATCH):
            for task_id, repo, stored in batch:
                touches = rawsqlite.decode(t.tasks, {"touches": stored})["touches"]
                if not touches:
                    return str(task_id)
                if repo not in held:
                    held[repo] = holds.held_sqlite(db, repo)
                if holds.first_conflict(task_id, touches, held[repo]) is None:
                    return str(task_id)
    finally:
        cursor.close()
    return None


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


def _audit(
    req: ClaimRequest, now: datetime, action: str, kind: str, entity_id: str, before: object, trace_id: str
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
