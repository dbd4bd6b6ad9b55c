"""Which connection a call came through, when it is one that shows it lives (server/core/claims/holding.py).

Light on purpose: `jct serve --stdio` sets `CURRENT` before it answers `initialize`, on its lean start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from anyio import CancelScope


@dataclass(frozen=True)
class Holder:
    """A client connection that can say whether it still lives."""

    name: str
    live: Callable[[], bool] = field(compare=False)


# The connection the current call came through, when it is one that shows it lives; None: nothing holds
# the runs it claims (a stateless request of no agent listening here). Set by the transport: for the whole
# process on stdio, for each request of a legacy HTTP session or SSE connection, and for each stateless request
# with an X-JCT-Agent header, live while that agent's listen stream is open (server/session_guard.py).
CURRENT: ContextVar[Holder | None] = ContextVar("jct_holder", default=None)


class HangUp:
    """Set when the client hangs up before the current call's answer: a legacy HTTP session's POST, whose answer
    travels on that request's own event stream (JCT keeps no event store, so a later GET cannot resume it).
    The SDK keeps running the call; work under `cancelled_by_it` is cancelled instead. A cancel scope per call
    and none of its own tasks: a call that never waits pays next to nothing for it."""

    def __init__(self) -> None:
        self._set = False
        self._scopes: set[CancelScope] = set()

    def set(self) -> None:
        self._set = True
        for scope in list(self._scopes):
            scope.cancel()

    @contextmanager
    def cancelled_by_it(self) -> Iterator[None]:
        """The block runs in a cancel scope that the hang-up cancels (at once, if it has happened)."""
        import anyio  # not at import: `jct serve --stdio` starts lean

        with anyio.CancelScope() as scope:
            if self._set:
                scope.cancel()
            self._scopes.add(scope)
            try:
                yield
            finally:
                self._scopes.discard(scope)


# The current call's HangUp; None where nothing says so (stdio, SSE and stateless requests end their calls with
# the connection). A call that waits (jct_claim_next's wait_seconds) stops at it.
HUNG_UP: ContextVar[HangUp | None] = ContextVar("jct_hung_up", default=None)


def process_holder() -> Holder:
    """A `jct serve --stdio` process: its one client's connection lives as long as the process does."""
    return Holder("stdio", lambda: True)
