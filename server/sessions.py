"""Open sessions and event streams: capped per principal, least recently used closed first, never refused.

Three kinds of things stay open between requests and hold memory in this process:

- `session`: a legacy streamable HTTP session (the `initialize` handshake over /mcp), with its GET stream;
- `sse`: a legacy HTTP+SSE connection (GET /sse, its messages POSTed to /messages/);
- `listen`: a 2026-07-28 `subscriptions/listen` stream (a POST to /mcp that stays open); with its X-JCT-Agent
  header it holds the claims of that agent's stateless calls while it is open (`agent_holder`);
- `ui`: a dashboard page's event stream (/ui/events).

`Sessions` keeps one `Entry` for each, with the principal that opened it and the credential (the token) it
was opened with. A new one is never refused, and no client can close another's by opening its own:

- With tokens, a client is its token's principal. Opening one past `per_principal` for its principal closes
  that principal's least recently used one; past `total` it closes the least recently used idle one of
  anyone (no request in flight), or the least recently used of all when none is idle.
- Without tokens, nothing tells one client from another but the entry itself: every caller is `local`, its
  remote address is 127.0.0.1 like everyone's (and a local program may send from any address of
  127.0.0.0/8), and a session id is JCT's to hand out but anyone can ask for as many as it likes. So each
  entry is its own client (a per-principal cap would let one client close everyone's, as `local`), and only
  `total` bounds them. Past it, the youngest one (the most recently opened, whether or not a request of it
  is in flight) is closed: what was open before a flood outlives it, the flood displaces only itself and
  what opened while it lasts (a client whose session closes re-initializes on the 404), and abandoned
  sessions go at JCT_SESSION_IDLE_SECONDS.

`watch_revocations` closes everything a revoked token opened within a second.

A close request (DELETE) whose token the database cannot check (an outage) is answered 503 and remembered:
`watch_unclosed` closes the session once the token can be checked and proves to be the one that opened it.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from itertools import count
from typing import Any, Literal

import anyio
from anyio.abc import TaskStatus
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from starlette.types import Scope

from server.core.claims.holders import Holder
from server.core.models import LOCAL
from server.taskgroup import HeldTaskGroup

log = logging.getLogger("jct.sessions")

Kind = Literal["session", "sse", "listen", "ui"]
STREAMS: frozenset[Kind] = frozenset({"sse", "listen", "ui"})  # what `Sessions.stream` holds open
Close = Callable[[], Coroutine[Any, Any, None]]
REVOCATION_POLL_SECONDS = 0.5
# Close requests remembered through an outage, at most (each holds a token until the database is back).
MAX_UNCLOSED = 1_000


@dataclass(eq=False)
class Entry:
    key: str
    kind: Kind
    principal: str
    credential: str | None  # the token it was opened with; None without tokens
    close: Close
    last_used: float = 0.0
    busy: int = 0
    opened: float = 0.0
    streams: int = 0  # a legacy session's GET event streams open now
    agent: str | None = None  # a listen stream's X-JCT-Agent header: it vouches for that agent's stateless calls


@dataclass
class Sessions:
    per_principal: int
    total: int
    clock: Callable[[], float] = time.monotonic
    _entries: dict[str, Entry] = field(default_factory=dict)
    _closing: HeldTaskGroup = field(default_factory=HeldTaskGroup)
    _numbers: Iterator[int] = field(default_factory=count)
    # Session id -> the token of a close request the database kept JCT from checking.
    _unclosed: dict[str, str] = field(default_factory=dict)
    # Open listen streams per (principal, X-JCT-Agent): asked on every stateless call with the header.
    _listening: Counter[tuple[str, str]] = field(default_factory=Counter)

    # --- the register -------------------------------------------------------------------------

    def add(self, entry: Entry) -> None:
        """Register `entry`, first closing what it displaces under the caps."""
        entry.last_used = self.clock()
        entry.opened = entry.opened or entry.last_used  # an SSE connection re-registered under its id keeps its age
        if entry.credential is None:  # no token: the entry is its own client, and only the total bounds them
            while len(self._entries) >= self.total:
                victim = _youngest(list(self._entries.values()))
                self._evict(victim, f"{self.total} open in this process (JCT_MAX_SESSIONS); the newest goes first")
            self._put(entry)
            return
        mine = [e for e in self._entries.values() if e.principal == entry.principal]
        while len(mine) >= self.per_principal:
            victim = _least_recently_used(mine)
            mine.remove(victim)
            self._evict(victim, f"{entry.principal} has {self.per_principal} open (JCT_MAX_SESSIONS_PER_PRINCIPAL)")
        while len(self._entries) >= self.total:
            victim = _least_recently_used(list(self._entries.values()))
            self._evict(victim, f"{self.total} open in this process (JCT_MAX_SESSIONS)")
        self._put(entry)

    def remove(self, key: str) -> None:
        self._drop(key)

    def _put(self, entry: Entry) -> None:
        self._drop(entry.key)  # an SSE connection re-registered under its id
        self._entries[entry.key] = entry
        if entry.kind == "listen" and entry.agent is not None:
            self._listening[(entry.principal, entry.agent)] += 1

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None and entry.kind == "listen" and entry.agent is not None:
            listening = (entry.principal, entry.agent)
            self._listening[listening] -= 1
            if self._listening[listening] <= 0:
                del self._listening[listening]

    def touch(self, key: str) -> None:
        entry = self._entries.get(key)
        if entry is not None:
            entry.last_used = self.clock()

    @contextmanager
    def busy(self, key: str) -> Iterator[None]:
        """A request of this session is in flight: it is not idle, and it was used just now."""
        entry = self._entries.get(key)
        if entry is None:
            yield
            return
        entry.busy += 1
        entry.last_used = self.clock()
        try:
            yield
        finally:
            entry.busy -= 1
            entry.last_used = self.clock()

    @contextmanager
    def streaming(self, key: str) -> Iterator[None]:
        """A legacy session's GET event stream is open: the session shows its client lives."""
        entry = self._entries.get(key)
        if entry is None:
            yield
            return
        entry.streams += 1
        try:
            yield
        finally:
            entry.streams -= 1

    def live(self, key: str) -> bool:
        """Whether the session or connection `key` shows its client lives: an SSE connection while it is open, a
        legacy session while its GET event stream is."""
        entry = self._entries.get(key)
        return entry is not None and (entry.kind == "sse" or entry.streams > 0)

    def holder(self, key: str) -> Holder:
        """What renews the runs claimed through session `key` while it shows its client lives
        (server/core/claims/holding.py)."""
        return Holder(key, lambda: self.live(key))

    def listening(self, principal: str, agent: str) -> bool:
        """Whether a `subscriptions/listen` stream opened by `principal` with the X-JCT-Agent header `agent` is
        open in this process."""
        return self._listening[(principal, agent)] > 0

    def agent_holder(self, principal: str, agent: str) -> Holder:
        """What renews the runs a stateless request of `principal` with the X-JCT-Agent header `agent` claims:
        live while that agent's listen stream is open here. The header is self-asserted: the principal is part
        of the key, so with tokens one principal's stream never vouches for another's calls; without tokens
        every caller is `local` and the header is as trusted as anything else a local caller says."""
        return Holder(f"listen:{principal}:{agent}", lambda: self.listening(principal, agent))

    def new_key(self, kind: Kind) -> str:
        return f"{kind}-{next(self._numbers)}"

    def count(self, kind: Kind) -> int:
        return sum(entry.kind == kind for entry in self._entries.values())

    def credentials(self) -> set[str]:
        return {entry.credential for entry in self._entries.values() if entry.credential is not None}

    def close_credentials(self, revoked: set[str]) -> int:
        """Close everything opened with these credentials; how many."""
        gone = [entry for entry in self._entries.values() if entry.credential in revoked]
        for entry in gone:
            self._evict(entry, "its token was revoked")
        return len(gone)

    def end_streams(self, why: str) -> int:
        """Close every stream this module holds open (SSE connections, listens, dashboard streams), with one
        log line for all of them; how many."""
        streams = [entry for entry in self._entries.values() if entry.kind in STREAMS]
        for entry in streams:
            self._evict(entry, why, quiet=True)
        if streams:
            log.info("ending %d event stream(s): %s", len(streams), why)
        return len(streams)

    def close_when_checked(self, key: str, token: str) -> None:
        """A close request for session `key` came with a token JCT could not check (the database away):
        remember it, for `settle_closes`."""
        if key in self._entries and (key in self._unclosed or len(self._unclosed) < MAX_UNCLOSED):
            self._unclosed[key] = token

    def unclosed(self) -> int:
        return len(self._unclosed)

    async def settle_closes(self, subject_of: Callable[[str], Awaitable[str | None]]) -> int:
        """Carry out the remembered close requests whose token now checks out as the one that opened the
        session (`subject_of`: the token's id, None for no valid token; raises while the database is away,
        leaving the rest for the next try). How many sessions closed."""
        closed = 0
        for key, token in list(self._unclosed.items()):
            subject = await subject_of(token)
            self._unclosed.pop(key, None)
            entry = self._entries.get(key)
            if entry is not None and entry.kind == "session" and subject is not None and entry.credential == subject:
                self._evict(entry, "closing it was asked for during a database outage")
                closed += 1
        return closed

    def _evict(self, entry: Entry, why: str, quiet: bool = False) -> None:
        self._drop(entry.key)
        if not quiet:
            log.info("closing %s %s of %s: %s", entry.kind, entry.key, entry.principal, why)
        if self._closing.group is not None:
            self._closing.group.start_soon(entry.close)
        else:  # no task group (the app's lifespan is not running): nothing left to close
            log.debug("no task group to close %s in", entry.key)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Own the task group closings run in, until cancelled."""
        await self._closing.run(task_status=task_status)

    # --- streams this module holds open itself -----------------------------------------------

    @asynccontextmanager
    async def stream(
        self, kind: Kind, principal: str, credential: str | None, agent: str | None = None
    ) -> AsyncIterator[Entry]:
        """Run a long-lived request (an SSE connection, a listen stream) as an entry that closing cancels."""
        scope = anyio.CancelScope()

        async def close() -> None:
            scope.cancel()

        entry = Entry(self.new_key(kind), kind, principal, credential, close, agent=agent)
        self.add(entry)
        try:
            with scope:
                yield entry
        finally:
            self.remove(entry.key)


def _least_recently_used(entries: list[Entry]) -> Entry:
    """The least recently used idle entry, or of all of them when none is idle."""
    idle = [entry for entry in entries if not entry.busy]
    return min(idle or entries, key=lambda entry: entry.last_used)


def _youngest(entries: list[Entry]) -> Entry:
    """The most recently opened entry, busy or not: a flood holding requests in flight must not make an
    older idle session the one to go."""
    return max(entries, key=lambda entry: entry.opened)


def who(scope: Scope) -> tuple[str, str | None]:
    """The principal and credential of an HTTP request (after the front door): a token's name and id, or
    `local` without tokens."""
    user = scope.get("user")
    if isinstance(user, AuthenticatedUser):
        token = user.access_token
        return token.client_id, token.subject
    return LOCAL, None


# --- revocation ---------------------------------------------------------------------------------


async def watch_revocations(
    sessions: Sessions,
    revoked_among: Callable[[set[str]], Awaitable[set[str]]],
    interval: float = REVOCATION_POLL_SECONDS,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Every `interval`, ask which credentials with something open here were revoked, and close what they
    opened. A failed look (the database away) is retried at the next interval."""
    task_status.started()
    while True:
        await anyio.sleep(interval)
        held = sessions.credentials()
        if not held:
            continue
        try:
            gone = await revoked_among(held)
        except Exception as exc:  # the database away: the front door refuses the token's requests anyway
            log.debug("revocation check failed: %s", exc)
            continue
        if gone:
            closed = sessions.close_credentials(gone)
            log.info("revoked tokens: closed %d session(s) and stream(s)", closed)


async def watch_unclosed(
    sessions: Sessions,
    subject_of: Callable[[str], Awaitable[str | None]],
    interval: float = REVOCATION_POLL_SECONDS,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Every `interval`, close the sessions whose close request met a database outage, once it has passed."""
    task_status.started()
    while True:
        await anyio.sleep(interval)
        if not sessions.unclosed():
            continue
        try:
            closed = await sessions.settle_closes(subject_of)
        except Exception as exc:  # still away: the next interval tries again
            log.debug("closing sessions asked for during an outage: still failing: %s", exc)
            continue
        if closed:
            log.info("closed %d session(s) whose close request met a database outage", closed)


def session_entry(sessions: Sessions, session_id: str, requestor: Any, close: Close) -> Entry:
    """The entry of a legacy streamable HTTP session the SDK admitted for `requestor` (its
    AuthorizationContext, or None without tokens)."""
    if requestor is None:
        return Entry(session_id, "session", LOCAL, None, close)
    return Entry(session_id, "session", str(requestor.get("client_id")), requestor.get("subject"), close)
