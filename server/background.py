"""What every server process runs beside the transports: the lease sweeper and the change feed."""

from __future__ import annotations

import anyio

from server.core.service import Core
from server.core.sweeper import run_sweeper
from server.notify.feed import ChangeFeed
from server.notify.hub import NotificationHub


async def run_background(core: Core, hub: NotificationHub) -> None:
    """Runs until cancelled. The feed starts at the newest audit row, so it announces changes from now on."""
    feed = ChangeFeed(core, hub.deliver, core.settings.notify_interval_seconds)
    await feed.start_position()
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_sweeper, core, core.settings.sweep_interval_seconds)
        tg.start_soon(feed.run)
