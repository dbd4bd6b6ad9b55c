"""`jct serve --stdio`, started lean: a client starts one per session and waits for its `initialize` answer.

So this path imports neither the command table (typer, rich) nor Alembic when the schema is current
(server/db/migrate.py), and it answers `initialize` before JCT is ready: the server (name, instructions,
capabilities) exists at once, while opening the database and registering the tools, resources and prompts
runs in a worker thread; every other request waits until that is done (`JctServer.ready`). A database that
cannot be opened still ends the process with one line on stderr. bench/stdio_start.py measures the start
beside a bare stdio server of the same SDK.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import anyio

from server.config import Settings

if TYPE_CHECKING:
    from server.core.service import Core
    from server.mcp import JctServer


# How long the start waits for the client's `initialize` before it opens the database anyway.
HANDSHAKE_SECONDS = 2.0
AFTER_ANSWER_SECONDS = 0.02


def main() -> None:
    """`jct serve --stdio` without the command table: the same settings, logging and one-line failures."""
    from server.cli.startup import StartupError, configure_logging, load_settings

    try:
        settings = load_settings()
    except Exception as exc:  # fail() has written the one line; typer.Exit carries the status
        sys.exit(getattr(exc, "exit_code", 2))
    configure_logging(settings)
    try:
        anyio.run(serve_stdio, settings)
    except StartupError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)


async def serve_stdio(settings: Settings) -> None:
    from server.cli.startup import StartupError
    from server.core.models import local_user
    from server.identity import LocalIdentity
    from server.mcp import new_server
    from server.notify.hub import NotificationHub

    # Each stdio process is its own agent (`alice-3f2a9c`) unless JCT_AGENT_ID names it.
    identity = LocalIdentity(settings.agent_id, fixed=True) if settings.agent_id else LocalIdentity(local_user())
    mcp = new_server(identity, NotificationHub(None, settings.max_subscriptions_per_session))
    ready = mcp.ready = anyio.Event()
    failed: list[StartupError] = []
    settled = anyio.Event()  # ready, or failed to start

    async with anyio.create_task_group() as tg:

        async def start() -> None:
            # Loading and registering in a worker thread still takes turns with the event loop for the
            # interpreter, so it starts once `initialize` is answered (or after a moment, whatever comes).
            with anyio.move_on_after(HANDSHAKE_SECONDS):
                await mcp.answered.wait()
                await anyio.sleep(AFTER_ANSWER_SECONDS)  # the answer's write to stdout goes first
            try:
                core = await _open(settings, mcp)
            except StartupError as exc:
                failed.append(exc)
                settled.set()
                tg.cancel_scope.cancel()
                return
            try:
                from server.background import run_background

                await tg.start(run_background, core, mcp.hub)
                ready.set()
                settled.set()
                await anyio.sleep_forever()
            finally:
                with anyio.CancelScope(shield=True):
                    await core.close()

        tg.start_soon(start)
        # The process is its client's connection: it renews the runs claimed through it while it lives.
        from server.core.claims.holders import CURRENT, process_holder

        CURRENT.set(process_holder())
        await mcp.run_stdio_async()
        # The client is gone (stdin closed); a start under way still ends in one line if it fails.
        await settled.wait()
        tg.cancel_scope.cancel()
    if failed:
        raise failed[0]


async def _open(settings: Settings, mcp: JctServer) -> Core:
    """Open and prepare the database and register the tools, resources and prompts: the imports and the
    registration in a worker thread, so the event loop answers `initialize` meanwhile."""
    from server.cli.common import open_core, prepare_database

    core = await anyio.to_thread.run_sync(open_core, settings)
    try:
        await prepare_database(core)
        await anyio.to_thread.run_sync(_populate, mcp, core)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await core.close()
        raise
    return core


def _populate(mcp: JctServer, core: Core) -> None:
    from server.mcp import populate

    populate(mcp, core)
