"""The claim on SQLite: the PostgreSQL statement's steps in plain sqlite3, on aiosqlite's thread inside one
BEGIN IMMEDIATE transaction."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from typing import Any

from server.db import holds, rawsqlite
from server.db import tables as t
from server.db.claims.request import (
    DECISIONS_SHOWN,
    PACKET_COLUMNS,
    SNAPSHOT_COLUMNS,
    TASK_COLUMNS,
    WALK_BATCH,
    WITHIN_BUDGET,
    ClaimCapReached,
    ClaimRequest,
    audit_row,
    next_filters,
)


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
        filters, values = next_filters(req, sqlite=True)
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
    audit = [audit_row(req, now, "task.claimed", "Task", claimed["id"], {"status": "queued"}, claimed["trace_id"])]
    if claimed["issue_id"] is not None:
        # The issue follows its task into work.
        rawsqlite.update(db, t.issues, claimed["issue_id"], {"status": "running", "updated_at": now}, None)
        audit.append(audit_row(req, now, "issue.running", "Issue", claimed["issue_id"], None, claimed["trace_id"]))
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
    filters, values = next_filters(req, sqlite=True)
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
