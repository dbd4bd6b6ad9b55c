"""The HTTP front door: who gets in, with which status and body, before any MCP message is handled."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx2
import pytest

from server.app import max_request_body
from server.auth import RateLimiter
from server.config import Settings
from server.core import tokens
from server.errors import RpcCode
from tests.security.conftest import bearer, future_token
from tests.support.serving import running

pytestmark = pytest.mark.anyio

ACCEPT = {"accept": "application/json, text/event-stream"}
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
METADATA = "http://127.0.0.1/.well-known/oauth-protected-resource"
SESSION = "0123456789abcdef0123456789abcdef"


def asgi(app: Any, **kwargs: Any) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1", **kwargs)


@pytest.fixture
def serving(make_settings: Callable[..., Settings]) -> Callable[..., Any]:
    """serving(**settings) -> an async context manager: (app, core) with the app's lifespan running."""
    return lambda **overrides: running(make_settings(**overrides))


def refusal(response: httpx2.Response, status: int, code: RpcCode, oauth_error: str) -> dict[str, Any]:
    """The JSON-RPC error of a front-door refusal, after checking its shape; the OAuth fields are in `data`."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"jsonrpc", "id", "error"}
    assert body["jsonrpc"] == "2.0"
    error = body["error"]
    assert error["code"] == code
    assert error["data"]["error"] == oauth_error
    assert error["message"] == error["data"]["error_description"]
    return dict(body)


def assert_challenge(response: httpx2.Response, resource: str, description: str) -> None:
    body = refusal(response, 401, RpcCode.AUTHENTICATION_REQUIRED, "invalid_token")
    assert set(body["error"]["data"]) == {"error", "error_description"}
    assert description in body["error"]["message"]
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert 'error="invalid_token"' in challenge
    assert f'resource_metadata="{METADATA}{resource}"' in challenge


async def test_no_token_is_401_with_a_challenge_that_names_the_resource_metadata(serving: Any) -> None:
    with anyio.fail_after(30):
        async with serving(auth="token") as (app, _core), asgi(app) as http:
            responses = {
                "/mcp": await http.post("/mcp", json=INITIALIZE, headers=ACCEPT),
                "/mcp GET": await http.get("/mcp", headers=ACCEPT),
                "/sse": await http.get("/sse"),
                "/messages/": await http.post(f"/messages/?session_id={SESSION}", json=PING),
            }
            for path, response in responses.items():
                assert_challenge(response, "/sse" if "/mcp" not in path else "/mcp", "Authentication required")

            for resource in ("/mcp", "/sse", ""):
                metadata = await http.get(f"/.well-known/oauth-protected-resource{resource}")
                assert metadata.status_code == 200
                assert metadata.headers["content-type"].startswith("application/json")
                assert metadata.json() == {
                    "resource": f"http://127.0.0.1{resource}",
                    "bearer_methods_supported": ["header"],
                    "scopes_supported": ["worker", "reviewer", "admin"],
                    "resource_name": "JCT work queue",
                }


async def test_bad_and_revoked_tokens_are_401(serving: Any) -> None:
    with anyio.fail_after(30):
        async with serving(auth="token") as (app, core), asgi(app) as http:
            secret, _ = await tokens.create_token(core, "alice", ["worker"])
            await tokens.revoke_token(core, "alice")
            for header in (
                f"Bearer {secret}",  # revoked
                f"Bearer {secret[:-1]}",  # mistyped
                "Bearer jct_" + "A" * 300,  # too long to be one
                "Bearer not-a-jct-token",
                "Bearer ",
            ):
                response = await http.post("/mcp", json=INITIALIZE, headers=ACCEPT | {"authorization": header})
                assert_challenge(response, "/mcp", "not valid")
            basic = await http.post("/mcp", json=INITIALIZE, headers=ACCEPT | {"authorization": "Basic YTpi"})
            assert_challenge(basic, "/mcp", "Authentication required")


async def test_a_token_with_no_usable_role_is_403(serving: Any) -> None:
    """Only a token written by a newer JCT (a role this build does not know) can lack a usable role."""
    with anyio.fail_after(30):
        async with serving(auth="token") as (app, core), asgi(app) as http:
            secret = await future_token(core)
            response = await http.post("/mcp", json=INITIALIZE, headers=ACCEPT | bearer(secret))
    refusal(response, 403, RpcCode.FORBIDDEN, "insufficient_scope")
    assert 'error="insufficient_scope"' in response.headers["www-authenticate"]


async def test_health_and_readiness_stay_open_with_tokens(serving: Any) -> None:
    with anyio.fail_after(30):
        async with serving(auth="token") as (app, _core), asgi(app) as http:
            assert (await http.get("/healthz")).json()["tools"] == 33
            assert (await http.get("/health")).json()["tools"] == 33
            assert (await http.get("/readyz")).json()["status"] == "ready"


async def test_a_valid_token_with_a_foreign_host_is_421(serving: Any) -> None:
    with anyio.fail_after(30):
        async with serving(auth="token") as (app, core), asgi(app) as http:
            secret, _ = await tokens.create_token(core, "alice", ["worker"])
            evil = ACCEPT | bearer(secret) | {"host": "evil.example"}
            foreign = await http.post("/mcp", json=INITIALIZE, headers=evil)
            local = await http.post("/mcp", json=INITIALIZE, headers=ACCEPT | bearer(secret))
    assert foreign.status_code == 421
    assert local.status_code == 200, local.text


async def test_a_session_answers_only_the_principal_that_opened_it(serving: Any) -> None:
    with anyio.fail_after(30):
        async with serving(auth="token") as (app, core), asgi(app) as http:
            alice, _ = await tokens.create_token(core, "alice", ["worker"])
            bob, _ = await tokens.create_token(core, "bob", ["worker"])
            opened = await http.post("/mcp", json=INITIALIZE, headers=ACCEPT | bearer(alice))
            session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            hijack = await http.post("/mcp", json=PING, headers=ACCEPT | session | bearer(bob))
            own = await http.post("/mcp", json=PING, headers=ACCEPT | session | bearer(alice))
    assert hijack.status_code == 404
    assert own.status_code == 200, own.text


@pytest.mark.parametrize("auth", ["none", "token"])
async def test_an_oversized_body_is_413(serving: Any, auth: str) -> None:
    async def chunks(total: int) -> AsyncIterator[bytes]:
        step = 1024 * 1024
        for start in range(0, total, step):
            yield b" " * min(step, total - start)

    with anyio.fail_after(60):
        async with serving(auth=auth) as (app, core), asgi(app) as http:
            headers = dict(ACCEPT)
            if auth == "token":
                headers |= bearer((await tokens.create_token(core, "alice", ["worker"]))[0])
            limit = max_request_body(core.settings)
            declared = await http.post("/mcp", content=b" " * (limit + 1), headers=headers)
            streamed = await http.post("/mcp", content=chunks(limit + 1), headers=headers)
            messages = await http.post(f"/messages/?session_id={SESSION}", content=b" " * (limit + 1), headers=headers)
    for response in (declared, streamed, messages):
        assert response.status_code == 413
        assert response.text == "Request body too large"


async def test_the_request_rate_is_capped_per_principal(serving: Any) -> None:
    with anyio.fail_after(30):
        async with serving(auth="token", rate_limit_per_minute=3) as (app, core), asgi(app) as http:
            alice, _ = await tokens.create_token(core, "alice", ["worker"])
            bob, _ = await tokens.create_token(core, "bob", ["worker"])
            allowed = [await http.post("/mcp", json=PING, headers=ACCEPT | bearer(alice)) for _ in range(3)]
            limited = await http.post("/mcp", json=PING, headers=ACCEPT | bearer(alice))
            other = await http.post("/mcp", json=PING, headers=ACCEPT | bearer(bob))
    assert all(response.status_code != 429 for response in allowed)
    assert limited.status_code == 429
    retry_after = int(limited.headers["retry-after"])
    assert 1 <= retry_after <= 20
    error = refusal(limited, 429, RpcCode.RATE_LIMITED, "rate_limited")["error"]
    assert error["data"]["retry_after_seconds"] == retry_after
    assert "JCT_RATE_LIMIT_PER_MINUTE" in error["message"]
    assert other.status_code != 429


async def test_requests_without_a_valid_token_are_capped_per_address(serving: Any, caplog: Any) -> None:
    """Guessing tokens, or a flood of 401s, is slowed per client address; a valid token is not held back,
    and the refusals make one log line, not one each."""
    with anyio.fail_after(30):
        async with serving(auth="token", unauthenticated_per_minute=3) as (app, core), asgi(app) as http:
            alice, _ = await tokens.create_token(core, "alice", ["worker"])
            guesses = [await http.post("/mcp", json=PING, headers=ACCEPT | bearer("jct_" + "x" * 40)) for _ in range(3)]
            limited = [
                await http.post("/mcp", json=PING, headers=ACCEPT | bearer("jct_" + "y" * 40)) for _ in range(20)
            ]
            valid = await http.post("/mcp", json=PING, headers=ACCEPT | bearer(alice))
    assert [response.status_code for response in guesses] == [401] * 3
    assert {response.status_code for response in limited} == {429}
    error = refusal(limited[0], 429, RpcCode.RATE_LIMITED, "rate_limited")["error"]
    assert "JCT_UNAUTHENTICATED_PER_MINUTE" in error["message"]
    assert 1 <= int(limited[0].headers["retry-after"]) <= 20
    assert valid.status_code != 429
    assert sum("JCT_UNAUTHENTICATED_PER_MINUTE" in record.getMessage() for record in caplog.records) == 1


async def test_there_is_no_rate_cap_without_tokens(serving: Any) -> None:
    with anyio.fail_after(30):
        async with serving(rate_limit_per_minute=1) as (app, _core), asgi(app) as http:
            statuses = [(await http.post("/mcp", json=PING, headers=ACCEPT)).status_code for _ in range(5)]
    assert 429 not in statuses


def test_the_rate_limiter_refills_over_time() -> None:
    now = [1000.0]
    limiter = RateLimiter(60, clock=lambda: now[0])  # one a second, bursts of 60
    assert all(limiter.take("a") == 0 for _ in range(60))
    assert limiter.take("a") == pytest.approx(1.0)
    assert limiter.take("b") == 0
    now[0] += 0.5
    assert limiter.take("a") == pytest.approx(0.5)
    now[0] += 0.5
    assert limiter.take("a") == 0
    now[0] += 3600
    assert all(limiter.take("a") == 0 for _ in range(60))
    assert limiter.take("a") > 0
