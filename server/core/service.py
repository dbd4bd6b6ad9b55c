"""What every service function is handed: the database, the trace store and the policy in force."""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement

from server.config import Settings
from server.core.claims.holding import Holdings
from server.core.claims.waiting import Waiters
from server.core.git.repos import Repos
from server.core.handoff import Handoffs
from server.core.models import Limits
from server.core.nudge import Nudge
from server.core.text import has_control
from server.core.tracestore import TraceStore
from server.core.workflows.definitions import Workflows
from server.db.engine import Database, db_now
from server.errors import invalid
from server.vocab import Priority


@dataclass(frozen=True)
class Core:
    db: Database
    settings: Settings
    store: TraceStore
    workflows: Workflows
    # The repositories JCT reads itself (server/core/git/repos.py); its fetch locks are per process.
    repos: Repos = field(init=False)
    # The claims waiting for work in this process (server/core/claims/waiting.py), woken by its change feed.
    waiters: Waiters = field(init=False)
    # The runs this process renews for the live connections they were claimed through (holding.py).
    holdings: Holdings = field(init=False)
    # The work calls hand off to be done after they answer (server/core/handoff.py): a completion's manifest
    # and its worktree's removal.
    handoffs: Handoffs = field(init=False)
    # Ends the integrator's pause between passes: the change feed saw work join the merge queue.
    integrator: Nudge = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "repos", Repos(self.settings))
        object.__setattr__(self, "waiters", Waiters())
        object.__setattr__(self, "holdings", Holdings(self.settings))
        object.__setattr__(self, "handoffs", Handoffs())
        object.__setattr__(self, "integrator", Nudge())

    @classmethod
    def build(cls, settings: Settings, db: Database | None = None) -> Core:
        database = (
            db
            if db is not None
            else Database(
                settings.database_url,
                lock_timeout=settings.lock_timeout_seconds,
                statement_timeout=settings.statement_timeout_seconds,
            )
        )
        store = TraceStore(settings.traces, settings.max_artifact_bytes)
        return cls(database, settings, store, Workflows(settings.workflows_dir))

    async def ping(self) -> None:
        """Reach the database; raises what the driver raised when it cannot."""
        await self.db.ping()

    async def close(self) -> None:
        await self.db.dispose()

    def now(self) -> ColumnElement[datetime]:
        return db_now(self.db)

    @property
    def separation_of_duties(self) -> bool:
        return self.settings.auth == "token"


def encode_cursor(*parts: str | int) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(parts)).encode()).decode().rstrip("=")


# What each part of a cursor may be: JCT wrote it, so anything else is a tampered or foreign cursor.
CursorPart = Literal["priority", "time", "id", "serial", "word"]
_BAD_CURSOR = ("cursor is not one JCT returned.", "Pass next_cursor from the previous page, or omit cursor.")
_MAX_SERIAL = 2**63 - 1


def decode_cursor(cursor: str, *parts: CursorPart) -> list[Any]:
    """A cursor's parts, each checked against what JCT puts there (a priority, an aware timestamp, a UUID, a
    non-negative 64-bit serial, a short word); INVALID_ARGUMENT for anything else, so a tampered cursor never
    reaches a query. Times come back as datetimes."""
    if not isinstance(cursor, str) or len(cursor) > Limits.CURSOR:
        raise invalid(*_BAD_CURSOR)
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        values = json.loads(base64.urlsafe_b64decode(padded.encode()), parse_constant=_refuse)
        if not isinstance(values, list) or len(values) != len(parts):
            raise ValueError(cursor)
        return [_part(kind, value) for kind, value in zip(parts, values, strict=True)]
    except (ValueError, TypeError, UnicodeDecodeError):
        raise invalid(*_BAD_CURSOR) from None


def time_id_after(cursor: str | None) -> tuple[datetime, str] | None:
    """The keyset position (a time, an id) a cursor of a newest- or oldest-first list carries; None for the
    first page."""
    if cursor is None:
        return None
    at, record_id = decode_cursor(cursor, "time", "id")
    return at, record_id


def _refuse(constant: str) -> Any:
    raise ValueError(constant)


def _part(kind: CursorPart, value: Any) -> Any:
    if kind == "serial":
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_SERIAL:
            raise ValueError(value)
        return value
    if not isinstance(value, str):
        raise ValueError(value)
    if kind == "priority":
        return Priority(value).value
    if kind == "time":
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is None:
            raise ValueError(value)
        # In UTC, as the database compares it: a time whose zone takes it past year 9999 or before year 1
        # cannot be one (OverflowError), so it is a tampered cursor, never an internal error.
        try:
            return moment.astimezone(UTC)
        except OverflowError:
            raise ValueError(value) from None
    if kind == "id":
        return str(uuid.UUID(value))
    if has_control(value) or len(value) > 64:
        raise ValueError(value)
    return value


def check_limit(limit: int, maximum: int = 100) -> int:
    if not 1 <= limit <= maximum:
        raise invalid(f"limit {limit} is out of range 1..{maximum}.", f"Use a limit between 1 and {maximum}.")
    return limit
