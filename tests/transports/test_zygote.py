"""The servers tests start as forks of their worker's zygote (tests/support/zygote.py) are processes of their own,
with the test's directory and environment, that end as `python -m server` ends, and never outlive whoever
started them."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import pytest

from tests.support.zygote import Forked, spawn
from tests.transports.conftest import free_port, server_env, stop_process, subprocess_env, wait_ready

pytestmark = [pytest.mark.anyio, pytest.mark.dialects("sqlite")]

GONE_SECONDS = 30


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for its monitor to reap it."""
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


async def _forked_server(database_url: str, tmp_path: Path) -> tuple[Forked, int]:
    port = free_port()
    with (tmp_path / "serve.log").open("wb") as log:
        process = await spawn(
            ["serve", "--port", str(port)], subprocess_env(server_env(database_url, tmp_path)), tmp_path, log
        )
    assert isinstance(process, Forked)
    assert await wait_ready(process, f"http://127.0.0.1:{port}"), (tmp_path / "serve.log").read_text()
    return process, port


async def test_a_forked_server_is_its_own_process_in_the_test_s_directory_and_environment(
    database_url: str, tmp_path: Path
) -> None:
    process, _port = await _forked_server(database_url, tmp_path)
    try:
        assert process.pid != os.getpid()
        assert Path(f"/proc/{process.pid}/cwd").resolve() == tmp_path.resolve()
        # Its JCT_DATABASE_URL is the test's (/proc's environ shows the zygote's start; the fork set its own since).
        opened = {Path(f"/proc/{process.pid}/fd/{fd}").resolve() for fd in os.listdir(f"/proc/{process.pid}/fd")}
        assert database_url.removeprefix("sqlite+aiosqlite:///") in {str(path) for path in opened}
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(GONE_SECONDS):
            code = await process.wait()
        assert code in (0, -signal.SIGTERM), (tmp_path / "serve.log").read_text()  # as `python -m server` ends
    finally:
        await stop_process(process)


async def test_a_killed_forked_server_reports_its_signal(database_url: str, tmp_path: Path) -> None:
    process, _port = await _forked_server(database_url, tmp_path)
    process.kill()
    with anyio.fail_after(GONE_SECONDS):
        assert await process.wait() == -signal.SIGKILL
    assert not _alive(process.pid)


async def test_a_server_whose_test_went_away_is_killed(database_url: str, tmp_path: Path) -> None:
    process, _port = await _forked_server(database_url, tmp_path)
    process._conn.close()  # what a cancelled or killed test leaves: its end of the monitor's socket closed
    with anyio.fail_after(GONE_SECONDS):
        while _alive(process.pid):
            await anyio.sleep(0.05)
