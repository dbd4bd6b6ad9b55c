"""The X-JCT-Agent header (server/identity.py), through the SDK's own client over real HTTP, on both databases.

Without tokens, a stateless 2026-07-28 caller used to be plain `local`, every one of them: one row on the agents
page holding every claim (Claude Code over HTTP speaks that protocol). A request that carries the header is the
agent `local-<6 hex of its SHA-256>`, over the stateless protocol and in a legacy session alike: each value its
own agent, the same value one agent. The header is self-asserted and fences nothing (the claim's key does); a
malformed one is refused and changes nothing. With tokens the token is the agent, whatever the header says."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from server.config import Settings
from tests.core.helpers import bare, snapshot
from tests.security.conftest import TokenServer, bearer
from tests.support.serving import served
from tests.transports.conftest import call, call_error
from tests.transports.test_workflows import enqueue

pytestmark = pytest.mark.anyio

LIMIT = 120.0
HEADER = "X-JCT-Agent"


def agent_named(value: str) -> str:
    return "local-" + hashlib.sha256(value.encode()).hexdigest()[:6]


@asynccontextmanager
async def client(base_url: str, mode: str, headers: list[tuple[bytes, bytes]]) -> AsyncIterator[Client]:
    """An SDK client over streamable HTTP (`auto`: the 2026-07-28 protocol; `legacy`: a session), or over SSE
    (`sse`), that sends `headers` (names may repeat) on every request."""
    async with AsyncExitStack() as stack:
        if mode == "sse":
            plain = {name.decode(): value.decode() for name, value in headers}
            connected = Client(sse_client(f"{base_url}/sse", headers=plain), mode="legacy")
        else:
            http = await stack.enter_async_context(create_mcp_http_client())
            http.headers.update(httpx2.Headers(headers))
            connected = Client(streamable_http_client(f"{base_url}/mcp", http_client=http), mode=mode)
        yield await stack.enter_async_context(connected)


def agent(value: str) -> list[tuple[bytes, bytes]]:
    return [(HEADER.encode(), value.encode())]


async def agents_of(observer: Client) -> dict[str, dict[str, Any]]:
    return {row["agent"]: row for row in (await call(observer, "jct_list_agents"))["agents"]}


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_each_header_value_is_its_own_agent_and_fences_nothing(
    make_settings: Callable[..., Settings], mode: str
) -> None:
    with anyio.fail_after(LIMIT):
        async with (
            served(make_settings) as (base_url, _core),
            client(base_url, mode, agent("claude-1")) as one,
            client(base_url, mode, agent("claude-2")) as two,
            client(base_url, mode, agent("claude-1")) as one_again,  # another connection, the same agent
            client(base_url, mode, []) as anonymous,
        ):
            claims = {}
            for name, caller in (("one", one), ("two", two), ("one_again", one_again), ("anonymous", anonymous)):
                task_id = await enqueue(caller, f"Task of {name}")
                claims[name] = await call(caller, "jct_claim_task", task_id=task_id)
            agents = await agents_of(two)

            # The header names an agent, and proves nothing: the same value on another connection does not act
            # on the claim by its bare run id; the run_id the claim returned (with its key) does.
            first = claims["one"]
            refused = await call_error(
                one_again, "jct_release_task", task_id=first["task_id"], run_id=bare(first["run_id"]), reason="x"
            )
            assert refused["error"]["code"] == "NOT_CLAIMANT"
            released = await call(
                one_again, "jct_release_task", task_id=first["task_id"], run_id=first["run_id"], reason="handed on"
            )
            assert released["task_status"] == "queued"

    assert agents[agent_named("claude-1")]["claims_held"] == 2
    assert agents[agent_named("claude-2")]["claims_held"] == 1
    assert {row["principal"] for row in agents.values()} == {"local"}
    anonymous_agents = set(agents) - {agent_named("claude-1"), agent_named("claude-2")}
    assert len(anonymous_agents) == 1
    (nobody,) = anonymous_agents
    assert agents[nobody]["claims_held"] == 1
    # Without the header: a stateless caller is plain `local`, a legacy session its own `local-<6 hex>`.
    if mode == "auto":
        assert nobody == "local"
    else:
        assert nobody.startswith("local-")


async def test_an_sse_connection_is_named_by_its_header_too(make_settings: Callable[..., Settings]) -> None:
    with anyio.fail_after(LIMIT):
        async with served(make_settings) as (base_url, _core), client(base_url, "sse", agent("sse-agent")) as sse:
            await call(sse, "jct_claim_task", task_id=await enqueue(sse))
            agents = await agents_of(sse)
    assert agents[agent_named("sse-agent")]["claims_held"] == 1


BAD = {
    "empty": [(b"x-jct-agent", b"")],
    "space": [(b"x-jct-agent", b"my agent")],
    "too-long": [(b"x-jct-agent", b"a" * 129)],
    "not-ascii": [(b"x-jct-agent", "agent-\u00e9".encode())],
    "twice": [(b"x-jct-agent", b"one"), (b"x-jct-agent", b"two")],
}


@pytest.mark.parametrize("headers", list(BAD.values()), ids=list(BAD))
async def test_a_malformed_header_is_refused_and_changes_nothing(
    make_settings: Callable[..., Settings], headers: list[tuple[bytes, bytes]]
) -> None:
    with anyio.fail_after(LIMIT):
        async with served(make_settings) as (base_url, core), client(base_url, "auto", []) as fine:
            task_id = await enqueue(fine)
            before = await snapshot(core)
            async with client(base_url, "auto", headers) as malformed:
                refused = await call_error(malformed, "jct_claim_task", task_id=task_id)
            assert await snapshot(core) == before
            # The longest a value may be is accepted.
            async with client(base_url, "auto", agent("a" * 128)) as longest:
                claimed = await call(longest, "jct_claim_task", task_id=task_id)
    assert refused["error"]["code"] == "INVALID_ARGUMENT"
    assert "X-JCT-Agent" in refused["error"]["message"]
    assert "1 to 128 visible ASCII characters" in refused["error"]["message"]
    assert "headersHelper" in refused["error"]["suggestion"]
    assert claimed["task_id"] == task_id


@asynccontextmanager
async def token_client(server: TokenServer, secret: str, headers: list[tuple[bytes, bytes]]) -> AsyncIterator[Client]:
    mode = {"http-legacy": "legacy", "http-modern": "auto", "sse": "sse"}[server.kind]
    authorization = [(name.encode(), value.encode()) for name, value in bearer(secret).items()]
    async with client(server.base_url, mode, authorization + headers) as connected:
        yield connected


async def test_with_tokens_the_token_is_the_agent_whatever_the_header(token_server: TokenServer) -> None:
    """Two agents sharing one token, each with its own header (one of them malformed): both are the token's agent,
    one row holding both claims; a header may not split a principal's agent (separation of duties compares
    agents)."""
    with anyio.fail_after(LIMIT):
        shared = await token_server.token("ci-pool", "worker")
        async with (
            token_client(token_server, shared, agent("claude-1")) as first,
            token_client(token_server, shared, [(b"x-jct-agent", b"not valid")]) as second,
        ):
            await call(first, "jct_claim_task", task_id=await enqueue(first))
            await call(second, "jct_claim_task", task_id=await enqueue(second))
            agents = await agents_of(first)
    assert set(agents) == {"ci-pool"}
    assert agents["ci-pool"]["claims_held"] == 2
