"""What a fenced change reads (`Facts`) and writes (`Write`: inserts, guarded updates, an approval, a new
briefing version, a mission's spending), and what it returns; the same for both dialects."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import (
    ColumnElement,
    Table,
    literal,
)

from server.db import missions, queries
from server.db import tables as t
from server.db.records import CompletingTask, Reported, Run
from server.db.types import UTCDateTime

__all__ = [
    "ARTIFACT_FIELDS",
    "TASK_FIELDS",
    "Approve",
    "Changed",
    "Decide",
    "Facts",
    "Insert",
    "NewVersion",
    "RowMissed",
    "Spend",
    "Update",
    "Write",
    "insert_artifact",
    "insert_audit",
    "insert_evidence_pack",
    "insert_integration",
    "insert_review_decision",
    "insert_run_event",
    "insert_telemetry_deltas",
    "update_issue",
    "update_run",
    "update_task",
]

Values = Mapping[str, Any]
R = TypeVar("R")


# What a completion reads of its task and of the run's artifacts (the prover's input, and the trace manifest's).
TASK_FIELDS = tuple(CompletingTask.model_fields)
ARTIFACT_FIELDS = tuple(Reported.model_fields)


@dataclass(frozen=True)
class Facts:
    """What `decide` is given: the fenced run, and (for a completion) the task, its criteria and the run's artifacts."""

    run: Run
    # Its task's.
    trace_id: str
    mission_id: str | None = None
    # Bytes of content the run has stored so far (for the per-run cap); not read for a completion.
    stored_bytes: int = 0
    # For a completion: its task (TASK_FIELDS).
    task: CompletingTask | None = None
    acceptance_criteria: tuple[str, ...] = ()
    artifacts: tuple[Reported, ...] = ()
    # For a completion: the clock the fence read (the database's on PostgreSQL, the server's on SQLite), read
    # once at the start of the transaction; `clock()` writes it, so a row and what is told of it agree.
    now: datetime | None = None

    def completing(self) -> CompletingTask:
        """The task, read for a completion."""
        assert self.task is not None, "read for a completion only"
        return self.task

    def clock(self) -> ColumnElement[datetime]:
        """`now` as a value to write."""
        assert self.now is not None, "read for a completion only"
        return literal(self.now, UTCDateTime())


@dataclass(frozen=True)
class Insert:
    table: Table
    rows: Sequence[Values]
    # One row whose generated id the change hands back (a progress event's).
    returns_id: bool = False


@dataclass(frozen=True)
class Update:
    table: Table
    row_id: str
    values: Values
    status_in: tuple[str, ...] | None = None
    # Nothing matched -> RowMissed, and the whole change (fence included) is rolled back.
    required: bool = False


@dataclass(frozen=True)
class Approve:
    """The task's work is approved: what waits for it may go (server/db/missions.py), after the other writes.
    `audit` turns what the approval unblocked into audit rows of the same transaction."""

    task_id: str
    audit: Callable[[missions.Approval], Sequence[Values]]


@dataclass(frozen=True)
class NewVersion:
    """A new briefing version of the issue, made from its latest one by `packet` (server/core/briefings/
    versions.py), after the other writes."""

    issue_id: str
    packet: Callable[[Mapping[str, Any]], Values]


@dataclass(frozen=True)
class Spend:
    """What a telemetry report adds to its mission's spending, which the claim compares with the mission's budget
    (server/db/claims/): added in the report's own transaction, so the sums never lag what the runs say."""

    mission_id: str
    tokens: float
    cost_usd: float


Write = Insert | Update | Approve | NewVersion | Spend
Decide = Callable[[Facts], tuple[Sequence[Write], R]]


@dataclass(frozen=True)
class Changed(Generic[R]):
    """What a change that passed the fence made: `decide`'s result, and the id an insert handed back."""

    result: R
    inserted_id: int | None = None


class RowMissed(Exception):
    """A required update matched no row (the row left the expected status under us)."""

    def __init__(self, table: str, row_id: str) -> None:
        super().__init__(f"{table} {row_id} did not match")
        self.table = table
        self.row_id = row_id


# --- what a change writes ------------------------------------------------------------------


def insert_audit(rows: Sequence[Values]) -> Insert:
    """Audit rows; `ts` is informational (the id orders the log), the server's clock, one for the change."""
    return Insert(t.audit_log, queries.stamped(rows))


def insert_run_event(values: Values) -> Insert:
    """A progress event; the change hands back its id."""
    return Insert(t.run_events, [values], returns_id=True)


def insert_artifact(values: Values) -> Insert:
    return Insert(t.artifacts, [values])


def insert_evidence_pack(values: Values) -> Insert:
    return Insert(t.evidence_packs, [values])


def insert_telemetry_deltas(rows: Sequence[Values]) -> Insert:
    """What one telemetry report adds to the queue's totals."""
    return Insert(t.telemetry_deltas, rows)


def insert_integration(values: Values) -> Insert:
    return Insert(t.integrations, (values,))


def insert_review_decision(values: Values) -> Insert:
    return Insert(t.review_decisions, [values])


def update_run(run_id: str, values: Values, *, status_in: tuple[str, ...]) -> Update:
    return Update(t.runs, run_id, values, status_in)


def update_task(task_id: str, values: Values, *, status_in: tuple[str, ...]) -> Update:
    """The task's move; if it is no longer in `status_in` (cancelled under us), the change is undone."""
    return Update(t.tasks, task_id, values, status_in, required=True)


def update_issue(issue_id: str, values: Values) -> Update:
    return Update(t.issues, issue_id, values)
