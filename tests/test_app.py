"""The HTTP application: health, readiness, host checks, both protocol eras."""

from __future__ import annotations

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

pytestmark = pytest.mark.anyio

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/x"
ALL_TOOLS = 33


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


async def test_health_is_seed_003s_name_for_healthz(make_settings: Callable[..., Settings]) -> None:
    async with asgi(create_app(make_settings(toolsets=["worker"]))) as http:
        health = await http.get("/health")
        healthz = await http.get("/healthz")
    assert health.status_code == 200
    assert health.json() == healthz.json()
    assert health.json()["status"] == "ok"
    assert 0 < health.json()["tools"] < ALL_TOOLS


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
