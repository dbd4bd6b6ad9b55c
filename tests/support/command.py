"""The `jct` command run as an operator runs it: a process, its exit status, stdout and stderr."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from anyio.abc import Process

from tests.transports.conftest import server_env, subprocess_env

COMMAND_SECONDS = 60


def local_env(tmp_path: Path) -> dict[str, str]:
    """JCT_* for a command on its own SQLite database in tmp_path (created and migrated by the first command)."""
    return server_env(f"sqlite:///{tmp_path / 'cli.db'}", tmp_path)


async def jct(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run `python -m server ARGS` in tmp_path with the given JCT_* settings; (returncode, stdout, stderr)."""
    with anyio.fail_after(COMMAND_SECONDS):
        done = await anyio.run_process(
            [sys.executable, "-m", "server", *args], env=subprocess_env(env or {}), cwd=tmp_path, check=False
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def one_error_line(stderr: str) -> str:
    """A failure as `jct` reports one: a single `error: ...` line on stderr, never a traceback."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got:\n{stderr}"
    assert lines[0].startswith("error: ")
    assert "Traceback" not in stderr
    return lines[0]


@asynccontextmanager
async def piped_process(args: list[str], env: dict[str, str], cwd: Path) -> AsyncIterator[Process]:
    """A process with stdin, stdout and stderr piped to the test; killed and reaped if it has not exited by the end."""
    process = await anyio.open_process(args, env=env, cwd=cwd)
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.CancelScope(shield=True):
            await process.wait()
