"""The HTTP application (health, readiness, host checks) and the `jct` command as an operator meets it."""

from __future__ import annotations

import json
import re
import socket
import sys
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from server.app import create_app
from server.config import Settings
from server.core import completion, queue, work
from server.core.models import Actor
from server.core.service import Core
from tests.transports.conftest import free_port, server_env, subprocess_env

pytestmark = pytest.mark.anyio

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/x"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
ALL_TOOLS = 22


def settings_for(url: str, tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"database_url": url, "home": tmp_path / "home", "trace_root": tmp_path / "traces"}
    return Settings(_env_file=None, **(values | overrides))


def asgi(app: Any) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1")


# --- the application -------------------------------------------------------------------------


async def test_healthz_reports_version_and_tool_count(make_settings: Callable[..., Settings]) -> None:
    async with asgi(create_app(make_settings())) as http:
        response = await http.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "version": version("jct"), "tools": ALL_TOOLS}


async def test_healthz_counts_only_the_selected_toolsets(make_settings: Callable[..., Settings]) -> None:
    async with asgi(create_app(make_settings(toolsets=["worker"]))) as http:
        tools = (await http.get("/healthz")).json()["tools"]
    assert 0 < tools < ALL_TOOLS


async def test_readyz_is_503_until_the_lifespan_migrates_the_database(tmp_path: Path) -> None:
    app = create_app(settings_for(f"sqlite:///{tmp_path / 'fresh.db'}", tmp_path))
    with anyio.fail_after(30):
        async with asgi(app) as http:
            before = await http.get("/readyz")
            assert before.status_code == 503
            assert before.json()["status"] == "unavailable"
            assert "not migrated" in before.json()["reason"]
            async with app.router.lifespan_context(app):
                after = await http.get("/readyz")
                assert after.status_code == 200, after.text
                assert after.json()["status"] == "ready"


async def test_readyz_is_503_on_a_migrated_database_until_the_server_has_started(
    make_settings: Callable[..., Settings],
) -> None:
    async with asgi(create_app(make_settings())) as http:
        response = await http.get("/readyz")
    assert response.status_code == 503
    assert response.json()["reason"].startswith("starting")


async def test_readyz_is_503_when_the_database_is_unreachable(tmp_path: Path) -> None:
    app = create_app(settings_for(UNREACHABLE, tmp_path))
    with anyio.fail_after(30):
        async with asgi(app) as http:
            response = await http.get("/readyz")
    assert response.status_code == 503
    assert response.json()["reason"].startswith("database unreachable")


async def test_mcp_answers_both_protocol_eras_in_process(make_settings: Callable[..., Settings]) -> None:
    app = create_app(make_settings())
    with anyio.fail_after(30):
        async with app.router.lifespan_context(app), asgi(app) as http:
            for mode, era in (("legacy", "2025"), ("auto", "2026")):
                async with Client(streamable_http_client("http://127.0.0.1/mcp", http_client=http), mode=mode) as c:
                    assert c.protocol_version.startswith(era)
                    assert len((await c.list_tools()).tools) == ALL_TOOLS


async def test_unknown_host_headers_are_refused_unless_allowed(make_settings: Callable[..., Settings]) -> None:
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    headers = {"accept": "application/json, text/event-stream", "host": "evil.example"}
    for allowed, expected in (([], 421), (["evil.example"], 200)):
        app = create_app(make_settings(allowed_hosts=allowed))
        with anyio.fail_after(30):
            async with app.router.lifespan_context(app), asgi(app) as http:
                init = {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {},
                        "clientInfo": {"name": "t", "version": "0"},
                    },
                }
                response = await http.post("/mcp", json=init if expected == 200 else ping, headers=headers)
        assert response.status_code == expected, response.text


# --- the command line ------------------------------------------------------------------------


async def jct(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run `python -m server ARGS` in tmp_path with the given JCT_* settings; (returncode, stdout, stderr)."""
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [sys.executable, "-m", "server", *args], env=subprocess_env(env or {}), cwd=tmp_path, check=False
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got:\n{stderr}"
    assert lines[0].startswith("error: ")
    assert "Traceback" not in stderr
    return lines[0]


def local_env(tmp_path: Path) -> dict[str, str]:
    return server_env(f"sqlite:///{tmp_path / 'cli.db'}", tmp_path)


async def test_serve_on_a_busy_port_is_one_line_and_non_zero(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, out, err = await jct(tmp_path, "serve", "--port", str(port), env=local_env(tmp_path))
    assert code != 0
    assert one_error_line(err) == f"error: port {port} on 127.0.0.1 is already in use; pass --port or set JCT_PORT"
    assert out == ""


@pytest.mark.parametrize("stdio", [False, True], ids=["http", "stdio"])
async def test_serve_with_an_unreachable_database_is_one_line_and_non_zero(tmp_path: Path, stdio: bool) -> None:
    env = server_env(UNREACHABLE, tmp_path)
    args = ["serve", "--stdio"] if stdio else ["serve", "--port", str(free_port())]
    code, out, err = await jct(tmp_path, *args, env=env)
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
    ],
)
async def test_a_bad_setting_is_one_line_and_non_zero(tmp_path: Path, name: str, value: str, expected: str) -> None:
    code, out, err = await jct(tmp_path, "serve", env=local_env(tmp_path) | {name: value})
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
    process = await anyio.open_process([sys.executable, "-m", "server", "serve", "--stdio"], env=env, cwd=tmp_path)
    try:
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None
        with anyio.fail_after(60):
            await process.stdin.send(json.dumps(initialize).encode() + b"\n")
            received = b""
            while b"\n" not in received:
                received += await process.stdout.receive()
            await process.stdin.aclose()
            async for chunk in process.stdout:
                received += chunk
            stderr = b"".join([chunk async for chunk in process.stderr]).decode()
            assert await process.wait() == 0, stderr
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.CancelScope(shield=True):
            await process.wait()
    messages = [json.loads(line) for line in received.decode().splitlines()]
    assert messages[0]["id"] == 1
    assert messages[0]["result"]["serverInfo"]["name"] == "jct"
    assert all(message["jsonrpc"] == "2.0" for message in messages)
    assert "DEBUG" in stderr or "INFO" in stderr or stderr == ""


async def test_enqueue_tasks_show_stats_round_trip(tmp_path: Path) -> None:
    env = local_env(tmp_path)
    code, out, err = await jct(
        tmp_path,
        "enqueue",
        "Add input validation",
        "--operation",
        "code_change",
        "--repo",
        "myorg/api",
        "--priority",
        "P1",
        "--criterion",
        "Email is validated",
        "--criterion",
        "Tests pass",
        "--summary",
        "The endpoint accepts anything.",
        "--key",
        "k-1",
        env=env,
    )
    assert code == 0, err
    assert "enqueued task" in out
    found = UUID.search(out)
    assert found is not None, out
    task_id = found.group(0)

    code, again, err = await jct(
        tmp_path, "enqueue", "Add input validation", "--operation", "code_change", "--repo", "myorg/api",
        "--priority", "P1", "--criterion", "Email is validated", "--criterion", "Tests pass",
        "--summary", "The endpoint accepts anything.", "--key", "k-1", env=env,
    )  # fmt: skip
    assert code == 0, err
    assert task_id in again
    assert "duplicate" in again

    code, out, err = await jct(tmp_path, "tasks", env=env)
    assert code == 0, err
    assert task_id in out
    assert "P1" in out

    code, out, err = await jct(tmp_path, "show", task_id, env=env)
    assert code == 0, err
    assert task_id in out
    assert "Add input validation" in out
    assert "queued" in out

    code, out, err = await jct(tmp_path, "stats", env=env)
    assert code == 0, err
    assert re.search(r"queued\s*│\s*1\b", out), out

    code, out, err = await jct(tmp_path, "reviews", env=env)
    assert code == 0, err
    assert "0 pending review(s)" in out

    code, out, err = await jct(tmp_path, "show", "6d0c2b63-29c5-4b1b-9d38-0d4a2c1e9f00", env=env)
    assert code == 1
    assert "is not a task, run or evidence pack id" in one_error_line(err)

    code, out, err = await jct(tmp_path, "enqueue", "x", "--operation", "cooking", "--repo", "myorg/api", env=env)
    assert code == 1
    assert "INVALID_ARGUMENT" in one_error_line(err)


async def test_reviews_review_and_show_run_and_evidence(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    core = Core.build(settings_for(url, tmp_path, review_auto_approve=False))
    agent = Actor(actor_id="agent-1", name="agent-1", session="agent-1")
    try:
        code, out, err = await jct(
            tmp_path,
            "enqueue",
            "Write the runbook",
            "--operation",
            "docs",
            "--repo",
            "myorg/ops",
            env=local_env(tmp_path),
        )
        assert code == 0, err
        claim = await queue.claim_next(core, agent)
        assert claim.task_id is not None
        await work.report_artifact(
            core, agent, claim.task_id, title="Runbook", artifact_type="doc", content="# Runbook"
        )
        done = await completion.complete_task(core, agent, claim.task_id, success=True, summary="Wrote it")
    finally:
        await core.db.dispose()
    pack_id = done.evidence_pack.id

    code, out, err = await jct(tmp_path, "reviews", env=local_env(tmp_path))
    assert code == 0, err
    assert pack_id in out
    assert "Write the runbook" in out

    code, out, err = await jct(tmp_path, "show", done.run_id, env=local_env(tmp_path))
    assert code == 0, err
    assert "under_review" in out
    assert "Runbook" in out

    code, out, err = await jct(tmp_path, "show", pack_id, env=local_env(tmp_path))
    assert code == 0, err
    assert "run_succeeded" in out

    code, out, err = await jct(tmp_path, "review", pack_id, "maybe", "--reason", "hm", env=local_env(tmp_path))
    assert code == 2
    one_error_line(err)

    code, out, err = await jct(tmp_path, "review", pack_id, "approve", "--reason", "Clear.", env=local_env(tmp_path))
    assert code == 0, err
    assert "approved" in out
    assert "task completed, run done" in out

    code, out, err = await jct(tmp_path, "review", pack_id, "reject", "--reason", "No.", env=local_env(tmp_path))
    assert code == 1
    assert "ALREADY_REVIEWED" in one_error_line(err)
