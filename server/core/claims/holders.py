"""Which connection a call came through, when it is one that shows it lives (server/core/claims/holding.py).

Light on purpose: `jct serve --stdio` sets `CURRENT` before it answers `initialize`, on its lean start.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Holder:
    """A client connection that can say whether it still lives."""

    name: str
    live: Callable[[], bool] = field(compare=False)


# The connection the current call came through, when it is one that shows it lives; None: nothing holds
# the runs it claims (a stateless request of no agent listening here). Set by the transport: for the whole
# process on stdio, for each request of a legacy HTTP session or SSE connection, and for each stateless request
# with an X-JCT-Agent header, live while that agent's listen stream is open (server/sessions.py).
CURRENT: ContextVar[Holder | None] = ContextVar("jct_holder", default=None)


def process_holder() -> Holder:
    """A `jct serve --stdio` process: its one client's connection lives as long as the process does."""
    return Holder("stdio", lambda: True)
