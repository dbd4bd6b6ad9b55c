"""`jct serve` as an operator meets it: one clear line for whatever keeps it from starting, and on stdio
nothing but the protocol on stdout."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import anyio
import pytest

from tests.support.command import jct_process, local_env, one_error_line, piped_process
from tests.transports.conftest import free_port, server_env, subprocess_env

pytestmark = pytest.mark.anyio

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/x"


async def test_serve_on_a_busy_port_is_one_line_and_non_zero(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, out, err = await jct_process(tmp_path, "serve", "--port", str(port), env=local_env(tmp_path))
    assert code != 0
    assert one_error_line(err) == f"error: port {port} on 127.0.0.1 is already in use; pass --port or set JCT_PORT"
    assert out == ""


@pytest.mark.parametrize("stdio", [False, True], ids=["http", "stdio"])
async def test_serve_with_an_unreachable_database_is_one_line_and_non_zero(tmp_path: Path, stdio: bool) -> None:
    env = server_env(UNREACHABLE, tmp_path)
    args = ["serve", "--stdio"] if stdio else ["serve", "--port", str(free_port())]
    code, out, err = await jct_process(tmp_path, *args, env=env)
    assert code != 0
    assert "cannot reach the database postgresql+asyncpg://postgres@127.0.0.1:1/x" in one_error_line(err)
    assert out == ""


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("JCT_PORT", "abc", "bad setting JCT_PORT"),
        ("JCT_TOOLSETS", "worker,bogus", "bad setting JCT_TOOLSETS"),
        ("JCT_DATABASE_URL", "mysql://x/y", "unsupported database"),
        ("JCT_HOST", "0.0.0.0", "JCT_AUTH=none"),
        ("JCT_TRACE_ROOT", "s3://bucket/runs", "bad setting JCT_TRACE_ROOT: 's3://bucket/runs' is a s3:// URL"),
        ("JCT_TRACE_ROOT", "file://nas/runs", "bad setting JCT_TRACE_ROOT: 'file://nas/runs' is not a local file"),
    ],
)
async def test_a_bad_setting_is_one_line_and_non_zero(tmp_path: Path, name: str, value: str, expected: str) -> None:
    code, out, err = await jct_process(tmp_path, "serve", env=local_env(tmp_path) | {name: value})
    assert code != 0
    assert expected in one_error_line(err)
    assert out == ""


async def test_stdio_writes_only_protocol_messages_to_stdout(tmp_path: Path) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    env = subprocess_env(local_env(tmp_path) | {"JCT_LOG_LEVEL": "DEBUG"})
    async with piped_process([sys.executable, "-m", "server", "serve", "--stdio"], env, tmp_path) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None
        errors: list[bytes] = []

        async def drain_stderr() -> None:
            # Read stderr as it comes: at DEBUG a start writes far more than a pipe holds, and a full pipe
            # would stop the server mid-start.
            assert process.stderr is not None
            async for chunk in process.stderr:
                errors.append(chunk)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain_stderr)
                await process.stdin.send(json.dumps(initialize).encode() + b"\n")
                received = b""
                while b"\n" not in received:
                    received += await process.stdout.receive()
                await process.stdin.aclose()
                async for chunk in process.stdout:
                    received += chunk
            stderr = b"".join(errors).decode()
            assert await process.wait() == 0, stderr
    messages = [json.loads(line) for line in received.decode().splitlines()]
    assert messages[0]["id"] == 1
    assert messages[0]["result"]["serverInfo"]["name"] == "jct"
    assert all(message["jsonrpc"] == "2.0" for message in messages)
    assert "DEBUG" in stderr or "INFO" in stderr or stderr == ""


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
async def test_serving_a_public_address_without_tokens_is_refused_in_one_line(tmp_path: Path, host: str) -> None:
    code, out, err = await jct_process(tmp_path, "serve", "--host", host, "--port", "1", env=local_env(tmp_path))
    assert code != 0
    line = one_error_line(err)
    assert f"JCT_AUTH=none serves anyone who can reach {host}" in line
    assert "set JCT_AUTH=token" in line
    assert out == ""
