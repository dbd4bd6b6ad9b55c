"""A fenced change on SQLite: the whole transaction as one call on aiosqlite's thread, in plain sqlite3."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

from server.db import leases, missions, queries, rawsqlite
from server.db import tables as t
from server.db.changes.writes import (
    ARTIFACT_FIELDS,
    TASK_FIELDS,
    Approve,
    Changed,
    Decide,
    Facts,
    Insert,
    NewVersion,
    R,
    RowMissed,
    Spend,
)
from server.db.leases import Fence
from server.db.records import CompletingTask, Reported, Run

# Adds a report's spending to its mission's sums (the Spend write) on SQLite.
_SPEND_SQLITE = (
    "UPDATE missions SET spent_tokens = spent_tokens + :tokens, spent_cost_usd = spent_cost_usd + :cost_usd "
    "WHERE id = :mission_id"
)


def change_sqlite(db: sqlite3.Connection, fence: Fence, decide: Decide[R], *, completion: bool) -> Changed[R] | None:
    """Inside Database.write_in_one_call: fence, facts, decide, write."""
    now = rawsqlite.server_now()
    run = leases.renew_sqlite(db, fence, now)
    if run is None:
        return None
    facts = _facts_sqlite(db, fence.task_id, run, now) if completion else _facts_of_run_sqlite(db, run)
    writes, result = decide(facts)
    inserted_id = None
    for write in writes:
        if isinstance(write, Insert):
            row_id = rawsqlite.insert(db, write.table, write.rows)
            if write.returns_id:
                inserted_id = row_id
        elif isinstance(write, Approve):
            approval = missions.approve_sqlite(db, write.task_id, rawsqlite.server_now())
            rawsqlite.insert(db, t.audit_log, queries.stamped(write.audit(approval)))
        elif isinstance(write, Spend):
            spend = {"mission_id": write.mission_id, "tokens": write.tokens, "cost_usd": write.cost_usd}
            db.execute(_SPEND_SQLITE, spend)
        elif isinstance(write, NewVersion):
            latest = rawsqlite.fetch_one(db, t.context_packets, _LATEST_PACKET, {"id": write.issue_id})
            assert latest is not None  # every issue starts with version 1
            rawsqlite.insert(db, t.context_packets, [write.packet(latest)])
        elif rawsqlite.update(db, write.table, write.row_id, write.values, write.status_in) is None and write.required:
            raise RowMissed(write.table.name, write.row_id)
    return Changed(result, inserted_id)


_LATEST_PACKET = "SELECT * FROM context_packets WHERE issue_id = :id ORDER BY version DESC LIMIT 1"


def _facts_of_run_sqlite(db: sqlite3.Connection, run: dict[str, Any]) -> Facts:
    cursor = db.execute(
        "SELECT trace_id, mission_id, (SELECT COALESCE(SUM(size_bytes), 0) FROM artifacts WHERE run_id = ?) "
        "FROM tasks WHERE id = ?",
        (run["id"], run["task_id"]),
    )
    trace_id, mission_id, stored = cursor.fetchone()
    return Facts(Run.of(run), trace_id, mission_id, stored_bytes=int(stored))


def _facts_sqlite(db: sqlite3.Connection, task_id: str, run: dict[str, Any], now: datetime) -> Facts:
    task_sql = f"SELECT {', '.join(TASK_FIELDS)} FROM tasks WHERE id = :id"
    row = rawsqlite.fetch_one(db, t.tasks, task_sql, {"id": task_id})
    assert row is not None  # the fenced run points at it
    task = CompletingTask.of(row)
    criteria: tuple[str, ...] = ()
    if task.issue_id is not None:
        packet = rawsqlite.fetch_one(
            db,
            t.context_packets,
            "SELECT acceptance_criteria FROM context_packets WHERE issue_id = :id ORDER BY version DESC LIMIT 1",
            {"id": task.issue_id},
        )
        criteria = tuple(packet["acceptance_criteria"]) if packet is not None else ()
    artifacts = rawsqlite.fetch_all(
        db,
        t.artifacts,
        f"SELECT {', '.join(ARTIFACT_FIELDS)} FROM artifacts WHERE run_id = :id ORDER BY created_at",
        {"id": run["id"]},
    )
    return Facts(
        Run.of(run),
        task.trace_id,
        task.mission_id,
        task=task,
        acceptance_criteria=criteria,
        artifacts=tuple(map(Reported.of, artifacts)),
        now=now,
    )
