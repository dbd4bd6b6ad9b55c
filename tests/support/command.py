"""The `jct` command run as an operator runs it: its exit status, stdout and stderr.

`jct` runs the command table in this process, in a worker thread with the command's own environment, working
directory and output streams: a command's start as a process (about 1.5 s of imports) would otherwise be most of
a CLI test's time. `jct_process` runs `python -m server` as a process, for tests whose subject is the process
(`serve`, signals, start-up) and for one test per command group, so the entry point itself stays tested.
"""

from __future__ import annotations

import io
import os
import sys
import threading
import traceback
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, chdir, redirect_stderr, redirect_stdout
from functools import cache
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process

from tests.transports.conftest import server_env, subprocess_env

COMMAND_SECONDS = 60


def local_env(tmp_path: Path) -> dict[str, str]:
    """JCT_* for a command on its own SQLite database in tmp_path (created and migrated by the first command)."""
    return server_env(f"sqlite:///{tmp_path / 'cli.db'}", tmp_path)


# The environment, the working directory and sys.stdout/sys.stderr belong to the process: one command at a time.
_ONE_COMMAND = threading.Lock()


@cache
def _command_table() -> Callable[..., Any]:
    """What `python -m server` calls, as a click command's `main`."""
    import typer.main

    from server.cli.commands import app

    return typer.main.get_command(app).main


def _run_in_process(tmp_path: Path, args: tuple[str, ...], env: dict[str, str]) -> tuple[int, str, str]:
    from server.cli import render

    out, err = io.StringIO(), io.StringIO()
    with _ONE_COMMAND:
        saved, stdin = os.environ.copy(), sys.stdin
        os.environ.clear()
        os.environ.update(subprocess_env(env))
        sys.stdin = io.StringIO("")  # a process started with nothing on its stdin reads end of file
        try:
            with chdir(tmp_path), redirect_stdout(out), redirect_stderr(err):
                width = render.width()  # the console was made for the test process's stdout, not this one
                assert width is not None, "the output is captured, not a terminal"
                render.console.width = width
                try:
                    _command_table()(args=list(args), prog_name="jct", standalone_mode=True)
                    code = 0
                except SystemExit as exit_:
                    code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
                except Exception:  # what a process would print before dying with status 1
                    traceback.print_exc()
                    code = 1
        finally:
            os.environ.clear()
            os.environ.update(saved)
            sys.stdin = stdin
    return code, out.getvalue(), err.getvalue()


async def jct(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run `jct ARGS` in tmp_path with the given JCT_* settings, in this process; (returncode, stdout, stderr)."""
    with anyio.fail_after(COMMAND_SECONDS):
        return await anyio.to_thread.run_sync(_run_in_process, tmp_path, args, env or {}, abandon_on_cancel=True)


async def jct_process(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run `python -m server ARGS` as a process in tmp_path with the given JCT_* settings; (returncode, stdout,
    stderr)."""
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
