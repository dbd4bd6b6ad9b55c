"""Real `jct serve` processes a test can kill: one or several on one database, each with its own log.

`serving(env, cwd, count)` starts them side by side and yields `Server`s once every `/readyz` answers 200;
a test SIGKILLs one (`server.kill()`) and reads any one's log (`server.log()`). Whatever is still running
at the end is stopped with SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from anyio.abc import Process

from tests.transports.conftest import free_port, open_serve, stop_process, wait_ready

PORT_ATTEMPTS = 3


@dataclass
class Server:
    """One `jct serve` subprocess: its base URL, its process and its log file (stdout and stderr)."""

    name: str
    base_url: str
    process: Process
    log_path: Path

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url}/mcp"

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    async def kill(self) -> None:
        """SIGKILL: no drain, no goodbye; its connections (to clients, to the database) die with it."""
        self.process.send_signal(signal.SIGKILL)
        await self.process.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@asynccontextmanager
async def serve(env: dict[str, str], cwd: Path, name: str = "jct", fork: bool = True) -> AsyncIterator[Server]:
    """`jct serve --port <free port>` with `env` (JCT_* settings: tests/transports/conftest.py `server_env`); a
    fork of the worker's zygote unless `fork=False` (conftest.py `open_serve`)."""
    for _attempt in range(PORT_ATTEMPTS):
        port = free_port()
        log_path = cwd / f"{name}-{port}.log"
        with log_path.open("wb") as log:
            process = await open_serve(port, env, cwd, log, fork)
        server = Server(name, f"http://127.0.0.1:{port}", process, log_path)
        try:
            ready = await wait_ready(process, server.base_url)
        except BaseException:
            await stop_process(process)
            raise
        if ready:
            break
        await stop_process(process)
        if "already in use" not in server.log():  # lost the race for the free port: try another one
            raise RuntimeError(f"jct serve exited with {process.returncode}:\n{server.log()}")
    else:
        raise RuntimeError("could not find a free port for jct serve")
    try:
        yield server
    finally:
        await stop_process(process)


@asynccontextmanager
async def serving(env: dict[str, str], cwd: Path, count: int = 1) -> AsyncIterator[list[Server]]:
    """`count` servers with the same settings, so on the same database."""
    async with AsyncExitStack() as stack:
        # One after another: the contexts of one exit stack are entered by one task.
        yield [await stack.enter_async_context(serve(env, cwd, f"jct{n + 1}")) for n in range(count)]
