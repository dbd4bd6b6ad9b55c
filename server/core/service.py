"""What every service function is handed: the database, the trace store and the policy in force."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement

from server.config import Settings
from server.core.models import Actor, Limits
from server.core.tracestore import TraceStore
from server.db.engine import Database, db_now, db_now_plus
from server.errors import invalid


@dataclass(frozen=True)
class Core:
    db: Database
    settings: Settings
    store: TraceStore

    @classmethod
    def build(cls, settings: Settings, db: Database | None = None) -> Core:
        database = db if db is not None else Database(settings.database_url)
        return cls(database, settings, TraceStore(settings.traces, settings.max_artifact_bytes))

    def now(self) -> ColumnElement[datetime]:
        return db_now(self.db)

    def lease_expiry(self) -> ColumnElement[datetime]:
        return db_now_plus(self.db, self.settings.lease_seconds)

    @property
    def separation_of_duties(self) -> bool:
        return self.settings.auth == "token"


def audit_row(
    actor: Actor,
    action: str,
    entity_kind: str,
    entity_id: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    trace_id: str | None,
) -> dict[str, Any]:
    """One audit row. Its `ts` is stamped at insert (server/db/queries.py); the id orders the log."""
    return {
        "actor_kind": actor.actor_kind,
        "actor_id": actor.actor_id,
        "action": action,
        "entity_kind": entity_kind,
        "entity_id": entity_id,
        "before": before,
        "after": after,
        "trace_id": trace_id,
    }


def encode_cursor(*parts: str | int) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(parts)).encode()).decode().rstrip("=")


def decode_cursor(cursor: str, arity: int) -> list[Any]:
    """Cursors are opaque to callers; a tampered one is their mistake, reported as such."""
    if not isinstance(cursor, str) or len(cursor) > Limits.CURSOR:
        raise invalid("cursor is not one JCT returned.", "Pass next_cursor from the previous page, or omit cursor.")
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        parts = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (ValueError, UnicodeDecodeError):
        parts = None
    if not isinstance(parts, list) or len(parts) != arity:
        raise invalid("cursor is not one JCT returned.", "Pass next_cursor from the previous page, or omit cursor.")
    return parts


def check_limit(limit: int, maximum: int = 100) -> int:
    if not 1 <= limit <= maximum:
        raise invalid(f"limit {limit} is out of range 1..{maximum}.", f"Use a limit between 1 and {maximum}.")
    return limit
