"""JCT served over real HTTP, at its front door: refusals MCP clients can show, and URLs that never echo a foreign Host.

Before: 401/403/429 bodies were plain OAuth JSON (`{"error": ..., "error_description": ...}`), which the SDK
client reports as "Server returned an error response"; the metadata and the challenge named whatever Host
the request carried; `/metrics` answered any Host.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from server.config import Settings
from server.core import tokens
from server.errors import RpcCode
from tests.security.conftest import bearer, future_token, sdk_refusal
from tests.support import serving
from tests.support.command import jct, jct_process
from tests.transports.conftest import server_env

pytestmark = pytest.mark.anyio

ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
METADATA = "/.well-known/oauth-protected-resource"


@pytest.fixture
def served(make_settings: Callable[..., Settings]) -> Callable[..., Any]:
    """served(**settings) -> an async context manager: (base URL, Core on its database) of a token server."""
    return lambda **overrides: serving.served(make_settings, auth="token", **overrides)


async def test_refusals_are_json_rpc_errors_with_the_request_id(served: Any) -> None:
    with anyio.fail_after(60):
        async with served() as (base_url, _core), httpx2.AsyncClient(base_url=base_url) as http:
            ping = {"jsonrpc": "2.0", "id": "req-7", "method": "ping"}
            by_path = {
                "/mcp": await http.post("/mcp", json=ping, headers=ACCEPT),
                "/messages/": await http.post("/messages/?session_id=" + "0" * 32, json=ping | {"id": 8}),
            }
            no_id = {
                "GET /sse": await http.get("/sse"),
                "not JSON": await http.post("/mcp", content=b"{oops", headers=ACCEPT),
                "a batch": await http.post("/mcp", json=[ping], headers=ACCEPT),
                "a notification": await http.post(
                    "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=ACCEPT
                ),
            }
    for path, response in by_path.items():
        assert response.status_code == 401
        assert response.headers["content-type"] == "application/json"
        assert response.headers["www-authenticate"].startswith('Bearer realm="jct", error="invalid_token"')
        assert response.json() == {
            "jsonrpc": "2.0",
            "id": "req-7" if path == "/mcp" else 8,
            "error": {
                "code": RpcCode.AUTHENTICATION_REQUIRED,
                "message": "Authentication required: send 'Authorization: Bearer jct_...' (see `jct token create`).",
                "data": {
                    "error": "invalid_token",
                    "error_description": "Authentication required: send 'Authorization: Bearer jct_...' "
                    "(see `jct token create`).",
                },
            },
        }
    for what, response in no_id.items():
        assert response.status_code == 401, what
        assert response.json()["id"] is None, what
        assert response.json()["error"]["code"] == RpcCode.AUTHENTICATION_REQUIRED


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_sdk_client_shows_jct_messages_for_401_403_and_429(served: Any, mode: str) -> None:
    with anyio.fail_after(90):
        async with served(rate_limit_per_minute=2) as (base_url, core):
            unknown = await sdk_refusal(base_url, "jct_not-a-real-token", mode)
            secret = await future_token(core)
            roleless = await sdk_refusal(base_url, secret, mode)
            alice, _ = await tokens.create_token(core, "alice", ["worker"])
            limited = await sdk_refusal(base_url, alice, mode, calls=5)  # two requests of burst, then 429
    assert unknown.code == RpcCode.AUTHENTICATION_REQUIRED
    assert unknown.message == "The bearer token is not valid: unknown, mistyped or revoked."
    assert roleless.code == RpcCode.FORBIDDEN
    assert "no role that allows using JCT" in roleless.message
    assert limited.code == RpcCode.RATE_LIMITED
    assert "JCT_RATE_LIMIT_PER_MINUTE" in limited.message
    assert 1 <= limited.data["retry_after_seconds"] <= 60


async def test_a_request_let_through_keeps_its_body(served: Any) -> None:
    """The front door reads a body only to refuse it: an accepted call arrives whole (a large artifact too)."""
    with anyio.fail_after(60):
        async with served() as (base_url, core):
            alice, _ = await tokens.create_token(core, "alice", ["worker", "admin"])
            async with (
                create_mcp_http_client(headers=bearer(alice)) as http,
                Client(streamable_http_client(f"{base_url}/mcp", http_client=http), mode="legacy") as c,
            ):
                task = {
                    "objective": "Big",
                    "operation": "docs",
                    "target_repo": "a/b",
                    "context_summary": "z" * 19_999,
                }
                result = await c.call_tool("jct_enqueue_task", task)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert result.structured_content["success"] is True


async def test_urls_that_name_the_server_never_echo_a_foreign_host(served: Any) -> None:
    with anyio.fail_after(60):
        async with served(allowed_hosts="jct.example.com") as (base_url, _core):
            port = base_url.rsplit(":", 1)[1]
            async with httpx2.AsyncClient(base_url=base_url) as http:
                seen = {}
                for host in ("evil.example", "jct.example.com", f"127.0.0.1:{port}", f"evil.example:{port}"):
                    metadata = await http.get(f"{METADATA}/mcp", headers={"host": host})
                    challenge = await http.post("/mcp", json={}, headers=ACCEPT | {"host": host})
                    seen[host] = (metadata.json()["resource"], challenge.headers["www-authenticate"])
        async with served() as (plain_url, _core), httpx2.AsyncClient(base_url=plain_url) as http:
            fallback = (await http.get(f"{METADATA}/mcp", headers={"host": "evil.example"})).json()["resource"]
    named = ("http://jct.example.com/mcp", f'resource_metadata="http://jct.example.com{METADATA}/mcp"')
    assert seen["evil.example"][0] == named[0]
    assert named[1] in seen["evil.example"][1]
    assert seen[f"evil.example:{port}"][0] == named[0]
    assert seen["jct.example.com"][0] == named[0]
    assert seen[f"127.0.0.1:{port}"][0] == f"http://127.0.0.1:{port}/mcp"
    assert f'resource_metadata="http://127.0.0.1:{port}{METADATA}/mcp"' in seen[f"127.0.0.1:{port}"][1]
    assert fallback == f"{plain_url}/mcp"


async def test_jct_public_url_names_the_server_everywhere(served: Any, database_url: str, tmp_path: Path) -> None:
    public = "https://jct.example.com"
    with anyio.fail_after(60):
        async with served(public_url=public + "/") as (base_url, _core), httpx2.AsyncClient(base_url=base_url) as http:
            resources = [
                (await http.get(f"{METADATA}{path}", headers={"host": host})).json()["resource"]
                for path in ("/mcp", "/sse", "")
                for host in ("evil.example", "127.0.0.1")
            ]
            challenge = (await http.get("/sse", headers={"host": "evil.example"})).headers["www-authenticate"]
        code, out, err = await jct(
            tmp_path,
            "token",
            "create",
            "ci",
            "--role",
            "worker",
            env=server_env(database_url, tmp_path, public_url=public),
        )
    assert resources == [f"{public}/mcp"] * 2 + [f"{public}/sse"] * 2 + [public] * 2
    assert f'resource_metadata="{public}{METADATA}/sse"' in challenge
    assert code == 0, err
    assert f"claude mcp add --transport http jct {public}/mcp --header" in out


async def test_metrics_is_host_checked_like_mcp(make_settings: Callable[..., Settings]) -> None:
    """A DNS-rebinding page (a foreign Host, or a foreign Origin) cannot read /metrics; health stays open."""
    with anyio.fail_after(60):
        async with (
            serving.serving(make_settings()) as (base_url, _mcp),
            httpx2.AsyncClient(base_url=base_url) as http,
        ):
            foreign = await http.get("/metrics", headers={"host": "evil.example"})
            origin = await http.get("/metrics", headers={"origin": "http://evil.example"})
            own = await http.get("/metrics")
            health = await http.get("/healthz", headers={"host": "evil.example"})
        async with (
            serving.serving(make_settings(allowed_hosts="evil.example")) as (base_url, _mcp),
            httpx2.AsyncClient(base_url=base_url) as http,
        ):
            allowed = await http.get("/metrics", headers={"host": "evil.example"})
    assert foreign.status_code == 421
    assert origin.status_code == 403
    assert own.status_code == 200
    assert "jct_tool_calls_total" in own.text or "jct_tasks" in own.text
    assert health.status_code == 200
    assert allowed.status_code == 200


@pytest.mark.parametrize(
    "value", ["ftp://jct.example.com", "https://jct.example.com/?x=1", "https://x/#f", "x.example"]
)
async def test_a_bad_public_url_is_one_line_and_non_zero(tmp_path: Path, value: str) -> None:
    env = server_env(f"sqlite:///{tmp_path / 'jct.db'}", tmp_path, public_url=value)
    code, out, err = await jct_process(tmp_path, "serve", env=env)
    assert code == 2
    assert err.startswith("error: bad setting JCT_PUBLIC_URL: ")
    assert len(err.strip().splitlines()) == 1
    assert out == ""
