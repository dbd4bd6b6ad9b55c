"""Touches held on a repository (DESIGN section 16): what a claim of a task with touches checks it against.

A task holds its touches while it is running and while its work waits for review or in the merge queue (`merge`
pending, queued or merging): server/db/tables.py HOLDING. The claim (server/db/claims/) reads a repository's
holders here and hands out a task only if none of them overlaps it (server/touches.py).

On PostgreSQL the read comes after a transaction-scoped advisory lock on the repository, taken in a statement
of its own, so the claims of tasks with touches on one repository are serialised; the reasoning is in
server/db/claims/. SQLite's BEGIN IMMEDIATE serialises every claim already.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from server import touches
from server.db import rawsqlite
from server.db import tables as t

# Read through ix_tasks_holding_touches: its condition, word for word (a partial index is used only then).
_HELD = f"SELECT id, touches FROM tasks WHERE target_repo = :repo AND {t.HOLDING} ORDER BY id"

# The advisory locks of repositories live in the two-key space, under this first key: apart from the one-key
# locks of principals (server/db/queries.py lock_principal). The second key is hashtext(target_repo).
_LOCK_SPACE = 0x4A435431  # "JCT1"
_TRY_LOCK = "SELECT pg_try_advisory_xact_lock(:space, hashtext(:repo))"
_LOCK = "SELECT pg_advisory_xact_lock(:space, hashtext(:repo))"


@dataclass(frozen=True)
class Holder:
    task_id: str
    touches: tuple[str, ...]


@dataclass(frozen=True)
class Conflict:
    """The first holder a task's touches overlap, and the overlapping pairs (the task's, the holder's)."""

    holder: str
    pairs: tuple[tuple[str, str], ...]


class ClaimConflict(Exception):
    """A claim by id of a task whose touches overlap a holder's: nothing was claimed."""

    def __init__(self, task_id: str, conflict: Conflict) -> None:
        super().__init__(f"task {task_id} conflicts with task {conflict.holder}")
        self.task_id = task_id
        self.conflict = conflict


def first_conflict(task_id: str, task_touches: Sequence[str], holders: Sequence[Holder]) -> Conflict | None:
    """The first holder (other than the task itself) whose touches overlap the task's, or None."""
    for holder in holders:
        if holder.task_id == task_id:
            continue
        pairs = touches.conflicts(task_touches, holder.touches)
        if pairs:
            return Conflict(holder.task_id, tuple(pairs))
    return None


def _holders(rows: Sequence[Mapping[Any, Any]]) -> list[Holder]:
    held = []
    for row in rows:
        patterns = row["touches"]
        if isinstance(patterns, list) and patterns:
            held.append(Holder(str(row["id"]), tuple(str(p) for p in patterns)))
    return held


def held_sqlite(db: sqlite3.Connection, repo: str) -> list[Holder]:
    """The repository's holders, inside the claim's BEGIN IMMEDIATE (nothing can change them before its commit)."""
    return _holders(rawsqlite.fetch_all(db, t.tasks, _HELD, {"repo": repo}))


async def held_postgres(conn: AsyncConnection, repo: str, *, wait: bool) -> list[Holder] | None:
    """The repository's holders, read after taking its advisory lock for the rest of the transaction; None when
    `wait` is false and another transaction holds the lock (the caller skips the task, as SKIP LOCKED would)."""
    lock = {"space": _LOCK_SPACE, "repo": repo}
    if wait:
        await conn.execute(text(_LOCK), lock)
    elif not (await conn.execute(text(_TRY_LOCK), lock)).scalar_one():
        return None
    # A statement of its own, after the lock's: its snapshot sees every claim committed by an earlier holder.
    rows = (await conn.execute(text(_HELD), {"repo": repo})).mappings().all()
    return _holders(rows)
