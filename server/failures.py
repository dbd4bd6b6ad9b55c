"""Failures of the world: the database unreachable or busy, the disk full. Not bugs, and not the caller's doing.

`world_failure(exc)` is the one rule that tells them from everything else, whichever driver raised them
(SQLAlchemy, asyncpg, sqlite3, or the trace store's OSError). Callers turn a failure into UNAVAILABLE with
a retry time (server/tools/errors.py), and log it through a `FailureLog`: one line per kind per interval
however many calls fail, so an outage is a handful of lines and not a traceback per call.

It sits beside server/errors.py rather than in db/: the engine (server/db/engine.py) marks what it raises
with it, and the adapters that answer UNAVAILABLE read it, and adapters never import db/.
"""

from __future__ import annotations

import errno
import logging
import socket
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import anyio

from server.errors import ErrorCode, JctError

LOG_INTERVAL = 10.0
# Set by Database.write() on an exception raised while PostgreSQL was committing (server/db/engine.py).
_AT_COMMIT = "_jct_at_commit"
# Set by the Database on an exception raised once it was stopping (a shutdown cancelled the statement).
_STOPPING = "_jct_stopping"


class ShuttingDown(Exception):
    """The server is stopping: no new transaction begins, and the running ones were cancelled."""

    def __init__(self) -> None:
        super().__init__("the server is shutting down; nothing was recorded")


class Kind(StrEnum):
    UNREACHABLE = "database unreachable"
    BUSY = "database busy"
    OVERLOADED = "database overloaded"
    DISK_FULL = "disk full"
    STORAGE = "storage failing"
    STOPPING = "server shutting down"


# How long a caller should wait before trying again, by kind.
RETRY_AFTER_SECONDS = {
    Kind.UNREACHABLE: 5,
    Kind.BUSY: 2,
    Kind.OVERLOADED: 5,
    Kind.DISK_FULL: 60,
    Kind.STORAGE: 30,
    Kind.STOPPING: 5,
}

# What the caller is told, by kind (the driver's words stay in the log).
_TOLD = {
    Kind.UNREACHABLE: "JCT cannot reach its database right now",
    Kind.BUSY: "JCT's database is busy (a lock or a statement timed out)",
    Kind.OVERLOADED: "JCT's database has no connection to spare right now",
    Kind.DISK_FULL: "JCT's disk is full",
    Kind.STORAGE: "JCT's storage is failing (an I/O error)",
    Kind.STOPPING: "This JCT server is shutting down (another replica, or this one restarted, will answer)",
}

# PostgreSQL SQLSTATEs (besides class 08, connection exceptions, which are all UNREACHABLE).
_SQLSTATES = {
    "57P01": Kind.UNREACHABLE,  # admin_shutdown: our session was terminated
    "57P02": Kind.UNREACHABLE,  # crash_shutdown
    "57P03": Kind.UNREACHABLE,  # cannot_connect_now: starting up or shutting down
    "55P03": Kind.BUSY,  # lock_not_available: lock_timeout
    "57014": Kind.BUSY,  # query_canceled: statement_timeout, or cancelled
    "40001": Kind.BUSY,  # serialization_failure
    "40P01": Kind.BUSY,  # deadlock_detected
    "53000": Kind.OVERLOADED,  # insufficient_resources
    "53200": Kind.OVERLOADED,  # out_of_memory
    "53300": Kind.OVERLOADED,  # too_many_connections
    "53100": Kind.DISK_FULL,  # disk_full
    "58030": Kind.STORAGE,  # io_error
}
# While connecting, 55000 (object_not_in_prerequisite_state) is a database that refuses connections
# (ALLOW_CONNECTIONS false); after that it would be a statement's own fault.
_REFUSING_CONNECTIONS = "55000"

# SQLite primary result codes (the low byte of sqlite_errorcode).
_SQLITE_CODES = {
    5: Kind.BUSY,  # SQLITE_BUSY: "database is locked", the busy timeout ran out
    6: Kind.BUSY,  # SQLITE_LOCKED
    7: Kind.OVERLOADED,  # SQLITE_NOMEM
    10: Kind.STORAGE,  # SQLITE_IOERR
    13: Kind.DISK_FULL,  # SQLITE_FULL: "database or disk is full"
}

_ERRNOS = {
    errno.ENOSPC: Kind.DISK_FULL,
    errno.EDQUOT: Kind.DISK_FULL,
    errno.EIO: Kind.STORAGE,
    errno.EROFS: Kind.STORAGE,
    errno.EMFILE: Kind.OVERLOADED,
    errno.ENFILE: Kind.OVERLOADED,
    errno.ENETUNREACH: Kind.UNREACHABLE,
    errno.EHOSTUNREACH: Kind.UNREACHABLE,
    errno.ENETDOWN: Kind.UNREACHABLE,
    errno.EHOSTDOWN: Kind.UNREACHABLE,
}


@dataclass(frozen=True)
class WorldFailure:
    kind: Kind
    # The driver's own words (its innermost exception, one line): for the log, never for the caller.
    detail: str
    # The connection was lost while PostgreSQL was committing: the change may or may not be recorded.
    outcome_unknown: bool = False

    @property
    def retry_after_seconds(self) -> int:
        return RETRY_AFTER_SECONDS[self.kind]


def world_failure(exc: BaseException) -> WorldFailure | None:
    """The failure of the world behind `exc` (anywhere in its chain of causes), or None for anything else."""
    chain = list(_chain(exc))
    for link in chain:
        kind = _kind(link, connecting=_connecting(chain))
        if kind is not None:
            unknown = kind is Kind.UNREACHABLE and any(getattr(e, _AT_COMMIT, False) for e in chain)
            return WorldFailure(kind, _one_line(chain[-1]), outcome_unknown=unknown)
    return None


def as_error(failure: WorldFailure) -> JctError:
    """UNAVAILABLE, saying truthfully what became of the call: nothing recorded, unless the connection was
    lost during the COMMIT (the only write of a call comes last, so an earlier failure recorded nothing)."""
    wait = failure.retry_after_seconds
    if failure.outcome_unknown:
        return JctError(
            ErrorCode.UNAVAILABLE,
            "JCT lost its database connection while recording this call, so it cannot tell whether the change "
            "was recorded.",
            f"Wait {wait} seconds, then check with jct_get_task or jct_get_run whether it was before calling again.",
            retry_after_seconds=wait,
        )
    return JctError(
        ErrorCode.UNAVAILABLE,
        f"{_TOLD[failure.kind]}; this call was not carried out.",
        f"Retry in {wait} seconds; nothing was recorded.",
        retry_after_seconds=wait,
    )


def mark_at_commit(exc: BaseException) -> None:
    """Note that `exc` was raised while a PostgreSQL COMMIT was in flight (Database.write())."""
    setattr(exc, _AT_COMMIT, True)


def mark_stopping(exc: BaseException) -> None:
    """Note that `exc` was raised once the database was stopping (its statement was cancelled, or it never
    began): the caller is told the server is shutting down, whatever the driver said."""
    setattr(exc, _STOPPING, True)


def _kind(exc: BaseException, *, connecting: bool) -> Kind | None:
    if isinstance(exc, ShuttingDown) or getattr(exc, _STOPPING, False):
        return Kind.STOPPING
    if isinstance(exc, _sa().DBAPIError) and exc.connection_invalidated:
        return Kind.UNREACHABLE  # SQLAlchemy saw the connection die under a statement
    if isinstance(exc, _sa().TimeoutError):
        return Kind.OVERLOADED  # no pooled connection came free in time
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        return _SQLITE_CODES.get(code & 0xFF) if isinstance(code, int) else None
    state = getattr(exc, "sqlstate", None)  # asyncpg's exceptions, and SQLAlchemy's adaptations of them
    if isinstance(state, str):
        if state.startswith("08"):
            return Kind.UNREACHABLE
        if state == _REFUSING_CONNECTIONS and connecting:
            return Kind.UNREACHABLE
        return _SQLSTATES.get(state)
    if isinstance(exc, ConnectionError | TimeoutError | socket.gaierror):
        return Kind.UNREACHABLE
    if isinstance(exc, OSError) and exc.errno is not None:
        return _ERRNOS.get(exc.errno)
    return None


def _connecting(chain: list[BaseException]) -> bool:
    # SQLAlchemy wraps a failed connect in a DBAPIError that names no statement.
    wrapped = next((e for e in chain if isinstance(e, _sa().DBAPIError)), None)
    return wrapped is not None and wrapped.statement is None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then what it wraps: SQLAlchemy's `orig`, then each `__cause__` or `__context__`."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 16:
        seen.add(id(current))
        yield current
        orig = current.orig if isinstance(current, _sa().DBAPIError) else None
        if isinstance(orig, BaseException) and id(orig) not in seen:
            current = orig
        else:
            current = current.__cause__ or current.__context__


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__


@dataclass
class _Episode:
    started: float
    last_line: float
    last_failure: float
    # The work that failed (a tool's name; "" when the caller has one kind of work).
    work: set[str] = field(default_factory=set)
    failures: int = 1
    held_back: int = 0


class FailureLog:
    """Logs failures of the world at most once per kind per `interval`, saying how many repeats it held
    back, and once more after they stop. `effect` says what the failures do, e.g. "tool calls answer
    UNAVAILABLE"; `recovered(work)` is called when work succeeds.

    A failure is over when work that failed in it succeeds: a claim that works says nothing of the full
    disk a report needs, so a caller with several kinds of work names which one failed and which one
    succeeded (tool calls: the tool). Once nothing has failed for an interval, any success ends it. Work
    that began before the last failure (`began`, from `now()`) ends nothing: a call already holding a
    connection finishes while the database is cutting the others, and that is the outage's start."""

    def __init__(
        self,
        log: logging.Logger,
        effect: str,
        *,
        interval: float = LOG_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self._effect = effect
        self._interval = interval
        self._clock = clock
        self._episodes: dict[Kind, _Episode] = {}

    def now(self) -> float:
        """The clock `recovered(began=...)` compares with."""
        return self._clock()

    def failed(self, failure: WorldFailure, work: str = "") -> None:
        now = self._clock()
        episode = self._episodes.get(failure.kind)
        if episode is None:
            self._episodes[failure.kind] = _Episode(started=now, last_line=now, last_failure=now, work={work})
            self._log.warning(
                "%s: %s (%s; logged once per %.0fs while it lasts)",
                failure.kind,
                failure.detail,
                self._effect,
                self._interval,
            )
            return
        episode.failures += 1
        episode.last_failure = now
        episode.work.add(work)
        if now - episode.last_line < self._interval:
            episode.held_back += 1
            return
        self._log.warning(
            "%s: %s (still; %d more since the last line, %d in %.0fs)",
            failure.kind,
            failure.detail,
            episode.held_back + 1,
            episode.failures,
            now - episode.started,
        )
        episode.last_line = now
        episode.held_back = 0

    def failed_on(self, exc: BaseException, work: str = "") -> bool:
        """Log `exc` if it is a failure of the world; False for anything else (the caller logs that)."""
        failure = world_failure(exc)
        if failure is None:
            return False
        self.failed(failure, work)
        return True

    def recovered(self, work: str = "", began: float | None = None) -> None:
        """`work`, begun at `began` (default: now), succeeded: close, with one line each, the episodes it
        failed in, and those with no failure for an interval."""
        if not self._episodes:
            return
        now = self._clock()
        for kind, episode in list(self._episodes.items()):
            if began is not None and began <= episode.last_failure:
                continue
            if work in episode.work or now - episode.last_failure >= self._interval:
                self._log.warning(
                    "%s: over after %.1fs, %d failure(s) in all", kind, now - episode.started, episode.failures
                )
                del self._episodes[kind]


def _sa() -> Any:
    """sqlalchemy.exc, imported on first use (`jct serve --stdio` answers `initialize` before it loads SQLAlchemy)."""
    from sqlalchemy import exc

    return exc


async def every(
    interval: float,
    step: Callable[[], Awaitable[object]],
    log: logging.Logger,
    *,
    effect: str,
    what: str,
    pause: Callable[[float], Awaitable[object]] = anyio.sleep,
) -> None:
    """Run `step` every `interval` seconds until cancelled (`pause`: how it waits; one that may end early, like
    server/core/nudge.py `Nudge.pause`, runs the next pass sooner). A failed pass is logged and the next one tries
    again: a failure of the world as one line per interval while it lasts (`FailureLog`, with `effect`), anything
    else with its traceback ("`what` failed")."""
    failures = FailureLog(log, effect)
    while True:
        began = failures.now()
        try:
            await step()
        except Exception as exc:
            if not failures.failed_on(exc):
                log.exception("%s failed; retrying in %.1fs", what, interval)
        else:
            failures.recovered(began=began)
        await pause(interval)
