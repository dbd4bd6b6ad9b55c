"""A pause another task can cut short: the integrator's between passes, which the change feed ends when work
joins the merge queue (server/notify/feed.py), in whichever process it was queued."""

from __future__ import annotations

import anyio


class Nudge:
    """A pause between passes of a loop that another task can end early: `pause(seconds)` returns after `seconds`,
    or at once after `nudge()` (one made while nobody pauses ends the next pause)."""

    def __init__(self) -> None:
        self._nudged = False
        self._event: anyio.Event | None = None  # made by `pause`, inside the event loop

    def nudge(self) -> None:
        self._nudged = True
        if self._event is not None:
            self._event.set()

    async def pause(self, seconds: float) -> None:
        if not self._nudged:
            self._event = anyio.Event()
            with anyio.move_on_after(seconds):
                await self._event.wait()
            self._event = None
        self._nudged = False
