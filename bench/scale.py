"""Latency at scale: p50/p99 of the hot calls over MCP with 1k .. 1M tasks bulk-loaded, and their plans.

For each dialect and size, a fresh database (SQLite in a temp file; PostgreSQL a throwaway database) is
migrated and bulk-loaded with `load()` (mostly finished tasks with runs, evidence and a two-row-per-task
audit log, a working set of queued and running tasks, a few issues, and one mission per 100 tasks with
phases, dependencies and blocked tasks: see Rows), a server is started on it, and one
`mcp.Client` over streamable HTTP times each call in turn with `measure()`. The goal: every call's p50 at
the largest size within 1.5x of its p50 at the smallest. `explain()` runs each hot statement once through
the service code, captures the SQL it sends and prints the database's plan for it (EXPLAIN ANALYZE on
PostgreSQL, inside a rolled-back transaction; EXPLAIN QUERY PLAN on SQLite) with the scans it uses.

    python bench/scale.py                                    # both dialects, 1k and 1M tasks
    python bench/scale.py --sizes 1000,100000 --dialects sqlite --calls 100
    python bench/scale.py --sizes 1000000 --dialects postgresql --explain
    python bench/scale.py --sizes 1000,1000000 --explain --json out.json   # figures and plans as JSON too
    python bench/scale.py --no-missions                      # tasks only, the shape before missions
    python bench/scale.py --touches                          # tasks declare touches: the claim's walk

Importable (the overall bench suite calls these):
    await load(database_url, n)          -> Loaded (ids to probe, active missions, seconds taken)
    async with serving(database_url, home) as base_url: ...
    await measure(base_url, calls=200)   -> {call: Stat(p50_ms, p99_ms)}
    await explain(database_url)          -> [Plan(name, sql, plan, scans)]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import random
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import anyio
from mcp import Client
from pydantic import BaseModel
from sqlalchemy import event
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import add_database_arguments, admin, check_dialects, free_port, tool, wait_ready

from server.config import Settings, async_database_url
from server.core.claims import queue
from server.core.missions import status as mission_status
from server.core.models import Actor
from server.core.operators import observe
from server.core.service import Core
from server.db import counts, feed, queries
from server.db.claims import ClaimRequest
from server.db.claims.sqlite import _decisions_sqlite, claim_on_sqlite_thread
from server.db.engine import Database
from server.db.migrate import upgrade
from server.resources import listing as resource_listing

CHUNK = 50_000  # rows generated and written at a time: memory stays flat at any size
OPERATIONS = ("code_change", "docs", "analysis", "ops")
PRIORITIES = ("P0", "P1", "P2", "P3", "P4")
REPOS = tuple(f"myorg/service-{n}" for n in range(20))
BENCH_ACTOR = Actor(actor_id="bench", actor_kind="human", admin=True, session="bench")


# --- the data ----------------------------------------------------------------------------------


@dataclass
class Shape:
    """How n tasks are spread: the newest are queued or running, the rest ended long ago."""

    n: int
    queued: int
    running: int
    with_runs: int  # the newest finished tasks that get a run (and, if completed, an evidence pack)
    pending_reviews: int
    issues: int
    missions: int = 0  # of 10-100 tasks each (MISSION_SIZES), spread evenly over the n tasks
    touches: bool = False  # queued and running tasks declare one file they edit (see Rows)

    @classmethod
    def of(cls, n: int, *, missions: bool = True, touches: bool = False) -> Shape:
        queued = min(n // 2, max(500, n // 100))
        running = min(n // 10, max(50, n // 1000))
        with_runs = min(n - queued - running, max(200, n // 100))
        count = n // 100 if missions else 0  # 10 missions at 1k tasks, 10,000 at 1M
        return cls(n, queued, running, with_runs, min(with_runs // 4, 50), max(3, n // 100_000), count, touches)


@dataclass
class Loaded:
    n: int
    seconds: float
    task_ids: list[str] = field(default_factory=list)  # a sample of finished tasks (audit trails to read)
    audit_rows: int = 0
    mission_ids: list[str] = field(default_factory=list)  # active missions (their pages to read)
    missions: int = 0
    blocked: int = 0  # tasks loaded blocked (waiting for a dependency or an earlier phase)


TASK_COLUMNS = (
    "id",
    "operation",
    "objective",
    "target_repo",
    "target_ref",
    "target_path",
    "priority",
    "time_budget_seconds",
    "status",
    "attempts",
    "max_attempts",
    "trace_id",
    "issue_id",
    "constraint_snapshot_id",
    "requested_by",
    "active_run_id",
    "queued_at",
    "claimed_at",
    "completed_at",
    "error",
    "mission_id",
    "phase",
    "blockers",
    "approved_at",
    "touches",
)
MISSION_COLUMNS = ("id", "title", "goal", "status", "created_by", "remaining", "error", "created_at", "completed_at")
PHASE_COLUMNS = ("mission_id", "index", "name", "remaining")
DEPENDENCY_COLUMNS = ("task_id", "depends_on")
EVENT_COLUMNS = ("run_id", "kind", "message", "progress", "data", "created_at")
ISSUE_COLUMNS = ("id", "title", "type", "priority", "status", "acceptance_criteria", "created_at", "updated_at")
PACKET_COLUMNS = (
    "id",
    "issue_id",
    "version",
    "summary",
    "prior_art",
    "files_of_interest",
    "acceptance_criteria",
    "data",
    "created_at",
)
SNAPSHOT_COLUMNS = (
    "id",
    "issue_id",
    "scope",
    "time_budget_seconds",
    "allow_network",
    "allow_secrets",
    "allowed_paths",
    "created_at",
)
RUN_COLUMNS = (
    "id",
    "task_id",
    "issue_id",
    "mode",
    "executor",
    "actor_id",
    "status",
    "attempt",
    "lease_expires_at",
    "started_at",
    "ended_at",
    "summary",
    "failure",
    "artifact_root_uri",
    "budget_ends_at",
)
PACK_COLUMNS = (
    "id",
    "run_id",
    "task_id",
    "issue_id",
    "verdict",
    "verdict_reason",
    "checks",
    "criteria_results",
    "evidence_collected",
    "evidence_missing",
    "prover_id",
    "review_state",
    "created_at",
)
DECISION_COLUMNS = ("id", "evidence_pack_id", "decision", "reason", "reviewer", "created_at")
AUDIT_COLUMNS = ("ts", "actor_kind", "actor_id", "action", "entity_kind", "entity_id", "before", "after", "trace_id")
TABLE_COLUMNS = {
    "issues": ISSUE_COLUMNS,
    "context_packets": PACKET_COLUMNS,
    "constraint_snapshots": SNAPSHOT_COLUMNS,
    "tasks": TASK_COLUMNS,
    "task_dependencies": DEPENDENCY_COLUMNS,
    "missions": MISSION_COLUMNS,
    "mission_phases": PHASE_COLUMNS,
    "runs": RUN_COLUMNS,
    "run_events": EVENT_COLUMNS,
    "evidence_packs": PACK_COLUMNS,
    "review_decisions": DECISION_COLUMNS,
    "audit_log": AUDIT_COLUMNS,
}
LOAD_ORDER = tuple(TABLE_COLUMNS)  # parents before children
DAY = timedelta(days=1)


def _json(value: Any) -> str:
    return json.dumps(value)


J_CRITERIA = _json(["Inputs are validated", "Tests pass"])
J_EMPTY_LIST, J_EMPTY_OBJECT, J_SRC = _json([]), _json({}), _json(["src"])
J_EXECUTOR = _json({"actor_id": "agent-1", "name": "agent-1"})
J_FAILURE = _json({"reason": "tests failed"})
J_PATCH = _json(["patch"])
J_REVIEWER = _json({"actor_id": "reviewer-1", "name": "reviewer-1"})
J_QUEUED = _json({"status": "queued"})
J_AFTER = {
    status: _json({"status": status}) for status in ("queued", "blocked", "running", "completed", "failed", "cancelled")
}


MISSION_SIZES = (10, 100)
J_DECISION = _json({"decision": "Validate at the edge", "rationale": "One place to test", "alternatives": ["ORM"]})
J_MILESTONE = _json({"milestone": "endpoint validated"})


@dataclass
class _Mission:
    """One mission while its tasks are generated: which are approved, and what each phase still needs."""

    id: str
    size: int
    phases: int
    first: int  # the index of its first task
    old: bool  # ended before the working set
    cancel_at: int | None  # an old mission cancelled part way: its tasks from here on were cancelled
    created_at: datetime
    task_ids: list[str] = field(default_factory=list)
    approved: list[bool] = field(default_factory=list)
    phase_remaining: list[int] = field(default_factory=list)
    last_end: datetime | None = None

    def phase_of(self, k: int) -> int:
        return k * self.phases // self.size


class Rows:
    """Every row of one load, chunk by chunk, as tuples in TABLE_COLUMNS order (JSON already text).

    Tasks are spread over 30 days, oldest first. The newest are queued, then (older) running; the rest
    ended: 85% completed, 10% failed, 5% cancelled. The newest `with_runs` ended tasks, and every queued
    or running one, came with a run (if they ran), an evidence pack (if completed; the newest few still
    pending review, the rest approved with a review decision) and their own issue, context packet and
    constraint snapshot, as jct_enqueue_task makes them; 5% of the older ones belong to a few long-lived
    issues. Two audit rows per task.

    Missions (`shape.missions`, 10-100 tasks each, about half of all tasks) are runs of consecutive tasks
    spread evenly among the others, as jct_create_mission makes them: 2-4 phases, and inside a phase chains
    and diamonds (a task depends on one or two earlier tasks of its phase, or on none). A mission that ended
    before the working set is completed (every task approved) or, one in ten, cancelled part way. A mission
    that reaches into the working set is active: its ended tasks are approved, and of the rest only those
    whose dependencies and earlier phases are all approved are queued or running; the others are blocked,
    with `blockers` counted as server/db/missions.py counts them. Runs of mission tasks carry progress,
    decision and milestone events (what claims and mission pages read).

    With `shape.touches`, every queued and running task declares one file of its repository it edits, out of
    40 per running task there: the running tasks hold their files, and a queued one collides with them one
    time in 40 at every size, so the claim at 1M walks as far as at 1k and reads more holders."""

    def __init__(self, shape: Shape, time: Callable[[datetime], Any], seed: int = 0) -> None:
        self.shape = shape
        self.time = time  # a datetime as the target database takes it
        self.rng = random.Random(seed)
        self.now = datetime.now(UTC)
        self.start = self.now - 30 * DAY
        self.epics = [self._uuid() for _ in range(shape.issues)]
        self.sample: list[str] = []
        self.mission_starts = self._mission_layout()
        self.mission: _Mission | None = None
        self.active_missions: list[str] = []
        self.missions = self.blocked = 0
        self.files_per_repo = max(40, 40 * shape.running // len(REPOS))

    def _mission_layout(self) -> dict[int, int]:
        """{first task index: size}: missions of MISSION_SIZES tasks with even gaps between them."""
        shape = self.shape
        sizes = [self.rng.randint(*MISSION_SIZES) for _ in range(shape.missions)]
        while sizes and sum(sizes) > shape.n:
            sizes.pop()
        free, starts, at = shape.n - sum(sizes), {}, 0
        for j, size in enumerate(sizes):
            at += free * (j + 1) // len(sizes) - free * j // len(sizes)  # the gap before mission j
            starts[at] = size
            at += size
        return starts

    def _uuid(self) -> str:
        h = f"{self.rng.getrandbits(128):032x}"
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"

    def _touches(self, status: str) -> str | None:
        if not self.shape.touches or status not in ("queued", "running"):
            return None
        return _json([f"src/f{self.rng.randrange(self.files_per_repo)}.py"])

    def epic_issues(self) -> list[tuple[Any, ...]]:
        at = self.time(self.start)
        return [
            (issue_id, f"Epic {i}: harden input validation", "code_change", "P1", "ready", J_CRITERIA, at, at)
            for i, issue_id in enumerate(self.epics)
        ]

    def chunks(self) -> Iterator[dict[str, list[tuple[Any, ...]]]]:
        shape = self.shape
        step = (self.now - self.start) / max(1, shape.n)
        for first in range(0, shape.n, CHUNK):
            out: dict[str, list[tuple[Any, ...]]] = {table: [] for table in TABLE_COLUMNS}
            if first == 0:
                out["issues"] = self.epic_issues()
            for i in range(first, min(shape.n, first + CHUNK)):
                self._task(i, self.start + step * i, out)
            yield out

    def _task(self, i: int, at_time: datetime, out: dict[str, list[tuple[Any, ...]]]) -> None:
        rng, shape, time = self.rng, self.shape, self.time
        finished = shape.n - shape.queued - shape.running
        task_id, trace_id = self._uuid(), self._uuid()
        at = time(at_time)
        if i < finished:
            roll = rng.random()
            status = "completed" if roll < 0.85 else "failed" if roll < 0.95 else "cancelled"
        else:
            status = "running" if i < finished + shape.running else "queued"
        if i in self.mission_starts:
            size = self.mission_starts[i]
            old = i + size <= finished
            cancel_at = rng.randrange(1, size) if old and rng.random() < 0.1 else None
            self.mission = _Mission(self._uuid(), size, rng.randint(2, 4), i, old, cancel_at, at_time)
        mission, k, phase, blockers, approved_at = self.mission, 0, None, 0, None
        depends: list[str] = []
        picks: set[int] = set()
        if mission is not None:
            k = i - mission.first
            phase = mission.phase_of(k)
            if phase == len(mission.phase_remaining):
                mission.phase_remaining.append(0)
            start = next(j for j in range(k + 1) if mission.phase_of(j) == phase)  # the phase's first task
            if k > start and rng.random() < 0.7:  # a chain link, or (one in three) a diamond's join
                picks = {rng.randrange(start, k) for _ in range(1 if rng.random() < 0.67 else 2)}
                depends = [mission.task_ids[j] for j in sorted(picks)]
            if mission.old:
                status = "cancelled" if mission.cancel_at is not None and k >= mission.cancel_at else "completed"
            elif i < finished:
                status = "completed"
            else:
                unapproved = sum(not mission.approved[j] for j in picks)
                earlier_open = any(mission.phase_remaining[p] for p in range(phase))
                blockers = unapproved + (1 if earlier_open else 0)
                if blockers:
                    status = "blocked"
                    self.blocked += 1
        recent = i >= finished - shape.with_runs
        issue_id = snapshot_id = run_id = None
        waiting = status in ("queued", "blocked")
        started = time(at_time + timedelta(minutes=1)) if not waiting else None
        ended = time(at_time + timedelta(minutes=10)) if i < finished else None
        pending = status == "completed" and recent and finished - i <= shape.pending_reviews
        if mission is not None and status == "completed" and not pending:
            approved_at = ended
        if recent:
            issue_id, snapshot_id = self._uuid(), self._uuid()
            title = f"Task {i}: add input validation"
            issue_status = {"queued": "ready", "blocked": "ready", "running": "running"}.get(status, status)
            out["issues"].append((issue_id, title, "code_change", "P2", issue_status, J_CRITERIA, at, at))
            out["context_packets"].append(
                (
                    self._uuid(),
                    issue_id,
                    1,
                    "The endpoint accepts anything.",
                    J_EMPTY_LIST,
                    J_SRC,
                    J_CRITERIA,
                    J_EMPTY_OBJECT,
                    at,
                )
            )
            out["constraint_snapshots"].append((snapshot_id, issue_id, "run", 3600, False, False, J_SRC, at))
            audit_issue = ("agent", "agent-1", "issue.created", "Issue", issue_id, None, J_AFTER["queued"])
            out["audit_log"].append((at, *audit_issue, trace_id))
        elif self.epics and rng.random() < 0.05:
            issue_id = rng.choice(self.epics)
        if not waiting and status != "cancelled" and recent:
            run_id = self._uuid()
            lease = time(self.now + 2 * DAY) if status == "running" else time(at_time + timedelta(minutes=40))
            out["runs"].append(
                (
                    run_id,
                    task_id,
                    issue_id,
                    "agent",
                    J_EXECUTOR,
                    "agent-1",
                    status,
                    1,
                    lease,
                    started,
                    ended,
                    "Done." if status == "completed" else None,
                    J_FAILURE if status == "failed" else None,
                    f"file:///tmp/jct/{run_id}",
                    time(at_time + timedelta(minutes=1, seconds=3600)),
                )
            )
            if status == "completed":
                review = "pending" if pending else "approved"
                pack_id = self._uuid()
                out["evidence_packs"].append(
                    (
                        pack_id,
                        run_id,
                        task_id,
                        issue_id,
                        "pass",
                        "All checks passed.",
                        J_EMPTY_LIST,
                        J_EMPTY_LIST,
                        J_PATCH,
                        J_EMPTY_LIST,
                        "bench",
                        review,
                        ended,
                    )
                )
                if review == "approved":
                    decision = (self._uuid(), pack_id, "approved", "Looks right.", J_REVIEWER, ended)
                    out["review_decisions"].append(decision)
        out["tasks"].append(
            (task_id, OPERATIONS[i % 4], f"Task {i}: add input validation to the signup endpoint",
             REPOS[i % len(REPOS)], "main", "src", PRIORITIES[rng.randrange(5)], 3600, status,
             1 if started is not None else 0, 3, trace_id, issue_id, snapshot_id, "bench",
             run_id if status == "running" else None, at, started, ended,
             "tests failed" if status == "failed" else None,
             mission.id if mission else None, phase, blockers, approved_at, self._touches(status))
        )  # fmt: skip
        audit = out["audit_log"]
        enqueued = J_AFTER["blocked"] if status == "blocked" else J_QUEUED
        audit.append((at, "agent", "agent-1", "task.enqueued", "Task", task_id, None, enqueued, trace_id))
        if mission is not None:
            out["task_dependencies"] += [(task_id, d) for d in depends]
            if run_id is not None:
                self._events(run_id, k, at_time, out)
            self._mission_task(mission, task_id, approved_at is not None, ended, phase or 0, out)
        if not waiting:
            action = "task.claimed" if status == "running" else f"task.{status}"
            audit.append((ended or started, "agent", "agent-1", action, "Task", task_id, J_QUEUED, J_AFTER[status],
                          trace_id))  # fmt: skip
        if i < finished and len(self.sample) < 1000 and rng.random() < 1000 / max(1, finished):
            self.sample.append(task_id)

    def _events(self, run_id: str, k: int, at_time: datetime, out: dict[str, list[tuple[Any, ...]]]) -> None:
        """A mission task's run: a progress event, and (every third task) a decision, (every tenth) a milestone."""
        at = self.time(at_time + timedelta(minutes=5))
        events = out["run_events"]
        events.append((run_id, "progress", "Tests written", 50, None, at))
        if k % 3 == 0:
            events.append((run_id, "decision", "Validate at the edge", None, J_DECISION, at))
        if k % 10 == 0:
            events.append((run_id, "milestone", "endpoint validated", None, J_MILESTONE, at))

    def _mission_task(
        self,
        mission: _Mission,
        task_id: str,
        approved: bool,
        ended: Any,
        phase: int,
        out: dict[str, list[tuple[Any, ...]]],
    ) -> None:
        """Count the task in its mission; after its last task, the mission's own rows."""
        mission.task_ids.append(task_id)
        mission.approved.append(approved)
        if not approved:
            mission.phase_remaining[phase] += 1
        mission.last_end = ended or mission.last_end
        if len(mission.task_ids) < mission.size:
            return
        self.mission = None
        self.missions += 1
        remaining = sum(mission.phase_remaining)
        cancelled = mission.cancel_at is not None
        status = "cancelled" if cancelled else "completed" if remaining == 0 else "active"
        if status == "active":
            self.active_missions.append(mission.id)
        created = self.time(mission.created_at)
        done = mission.last_end if status != "active" else None
        error = "cancelled: superseded" if cancelled else None
        out["missions"].append(
            (mission.id, f"Mission {self.missions}: harden the signup flow", "Every endpoint validates its input.",
             status, "bench", remaining, error, created, done)
        )  # fmt: skip
        names = ("spec", "code", "docs", "release")
        for index, left in enumerate(mission.phase_remaining):
            out["mission_phases"].append((mission.id, index, names[index], left))


# --- loading -------------------------------------------------------------------------------------


async def load(database_url: str, n: int, *, seed: int = 0, missions: bool = True, touches: bool = False) -> Loaded:
    """Migrate the (empty) database at `database_url` and bulk-load n tasks with their runs, evidence
    and audit rows. PostgreSQL: COPY through asyncpg; SQLite: executemany in one transaction. Then the
    count deltas are folded and the planner statistics refreshed, as a long-running server's would be."""
    url = async_database_url(database_url)
    db = Database(url)
    try:
        await upgrade(db)
    finally:
        await db.dispose()
    sqlite = make_url(url).get_backend_name() == "sqlite"
    rows = Rows(Shape.of(n, missions=missions, touches=touches), _sqlite_time if sqlite else _same, seed)
    started = time.perf_counter()
    if sqlite:
        path = make_url(url).database
        assert path
        audit = await anyio.to_thread.run_sync(_load_sqlite, path, rows)
    else:
        audit = await _load_postgres(url, rows)
    loaded_at = time.perf_counter()
    db = Database(url)
    try:
        async with db.write() as conn:
            await counts.fold_count_deltas(conn)
    finally:
        await db.dispose()
    folded_at = time.perf_counter()
    await _analyze(url)
    print(
        f"load: rows {loaded_at - started:.1f}s, fold {folded_at - loaded_at:.1f}s, "
        f"analyze {time.perf_counter() - folded_at:.1f}s",
        file=sys.stderr,
    )
    return Loaded(
        n=n,
        seconds=time.perf_counter() - started,
        task_ids=rows.sample,
        audit_rows=audit,
        mission_ids=rows.active_missions,
        missions=rows.missions,
        blocked=rows.blocked,
    )


def _sqlite_time(value: datetime) -> str:
    # How server/db/types.py UTCDateTime stores a datetime on SQLite: naive UTC text, with microseconds.
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")


def _same(value: datetime) -> datetime:
    return value


def _insert_sql(table: str) -> str:
    columns = TABLE_COLUMNS[table]
    names = ", ".join(f'"{c}"' for c in columns)  # quoted: mission_phases has a column named "index"
    return f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' for _ in columns)})"


def _load_sqlite(path: str, rows: Rows) -> int:
    audit = 0
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=OFF")
        db.execute("PRAGMA cache_size=-262144")  # 256 MiB while loading
        db.execute("BEGIN IMMEDIATE")
        # Secondary indexes are dropped for the load and built again after it: far faster than
        # keeping them up to date row by row (the unique constraints' indexes stay).
        marks = ", ".join("?" for _ in LOAD_ORDER)
        indexes = db.execute(
            f"SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN ({marks})",
            LOAD_ORDER,
        ).fetchall()
        for name, _sql in indexes:
            db.execute(f"DROP INDEX {name}")
        done: dict[str, Any] = {}
        chunks = rows.chunks()
        with ThreadPoolExecutor(1) as pool:  # the next chunk is generated while SQLite writes this one
            upcoming = pool.submit(next, chunks, done)
            while (chunk := upcoming.result()) is not done:
                upcoming = pool.submit(next, chunks, done)
                for table in LOAD_ORDER:
                    if chunk[table]:
                        db.executemany(_insert_sql(table), chunk[table])
                audit += len(chunk["audit_log"])
        for _name, sql in indexes:
            db.execute(sql)
        db.execute("COMMIT")
    finally:
        db.close()
    return audit


def _postgres_dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def _prefetched(chunks: Iterator[dict[str, list[tuple[Any, ...]]]]) -> AsyncIterator[dict[str, Any]]:
    """The chunks, each generated on a worker thread while the database writes the one before it."""
    done: dict[str, Any] = {}
    with ThreadPoolExecutor(1) as pool:
        upcoming = pool.submit(next, chunks, done)
        while (chunk := await asyncio.wrap_future(upcoming)) is not done:
            upcoming = pool.submit(next, chunks, done)
            yield chunk


async def _load_postgres(url: str, rows: Rows) -> int:
    import asyncpg

    audit = 0
    conn = await asyncpg.connect(_postgres_dsn(url))
    try:
        async with conn.transaction():
            # Secondary indexes are dropped for the load and built again after it (constraints stay).
            indexes = await conn.fetch(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                "AND tablename = ANY($1::text[]) AND indexname NOT IN (SELECT conname FROM pg_constraint)",
                list(LOAD_ORDER),
            )
            for index in indexes:
                await conn.execute(f"DROP INDEX {index['indexname']}")
            spent: dict[str, float] = {}
            async for chunk in _prefetched(rows.chunks()):
                for table in LOAD_ORDER:
                    if chunk[table]:
                        columns = list(TABLE_COLUMNS[table])
                        began = time.perf_counter()
                        await conn.copy_records_to_table(table, records=chunk[table], columns=columns)
                        spent[table] = spent.get(table, 0.0) + time.perf_counter() - began
                audit += len(chunk["audit_log"])
            await conn.execute("SET LOCAL maintenance_work_mem = '256MB'")
            began = time.perf_counter()
            for index in indexes:
                await conn.execute(index["indexdef"])
            spent["indexes"] = time.perf_counter() - began
            print("load phases (s): " + ", ".join(f"{k} {v:.1f}" for k, v in spent.items()), file=sys.stderr)
    finally:
        await conn.close()
    return audit


async def _analyze(url: str) -> None:
    if make_url(url).get_backend_name() == "sqlite":
        path = make_url(url).database
        assert path

        def run() -> None:
            db = sqlite3.connect(path, isolation_level=None)
            try:
                db.execute("ANALYZE")
            finally:
                db.close()

        await anyio.to_thread.run_sync(run)
        return
    import asyncpg

    conn = await asyncpg.connect(_postgres_dsn(url))
    try:
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()


# --- the server ------------------------------------------------------------------------------------


class Echoed(BaseModel):
    text: str


async def echo(text: str) -> Echoed:
    """Return the text unchanged (the protocol floor)."""
    return Echoed(text=text)


def serve(port: int, database_url: str, home: Path) -> None:
    import uvicorn

    from server.app import create_app

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, force=True)
    settings = Settings(_env_file=None, database_url=database_url, home=home, log_level="WARNING")
    app = create_app(settings, extend=lambda mcp: mcp.add_tool(echo, name="echo"))
    uvicorn.run(app, host="127.0.0.1", port=port, log_config=None, log_level="warning", access_log=False)


@asynccontextmanager
async def serving(database_url: str, home: Path) -> AsyncIterator[str]:
    """A JCT server (plus an `echo` tool) on a free port in a subprocess; yields its base URL."""
    port = free_port()
    command = [sys.executable, __file__, "serve", "--port", str(port), "--database-url", database_url]
    env = {k: v for k, v in os.environ.items() if not k.startswith("JCT_")}
    home.mkdir(parents=True, exist_ok=True)
    log = (home / "server.log").open("wb")
    process = subprocess.Popen([*command, "--home", str(home)], env=env, stdout=log, stderr=log)
    try:
        base_url = f"http://127.0.0.1:{port}"
        await wait_ready(process, base_url)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


# --- measuring -------------------------------------------------------------------------------------


@dataclass
class Stat:
    p50_ms: float
    p99_ms: float
    calls: int


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] * 1000


CALLS = (
    "echo",
    "jct_list_tasks",
    "jct_list_tasks completed, next page",
    "jct_list_tasks all",
    "jct_claim_next",
    "jct_queue_stats",
    "resources/list",
    "resources/list next page",
    "jct_get_audit_trail",
    "jct_get_mission",
    "jct_list_missions",
)


async def measure(
    base_url: str, *, calls: int = 200, task_ids: list[str] | None = None, mission_ids: list[str] | None = None
) -> dict[str, Stat]:
    """p50/p99 per call through the server at `base_url` (see measure_many)."""
    return (
        await measure_many(
            {base_url: base_url},
            calls=calls,
            task_ids={base_url: task_ids or []},
            mission_ids={base_url: mission_ids or []},
        )
    )[base_url]


async def measure_many(
    servers: dict[str, str],
    *,
    calls: int = 200,
    task_ids: dict[str, list[str]] | None = None,
    mission_ids: dict[str, list[str]] | None = None,
) -> dict[str, dict[str, Stat]]:
    """p50/p99 per call for each server ({label: base_url}), one client per server, calls interleaved.

    Round n makes call n of every kind on every server in turn, so a noisy neighbour on a shared
    machine slows every cell alike and the ratios between sizes stay meaningful. Five warm-up rounds
    come first. jct_claim_next claims a task per call: each queue needs calls + 5 queued tasks (load()
    queues at least 500). jct_get_audit_trail reads the trails of `task_ids[label]` in turn (default:
    finished tasks the server lists); jct_get_mission reads the pages of `mission_ids[label]` in turn
    (default: the active missions the server lists; a load without missions skips both mission calls)."""
    latencies: dict[str, dict[str, list[float]]] = {label: {name: [] for name in CALLS} for label in servers}
    async with AsyncExitStack() as stack:
        plans = {}
        for label, base_url in servers.items():
            client = await stack.enter_async_context(Client(f"{base_url}/mcp", mode="legacy"))
            plans[label] = await _actions(
                client, (task_ids or {}).get(label) or [], (mission_ids or {}).get(label) or []
            )
        names = [name for name in CALLS if all(name in actions for actions in plans.values())]
        for n in range(-5, calls):
            for name in names:
                for label, actions in plans.items():
                    started = time.perf_counter()
                    await actions[name](n)
                    if n >= 0:
                        latencies[label][name].append(time.perf_counter() - started)
    stats: dict[str, dict[str, Stat]] = {}
    for label, cells in latencies.items():
        stats[label] = {}
        for name, values in cells.items():
            if not values:
                continue
            values.sort()
            stats[label][name] = Stat(_quantile(values, 0.5), _quantile(values, 0.99), len(values))
    return stats


async def _actions(
    client: Client, task_ids: list[str], mission_ids: list[str]
) -> dict[str, Callable[[int], Awaitable[Any]]]:
    first = await tool(client, "jct_list_tasks", {"status": "completed", "limit": 100})
    cursor = first["next_cursor"]
    ids = task_ids or [task["task_id"] for task in first["tasks"]]
    missions = mission_ids or [m["mission_id"] for m in (await tool(client, "jct_list_missions", {}))["missions"]]
    # "bypass": the SDK client would otherwise answer repeated listings from its response cache.
    resource_cursor = (await client.list_resources(cache_mode="bypass")).next_cursor
    mission_calls: dict[str, Callable[[int], Awaitable[Any]]] = {
        "jct_get_mission": lambda n: tool(client, "jct_get_mission", {"mission_id": missions[n % len(missions)]}),
        "jct_list_missions": lambda _n: tool(client, "jct_list_missions", {}),
    }
    return (mission_calls if missions else {}) | {
        "echo": lambda _n: tool(client, "echo", {"text": "ping"}),
        "jct_list_tasks": lambda _n: tool(client, "jct_list_tasks", {}),
        "jct_list_tasks completed, next page": lambda _n: tool(
            client, "jct_list_tasks", {"status": "completed", "cursor": cursor}
        ),
        "jct_list_tasks all": lambda _n: tool(client, "jct_list_tasks", {"status": "all"}),
        "jct_claim_next": lambda _n: _claim(client),
        "jct_queue_stats": lambda _n: tool(client, "jct_queue_stats", {}),
        "resources/list": lambda _n: client.list_resources(cache_mode="bypass"),
        "resources/list next page": lambda _n: client.list_resources(cursor=resource_cursor, cache_mode="bypass"),
        "jct_get_audit_trail": lambda n: tool(
            client, "jct_get_audit_trail", {"entity_kind": "Task", "entity_id": ids[n % len(ids)]}
        ),
    }


async def _claim(client: Client) -> None:
    if not (await tool(client, "jct_claim_next", {}))["claimed"]:
        raise RuntimeError("the queue ran dry; load more queued tasks or make fewer calls")


# --- plans -----------------------------------------------------------------------------------------


class _Captured(Exception):
    """Raised after capturing a write's statement, so that explain() never performs it."""


@dataclass
class Plan:
    name: str
    sql: str
    plan: str
    scans: list[str]

    @property
    def full_scans(self) -> list[str]:
        """Scans that read a whole table (count_deltas is small by design, so it may be scanned)."""
        tables = [s for s in self.scans if s.startswith(("Seq Scan", "SCAN "))]
        # SQLite's "SCAN anon_1" reads a subquery's (LIMITed) result, "SCAN CONSTANT ROW" no table at all; the
        # SQLite claim's briefing reads its own subqueries "one" (SELECT 1) and "packet" (LIMIT 1).
        return [s for s in tables if not re.search(r"count_deltas|anon_\d|CONSTANT|^SCAN (one|packet)$", s)]


_SCAN = re.compile(
    r"(Seq Scan on \w+|Index Only Scan (?:Backward )?using \w+|Index Scan (?:Backward )?using \w+"
    r"|Bitmap Index Scan on \w+|SCAN \w+(?: USING [\w ]+)?|SEARCH \w+ USING [\w ]+?(?= \(|$))"
)


async def explain(database_url: str, *, task_id: str | None = None, mission_id: str | None = None) -> list[Plan]:
    """Run each hot path once through the service code, capture its statements, and explain each.

    Writes (claim-next, the fold) are explained inside a transaction that is rolled back. On SQLite the
    claim's statements (which run on the driver's thread, past SQLAlchemy) are recorded from the same
    function the server calls, inside a transaction rolled back too."""
    url = async_database_url(database_url)
    with tempfile.TemporaryDirectory(prefix="jct-explain-") as tmp:
        core = Core.build(Settings(_env_file=None, database_url=url, home=Path(tmp)))
        captured: list[tuple[str, Any]] = []
        dry = False

        @event.listens_for(core.db.engine.sync_engine, "before_cursor_execute")
        def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
            captured.append((statement, parameters))
            if dry and not statement.lstrip().upper().startswith("BEGIN"):
                raise _Captured  # the transaction rolls back: nothing is claimed

        async def run(
            name: str, work: Callable[[], Awaitable[Any]], *, dry_run: bool = False
        ) -> list[tuple[str, str, Any]]:
            nonlocal dry
            captured.clear()
            dry = dry_run
            try:
                await work()
            except Exception as exc:
                if not dry_run or not isinstance(exc.__cause__ or exc, _Captured):
                    raise
            finally:
                dry = False
            return [(name, sql, params) for sql, params in captured if not sql.lstrip().upper().startswith("BEGIN")]

        try:
            some_task = task_id
            if some_task is None:
                listed = await queue.list_tasks(core, status="completed", limit=1)
                some_task = listed.tasks[0].task_id
            page = await queue.list_tasks(core, status="completed", limit=10)
            statements: list[tuple[str, str, Any]] = []
            statements += await run("jct_list_tasks", lambda: queue.list_tasks(core))
            statements += await run(
                "jct_list_tasks completed, next page",
                lambda: queue.list_tasks(core, status="completed", cursor=page.next_cursor),
            )
            statements += await run("jct_list_tasks all", lambda: queue.list_tasks(core, status="all"))
            statements += await run("jct_queue_stats", lambda: queue.queue_stats(core))
            statements += await run("resources/list", lambda: resource_listing.list_page(core, [], None, 25))
            statements += await run(
                "jct_get_audit_trail", lambda: observe.get_audit_trail(core, "Task", str(some_task))
            )

            async def feed_poll() -> None:
                async with core.db.read() as conn:
                    latest = await feed.latest_audit_id(conn)
                    await feed.audit_after(conn, latest - 10, [latest - 20], 500)

            statements += await run("change feed poll", feed_poll)

            async def sweeper_pick() -> None:
                async with core.db.read() as conn:
                    await queries.expired_running_runs(conn, core.now(), 100)

            statements += await run("sweeper: expired runs", sweeper_pick)
            if not core.db.is_sqlite:  # SQLite's claim runs on the driver's thread, past SQLAlchemy
                statements += await run("jct_claim_next", lambda: queue.claim_next(core, BENCH_ACTOR), dry_run=True)
            statements += await run("sweeper: fold counts", lambda: queue.fold_counts(core))
            listed_missions = await mission_status.list_missions(core)
            some_mission = mission_id or next((m.mission_id for m in listed_missions.missions), None)
            statements += await run("jct_list_missions", lambda: mission_status.list_missions(core))
            if some_mission is not None:
                statements += await run("jct_get_mission", lambda: mission_status.get_mission(core, str(some_mission)))
        finally:
            await core.db.dispose()
    if make_url(url).get_backend_name() == "sqlite":
        path = make_url(url).database
        assert path
        statements += _sqlite_claim_statements(path, some_mission)
        return _explain_sqlite(path, statements)
    return await _explain_postgres(url, statements)


class _Recording:
    """A sqlite3 connection that notes every statement it runs (with its first row of parameters)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.statements: list[tuple[str, Any]] = []

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        self.statements.append((sql, params))
        return self.db.execute(sql, params)

    def executemany(self, sql: str, rows: Any) -> sqlite3.Cursor:
        rows = list(rows)
        self.statements.append((sql, rows[0] if rows else ()))
        return self.db.executemany(sql, rows)


def _sqlite_claim_statements(path: str, mission_id: str | None) -> list[tuple[str, str, Any]]:
    """The SQLite claim's statements, run by the server's own function in a transaction that is rolled back;
    plus its query of the mission's decisions (which runs only when the task claimed is a mission's)."""
    db = sqlite3.connect(path, isolation_level=None)
    recording = _Recording(db)
    request = ClaimRequest(
        run_id="00000000-0000-4000-a000-000000000000",
        actor_id="bench",
        principal="local",
        claim_session=None,
        actor_kind="human",
        executor={"actor_id": "bench", "name": "bench"},
        lease_seconds=900,
        artifact_root_uri="file:///tmp/jct/explain",
    )
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            claimed = claim_on_sqlite_thread(cast(sqlite3.Connection, recording), request)
            if mission_id is not None and (claimed is None or claimed["mission_id"] is None):
                _decisions_sqlite(cast(sqlite3.Connection, recording), mission_id)
        finally:
            db.execute("ROLLBACK")
    finally:
        db.close()
    return [("jct_claim_next", sql, params) for sql, params in recording.statements]


def _explain_sqlite(path: str, statements: list[tuple[str, str, Any]]) -> list[Plan]:
    db = sqlite3.connect(path, isolation_level=None)
    plans = []
    try:
        for name, sql, params in statements:
            if sql.lstrip().upper().startswith(("COMMIT", "ROLLBACK", "PRAGMA")):
                continue
            rows = db.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()
            text = "\n".join(str(row[-1]) for row in rows)
            plans.append(Plan(name, sql, text, _SCAN.findall(text)))
    finally:
        db.close()
    return plans


async def _explain_postgres(url: str, statements: list[tuple[str, str, Any]]) -> list[Plan]:
    import asyncpg

    conn = await asyncpg.connect(_postgres_dsn(url))
    plans = []
    try:
        for name, sql, params in statements:
            if sql.lstrip().upper().startswith(("COMMIT", "ROLLBACK", "SELECT PG_ADVISORY")):
                continue
            transaction = conn.transaction()
            await transaction.start()
            try:
                rows = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {sql}", *(params or ()))
            finally:
                await transaction.rollback()
            text = "\n".join(row[0] for row in rows)
            plans.append(Plan(name, sql, text, _SCAN.findall(text)))
    finally:
        await conn.close()
    return plans


# --- orchestration ---------------------------------------------------------------------------------


@asynccontextmanager
async def fresh_database(dialect: str, postgres_url: str, tmp: Path, label: str) -> AsyncIterator[str]:
    """An empty database: a SQLite file under tmp, or a throwaway PostgreSQL database (dropped after)."""
    if dialect == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp / f'{label}.db'}"
        return
    admin_url = async_database_url(postgres_url)
    name = f"jct_scale_{label}_{os.getpid()}"
    await admin(admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    await admin(admin_url, f"CREATE DATABASE {name}")
    try:
        yield str(make_url(admin_url).set(database=name).render_as_string(hide_password=False))
    finally:
        await admin(admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def table(results: dict[int, dict[str, Stat]]) -> str:
    sizes = sorted(results)
    head = " | ".join(f"{n:,} p50 ms | {n:,} p99 ms" for n in sizes)
    lines = [f"| call | {head} | p50 {sizes[-1]:,} / {sizes[0]:,} |", "|---|" + "---:|" * (2 * len(sizes) + 1)]
    for name in [name for name in CALLS if all(name in results[n] for n in sizes)]:
        cells = " | ".join(f"{results[n][name].p50_ms:.1f} | {results[n][name].p99_ms:.1f}" for n in sizes)
        ratio = results[sizes[-1]][name].p50_ms / results[sizes[0]][name].p50_ms
        lines.append(f"| `{name}` | {cells} | {ratio:.2f}x |")
    return "\n".join(lines)


def plan_report(plans: list[Plan], *, full: bool) -> str:
    lines = []
    for plan in plans:
        flag = "FULL SCAN: " + ", ".join(plan.full_scans) if plan.full_scans else "indexed"
        lines.append(f"- {plan.name}: {flag}; {', '.join(dict.fromkeys(plan.scans)) or 'no table access'}")
        if full:
            lines.append("  ```\n  " + plan.sql.strip().replace("\n", "\n  ") + "\n  ---")
            lines.append("  " + plan.plan.replace("\n", "\n  ") + "\n  ```")
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> None:
    sizes = [int(part) for part in args.sizes.split(",")]
    report: dict[str, Any] = {
        "sizes": sizes,
        "calls": args.calls,
        "missions": not args.no_missions,
        "touches": args.touches,
        "dialects": {},
    }
    with tempfile.TemporaryDirectory(prefix="jct-scale-") as tmp_name:
        tmp = Path(tmp_name)
        for dialect in args.dialects:
            entries: dict[str, dict[str, Any]] = {}
            async with AsyncExitStack() as stack:
                urls: dict[str, str] = {}
                samples: dict[str, list[str]] = {}
                missions: dict[str, list[str]] = {}
                for n in sizes:
                    url = await stack.enter_async_context(fresh_database(dialect, args.postgres_url, tmp, str(n)))
                    loaded = await load(url, n, missions=not args.no_missions, touches=args.touches)
                    print(
                        f"{dialect}: loaded {n:,} tasks ({loaded.audit_rows:,} audit rows, {loaded.missions:,} "
                        f"missions of which {len(loaded.mission_ids):,} active, {loaded.blocked:,} tasks blocked) "
                        f"in {loaded.seconds:.1f}s",
                        file=sys.stderr,
                    )
                    entries[str(n)] = {
                        "load_seconds": loaded.seconds,
                        "audit_rows": loaded.audit_rows,
                        "missions": loaded.missions,
                        "active_missions": len(loaded.mission_ids),
                        "blocked": loaded.blocked,
                    }
                    urls[str(n)] = await stack.enter_async_context(serving(url, tmp / f"home-{dialect}-{n}"))
                    samples[str(n)] = loaded.task_ids
                    missions[str(n)] = loaded.mission_ids
                    if args.explain and n == sizes[-1]:
                        plans = await explain(
                            url,
                            task_id=loaded.task_ids[0] if loaded.task_ids else None,
                            mission_id=loaded.mission_ids[0] if loaded.mission_ids else None,
                        )
                        print(f"\n{dialect}, {n:,} tasks: plans\n\n{plan_report(plans, full=args.verbose)}\n")
                        entries[str(n)]["plans"] = [
                            {"name": p.name, "sql": p.sql, "plan": p.plan, "scans": p.scans, "full_scans": p.full_scans}
                            for p in plans
                        ]
                stats = await measure_many(urls, calls=args.calls, task_ids=samples, mission_ids=missions)
            results = {n: stats[str(n)] for n in sizes}
            print(f"\n{dialect}: one client per size over streamable HTTP, {args.calls} calls per cell, interleaved\n")
            print(table(results))
            for n in sizes:
                entries[str(n)]["stats"] = {
                    name: {"p50_ms": st.p50_ms, "p99_ms": st.p99_ms} for name, st in results[n].items()
                }
            report["dialects"][dialect] = entries
            if args.json is not None:  # after each dialect: an interrupted run keeps what finished
                args.json.write_text(json.dumps(report, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    server = sub.add_parser("serve", help="(internal) run the bench server")
    server.add_argument("--port", type=int, required=True)
    server.add_argument("--database-url", required=True)
    server.add_argument("--home", type=Path, required=True)
    parser.add_argument("--sizes", default="1000,1000000", help="comma-separated task counts")
    parser.add_argument("--calls", type=int, default=200, help="timed calls per (call, size)")
    parser.add_argument("--explain", action="store_true", help="print the plans of the hot statements")
    parser.add_argument("--verbose", action="store_true", help="with --explain: the SQL and the whole plan")
    parser.add_argument("--no-missions", action="store_true", help="load tasks only, no missions (the old shape)")
    parser.add_argument(
        "--touches", action="store_true", help="queued and running tasks declare the file they edit (see Rows)"
    )
    parser.add_argument("--json", type=Path, help="also write the figures (and plans) to this JSON file")
    add_database_arguments(parser)
    args = parser.parse_args()
    if args.command == "serve":
        serve(args.port, args.database_url, args.home)
        return
    check_dialects(parser, args)
    logging.basicConfig(level=logging.WARNING)
    anyio.run(main_async, args)


if __name__ == "__main__":
    main()
