"""The HTTP connections `jct serve` holds, bounded: a header deadline, a connection cap, floods logged once.

uvicorn closes a keep-alive connection left idle between requests (`timeout_keep_alive`), but a connection
that sends part of a request's headers and then nothing, or a byte every few seconds, is held forever, and
so is its file descriptor; about a thousand such sockets used up a 1,024-file limit and locked every client
out, while asyncio logged a traceback for each `accept()` that failed. So:

- a connection must send a request's complete headers within JCT_HEADER_TIMEOUT_SECONDS of connecting, or of
  its previous response, or it is closed;
- past JCT_MAX_CONNECTIONS open connections, the one that has waited longest for its headers is closed to
  make room (a slow sender loses its place, a client whose request is running never does); when every
  connection is running a request, the new one is closed. The cap is kept below the process's open-file
  limit with room for what asyncio accepts in one turn of its loop (ACCEPT_BATCH), so `accept()` itself
  does not fail (when it does, asyncio logs a traceback per waiting connection);
- a line the server repeats (uvicorn's "Invalid HTTP request", asyncio's failed accept, these closings) is
  logged once per interval, with how many it held back.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("jct.connections")

LOG_INTERVAL = 10.0
# The listen backlog, which is also how many connections asyncio accepts in one turn of its loop, before
# any of them is seen here: the most the cap can be overshot by, until the next turn closes the extra ones.
ACCEPT_BATCH = 64
# Open files kept for everything but client connections: the overshoot above, database connections, the
# log, git, the trace store.
RESERVED_FILES = 256


def connection_cap(wanted: int) -> int:
    """`wanted`, lowered to leave RESERVED_FILES of the process's open-file limit for the rest of JCT."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or wanted + RESERVED_FILES <= soft:
        return wanted
    cap = max(1, soft - RESERVED_FILES)
    log.warning(
        "JCT_MAX_CONNECTIONS=%d does not fit the open-file limit (%d): capping connections at %d", wanted, soft, cap
    )
    return cap


class Repeats:
    """Says whether a line should be logged now: the first of its kind, then at most once per `interval`,
    with how many were held back since."""

    def __init__(self, interval: float = LOG_INTERVAL, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = interval
        self._clock = clock
        self._last: dict[object, tuple[float, int]] = {}

    def due(self, kind: object) -> int | None:
        """None to hold the line back; else how many of its kind were held back before it."""
        now = self._clock()
        last, held = self._last.get(kind, (-self._interval, 0))
        if now - last < self._interval:
            self._last[kind] = (last, held + 1)
            return None
        if len(self._last) > 1000:
            self._last.clear()
        self._last[kind] = (now, 0)
        return held


class OncePerInterval(logging.Filter):
    """A logging filter: each message template at most once per interval, without the traceback of its
    repeats' first line either (a flood's tracebacks are all alike), saying how many were held back."""

    def __init__(self, repeats: Repeats | None = None) -> None:
        super().__init__()
        self._repeats = repeats or Repeats()

    def filter(self, record: logging.LogRecord) -> bool:
        # asyncio formats its messages itself (a handle's repr, a time): its first words name the kind.
        kind = record.msg if record.args or not isinstance(record.msg, str) else record.msg.split("\n")[0][:40]
        held = self._repeats.due((record.name, kind))
        if held is None:
            return False
        if held:
            record.msg = f"{record.msg} (and {held} more like it in the last {LOG_INTERVAL:.0f}s)"
            record.exc_info = None
            record.exc_text = None
        return True


def quiet_floods() -> None:
    """Install OncePerInterval where a flood of connections makes lines: uvicorn's and asyncio's loggers."""
    for name in ("uvicorn.error", "asyncio"):
        logging.getLogger(name).addFilter(OncePerInterval())


def guarded_protocol(header_timeout: float, max_connections: int) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a header deadline and a connection cap (given to uvicorn as `http`)."""
    closings = Repeats()

    def closed(why: str, count: int = 1) -> None:
        held = closings.due(why)
        if held is not None:
            log.warning("closed %d connection(s): %s (logged once per %.0fs)", held + count, why, LOG_INTERVAL)

    class GuardedH11Protocol(H11Protocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._headers_due: asyncio.TimerHandle | None = None
            self.waiting_since: float | None = None  # waiting for a request's headers since (loop time)
            self._answered: object = None  # the request/response cycle whose headers came last

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._wait_for_headers()
            if len(self.connections) > max_connections:
                self._make_room()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_waiting()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.cycle is not None and self.cycle is not self._answered:
                self._answered = self.cycle  # a request's headers are in: it runs for as long as it needs
                self._stop_waiting()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.cycle is self._answered:
                self._wait_for_headers()  # keep-alive: the next request's headers are due in time too

        def _wait_for_headers(self) -> None:
            self._stop_waiting()
            self.waiting_since = self.loop.time()
            self._headers_due = self.loop.call_later(header_timeout, self._headers_late)

        def _stop_waiting(self) -> None:
            self.waiting_since = None
            if self._headers_due is not None:
                self._headers_due.cancel()
                self._headers_due = None

        def _headers_late(self) -> None:
            self._headers_due = None
            if not self.transport.is_closing():
                closed(f"no complete request headers within {header_timeout:g}s (JCT_HEADER_TIMEOUT_SECONDS)")
                self.transport.close()

        def _make_room(self) -> None:
            waiting = [
                (c.waiting_since, c)
                for c in self.connections
                if isinstance(c, GuardedH11Protocol) and c.waiting_since is not None and c is not self
            ]
            victim = min(waiting, key=lambda pair: pair[0])[1] if waiting else self
            closed(f"more than {max_connections} open (JCT_MAX_CONNECTIONS)")
            victim._stop_waiting()
            victim.transport.close()
            self.connections.discard(victim)

    return GuardedH11Protocol
