"""The change feed: every server process follows the audit log by increasing id.

PostgreSQL hands out ids when rows are inserted but makes them visible at commit, so a
follower can see id 12 before id 11 commits. A skipped id is remembered as a hole and
asked for again on each poll until it shows up or HOLE_PATIENCE passes (a rolled-back
transaction burns ids that never appear). SQLite has a single writer: no holes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from server.core import feed
from server.core.audit import CLAIMABLE, AuditAction
from server.core.claims.waiting import RECHECK_SECONDS
from server.core.service import Core
from server.failures import every
from server.notify.changes import Changes

log = logging.getLogger(__name__)

HOLE_PATIENCE = 30.0
BATCH = 500

Deliver = Callable[[Changes], Awaitable[None]]


class ChangeFeed:
    def __init__(self, core: Core, deliver: Deliver, interval: float) -> None:
        self._core = core
        self._deliver = deliver
        self._interval = interval
        self._cursor: int | None = None
        self._holes: dict[int, float] = {}
        self._woke_at = time.monotonic()

    async def start_position(self) -> None:
        """Begin at the newest row: subscribers hear about changes from now on."""
        self._cursor = await feed.latest_audit_id(self._core)

    async def poll(self) -> Changes:
        """Read what is new since the last poll and deliver it. Returns what was delivered."""
        if self._cursor is None:
            await self.start_position()
        assert self._cursor is not None
        now = time.monotonic()
        self._holes = {hole: seen for hole, seen in self._holes.items() if now - seen < HOLE_PATIENCE}
        rows = await feed.audit_after(self._core, self._cursor, self._holes.keys(), BATCH)
        changes = Changes()
        claimable = queued = False
        for row in rows:
            row_id = row.id
            if row_id > self._cursor:
                self._holes.update({missing: now for missing in range(self._cursor + 1, row_id)})
                self._cursor = row_id
            self._holes.pop(row_id, None)
            changes.add(row)
            claimable = claimable or row.action in CLAIMABLE
            queued = queued or row.action == AuditAction.INTEGRATION_QUEUED
        self._wake_waiters(claimable, now)
        if queued:
            self._core.integrator.nudge()  # its next pass now, not at the end of its interval
        if changes:
            await self._deliver(changes)
        return changes

    def _wake_waiters(self, claimable: bool, now: float) -> None:
        """Claims waiting for work try again after a change that can make a task claimable, and every
        RECHECK_SECONDS anyway (server/core/claims/waiting.py)."""
        if claimable or now - self._woke_at >= RECHECK_SECONDS:
            self._woke_at = now
            self._core.waiters.wake()

    async def run(self) -> None:
        effect = "subscribers are not notified meanwhile"
        await every(self._interval, self.poll, log, effect=effect, what="change feed poll")
