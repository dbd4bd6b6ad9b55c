"""Claims that wait for work (DESIGN section 17): `jct_claim_next(wait_seconds=...)` without polling.

A waiting claim tries once; with nothing to claim it sleeps here until the change feed of its process
(server/notify/feed.py, one audit-log read per interval for the whole process) sees an action that can make a
task claimable (server/core/audit.py CLAIMABLE), which `wake`s every waiter; an idle waiter costs no query.
Each woken waiter tries one claim, and sleeps again if there was nothing for it.

A wake-up never turns into one query per waiter: woken waiters with the same filters (operation, repo_prefix)
take turns (a lock per filter), and once one of them found nothing, the others of that wake-up skip their try:
nothing more can be claimable for those filters until a later change, which wakes them again. Sound because a
claim's outcome depends only on the queue and the filters (a principal over its cap is refused, not answered
"nothing"). So a wake-up costs, per process, one query per filter in use plus one per task claimed. The feed
also wakes everyone every RECHECK_SECONDS: the net for what no audit row announces (on PostgreSQL a claim walk
skips a repository another claimer has locked for a moment).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import anyio

from server.errors import ErrorCode, JctError

T = TypeVar("T")
# What a waiting claim filters on: (operation, repo_prefix).
Filters = tuple[str | None, str | None]

# Every waiter is woken at least this often even when no audit row says so (see the module docstring).
RECHECK_SECONDS = 30.0


class Waiters:
    """The claims waiting in this process: woken together by `wake`, answered at once after `stop`."""

    def __init__(self) -> None:
        # Counts the wake-ups; a waiter notes it before its try, and a later value means "try again".
        self.generation = 0
        self._stopping = False
        self._woken: anyio.Event | None = None  # made on first wait: an Event needs a running event loop
        self._principals: Counter[str] = Counter()
        self._agents: Counter[str] = Counter()  # the same calls by actor_id (jct_list_agents' waiting state)
        self._filters: Counter[Filters] = Counter()
        self._turns: dict[Filters, anyio.Lock] = {}
        # Filters a try found nothing for, and the generation it began in.
        self._empty: dict[Filters, int] = {}
        # Woken waiters' turns since the start: claims tried, and tries skipped (/metrics shows both).
        self.tried = 0
        self.skipped = 0

    @property
    def count(self) -> int:
        return self._principals.total()

    def wake(self) -> None:
        """Something may have become claimable: every waiter tries again (the feed calls this)."""
        self.generation += 1
        self._empty.clear()
        if self._woken is not None:
            self._woken.set()
            self._woken = None

    def stop(self) -> None:
        """The server is shutting down: every waiter answers now, and no call waits any more."""
        self._stopping = True
        self.wake()

    def stopped(self) -> bool:
        return self._stopping

    @contextmanager
    def entered(self, principal: str, filters: Filters, limit: int | None, agent: str = "") -> Iterator[None]:
        """Count one waiting call of `principal` (acting as `agent`) while inside; PERMISSION_DENIED past `limit`
        of them."""
        if limit is not None and self._principals[principal] >= limit:
            raise JctError(
                ErrorCode.PERMISSION_DENIED,
                f"You already have {self._principals[principal]} jct_claim_next calls waiting for work on this "
                f"server; the limit per agent is {limit} (JCT_MAX_CLAIMS_PER_AGENT).",
                "Let one of them return first, or call jct_claim_next with wait_seconds=0.",
            )
        self._principals[principal] += 1
        self._agents[agent or principal] += 1
        self._filters[filters] += 1
        try:
            yield
        finally:
            self._principals[principal] -= 1
            if not self._principals[principal]:
                del self._principals[principal]
            self._agents[agent or principal] -= 1
            if not self._agents[agent or principal]:
                del self._agents[agent or principal]
            self._filters[filters] -= 1
            if not self._filters[filters]:
                del self._filters[filters]
                self._turns.pop(filters, None)
                self._empty.pop(filters, None)

    def waiting_agents(self) -> list[str]:
        """The agents (actor_id) with a jct_claim_next call waiting in this process now."""
        return list(self._agents)

    async def woken(self, since: int) -> None:
        """Return once there has been a wake-up after generation `since` (at once if there has)."""
        while self.generation == since:
            if self._woken is None:
                self._woken = anyio.Event()
            await self._woken.wait()

    async def take_turn(self, filters: Filters, claim: Callable[[], Awaitable[T | None]]) -> T | None:
        """One try of a woken waiter: after the others with its filters, and skipped (None) when one of them
        found nothing since the last wake-up."""
        turn = self._turns.setdefault(filters, anyio.Lock())
        async with turn:
            generation = self.generation
            if self._empty.get(filters) == generation:
                self.skipped += 1
                return None
            self.tried += 1
            claimed = await claim()
            if claimed is None and self.generation == generation:
                self._empty[filters] = generation
            return claimed
