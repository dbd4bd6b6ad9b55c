"""Connection-held runs (DESIGN section 17): a live connection renews the leases of the runs claimed through it.

A claim made through a connection that shows it lives (a `jct serve --stdio` process: the process itself; a
legacy streamable HTTP session while its GET event stream is open; an SSE connection while it is open; a
stateless request whose X-JCT-Agent header matches a `subscriptions/listen` stream of its principal open in
this process, while that stream is open: server/sessions.py `agent_holder`) gets
the short lease, JCT_LIVE_LEASE_SECONDS, and this process renews it every third of that while the connection
still shows it lives and the run is within its time budget (`budget_ends_at`). A dead agent's task is therefore
claimable again a short lease (plus a sweep) after its connection went, and a live agent that runs a long test
without calling JCT keeps its claim until its time budget ends. A claim nobody holds (a stateless HTTP
request without the header, or whose agent has no listen stream in this process) gets JCT_LEASE_SECONDS and
lives by the agent's own calls. A process holds only the runs claimed or fenced through it: it adopts no run
by its actor id.

The transport says which connection a call came through by setting `CURRENT` (server/cli/stdio.py for the
process, server/session_guard.py per HTTP request); core reads it when it claims or fences. The renewal is one
UPDATE per process per period for all the runs it holds (server/db/leases.py `renew_held`), which never
revives a run whose lease ran out or that another process swept, and never counts as a sign of activity
(jct_list_stuck reads run events, not leases). A process that stops on SIGTERM hands its held runs the long
lease (`hand_back`): the agents outlive it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from server.config import Settings
from server.core.claims.holders import CURRENT, Holder
from server.db import leases
from server.failures import every

if TYPE_CHECKING:
    from server.core.service import Core  # Core holds the Holdings

log = logging.getLogger(__name__)


@dataclass
class Holdings:
    """The runs this process renews: each with the connection it renews it for, and when it last renewed it
    (the monotonic clock)."""

    settings: Settings
    clock: Callable[[], float] = time.monotonic
    _runs: dict[str, tuple[Holder, float]] = field(default_factory=dict)

    def holder(self) -> Holder | None:
        """The current call's connection, if it lives now (never with JCT_LIVE_LEASE_SECONDS=0)."""
        if not self.settings.live_lease_seconds:
            return None
        holder = CURRENT.get()
        return holder if holder is not None and holder.live() else None

    def lease_seconds(self) -> float:
        """The lease a claim or a fenced call of the current call gets: short when its connection renews it."""
        return self.settings.live_lease_seconds if self.holder() is not None else self.settings.lease_seconds

    def hold(self, run_id: str) -> None:
        """Renew `run_id` (claimed or just fenced by the current call, so its lease is fresh) while the call's
        connection lives."""
        holder = self.holder()
        if holder is not None:
            self._runs[run_id] = (holder, self.clock())

    def held(self) -> list[str]:
        """The runs to renew now: those whose connection lives. A run whose connection does not is skipped (a GET
        stream may be reconnecting), and forgotten once the lease it was last given has run out."""
        now = self.clock()
        live = []
        for run_id, (holder, renewed) in list(self._runs.items()):
            if holder.live():
                live.append(run_id)
            elif now - renewed > self.settings.live_lease_seconds:
                del self._runs[run_id]
        return sorted(live)

    def renewed(self, asked: list[str], renewed: set[str]) -> None:
        """The renewal of `asked` renewed `renewed`; the others ended, expired or ran out of budget: forgotten."""
        now = self.clock()
        for run_id in asked:
            entry = self._runs.get(run_id)
            if entry is None:
                continue
            if run_id in renewed:
                self._runs[run_id] = (entry[0], now)
            else:
                del self._runs[run_id]

    def let_go(self) -> list[str]:
        """Stop renewing anything; the runs held until now."""
        held, self._runs = sorted(self._runs), {}
        return held


async def renew_once(core: Core) -> int:
    """Renew every held run whose connection lives, in one statement; forget the ones it did not renew (ended,
    expired, swept by another process, past their time budget). How many it renewed."""
    held = core.holdings.held()
    if not held:
        return 0
    # A renewal lost to a database crash costs nothing: the next one comes a third of a lease later.
    async with core.db.write(durable=False) as conn:
        renewed = await leases.renew_held(conn, held, core.now(), core.settings.live_lease_seconds)
    core.holdings.renewed(held, renewed)
    return len(renewed)


async def hand_back(core: Core) -> int:
    """A draining HTTP process (SIGTERM) hands its held runs the lease nobody renews (JCT_LEASE_SECONDS): their
    agents live on and will reconnect to another replica, whose sessions know nothing of these runs; a call
    naming its run_id there renews the claim again. How many runs it handed back."""
    held = core.holdings.let_go()
    if not held:
        return 0
    async with core.db.write() as conn:
        handed = await leases.renew_held(conn, held, core.now(), core.settings.lease_seconds)
    return len(handed)


async def run_renewer(core: Core) -> None:
    """Renew held runs every third of the live lease, forever; a failed pass is logged and tried next period."""
    if not core.settings.live_lease_seconds:
        return  # off: no connection holds a run
    period = core.settings.live_lease_seconds / 3
    effect = "held leases are not renewed meanwhile"
    await every(period, partial(renew_once, core), log, effect=effect, what="lease renewal")
