"""What every server process runs beside the transports: the lease sweeper and the change feed."""

from __future__ import annotations

import anyio
from anyio.abc import TaskStatus

from server.core.claims.holding import run_renewer
from server.core.claims.sweeper import run_sweeper
from server.core.integration.integrator import run_integrator
from server.core.service import Core
from server.notify.feed import ChangeFeed
from server.notify.hub import NotificationHub

# How often each process looks for waiting integrations (one indexed query).
INTEGRATE_INTERVAL_SECONDS = 1.0


async def run_background(
    core: Core, hub: NotificationHub, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Runs until cancelled. Reports started once the feed holds its start position (the newest
    audit row), so a server that says it is ready announces every change made after that."""
    feed = ChangeFeed(core, hub.deliver, core.settings.notify_interval_seconds)
    async with anyio.create_task_group() as tg:
        await tg.start(hub.run)
        # What calls hand off to be done after they answer (a completion's manifest), done before an exit too.
        await tg.start(core.handoffs.run)
        await feed.start_position()
        expired = hub.metrics.leases_expired
        tg.start_soon(
            run_sweeper, core, core.settings.sweep_interval_seconds, lambda report: expired.inc(report.expired)
        )
        tg.start_soon(feed.run)
        # The leases of runs claimed through this process's live connections (DESIGN section 17).
        tg.start_soon(run_renewer, core)
        # The merge queue: approved work of integrable repositories, merged in the background (DESIGN 16).
        tg.start_soon(run_integrator, core, INTEGRATE_INTERVAL_SECONDS)
        # Workflow files are read now, so a broken one is reported at start (and left out, never fatal).
        await anyio.to_thread.run_sync(core.workflows.catalog)
        task_status.started()
