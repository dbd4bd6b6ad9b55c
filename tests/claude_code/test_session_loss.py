"""What Claude Code does when JCT answers `404 Session not found` for its MCP session (streamable HTTP,
`initialize` handshake era), measured through a logging proxy.

The script: call jct_queue_stats; then lose the session server-side and call it again; then twice more.
The session is lost in one of two ways: the proxy starts answering that session's requests itself with
the MCP SDK's 404 (`{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "Session not
found"}}`), or `jct serve` is restarted behind the proxy (same URL for Claude Code, a process that never
saw the session, so JCT itself answers 404).

Observed with Claude Code 2.1.328 (`MCP_PROTOCOL_NEGOTIATION=legacy`; by default it speaks the stateless
2026-07-28 protocol to JCT and has no session to lose), identical in both ways and in repeated runs::

    POST initialize                 (no session)  200  -> session A
    POST notifications/initialized  A             202
    GET  (event stream)             A             200
    POST tools/list, prompts/list, resources/list A   200
    POST tools/call                 A             200   first call
    POST tools/call                 A             404   second call: session lost
    POST initialize                 (no session)  200  -> session B   background reconnect, then abandoned
    POST initialize                 (no session)  200  -> session C   the failed call's own recovery
    POST notifications/initialized  C             202
    GET  (event stream)             C             200
    POST tools/call                 C             200   second call, retried: succeeds
    POST notifications/initialized  B             202   (B is never used again, nor deleted)
    POST tools/call                 C             200   third call
    POST tools/call                 C             200   fourth call

So Claude Code does re-initialize, at once and transparently: the 404 never reaches the model. The
second call's tool_result is JCT's ordinary success JSON (no is_error), and every later call succeeds on
the new session. Its MCP log says "MCP session expired (server no longer recognizes session ID),
triggering reconnection", "Retrying tool 'jct_queue_stats' after session recovery". What the model does
see: the next request carries a system message "The following MCP servers have disconnected. Their
instructions above no longer apply: jct", and a WaitForMcpServers tool appears, although the jct tools
stay and work. Two sessions are opened for one recovery; the extra one (B) is left open on the server,
and no session is ever ended with DELETE (not the lost one, not at exit). On a busy machine its reconnect timer
may fire late and open a third session, to which its later calls move; the test allows that.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.claude_code.harness import ClaudeCode
from tests.claude_code.model import Reply, Step, ToolResult, ToolUse, ok, scripted_model
from tests.claude_code.proxy import Exchange, McpProxy, mcp_proxy
from tests.transports.conftest import http_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LIMIT = 180.0
STATS = ToolUse("mcp__jct__jct_queue_stats", {})
DISCONNECTED = "The following MCP servers have disconnected"


def stats(result: ToolResult) -> dict[str, Any]:
    body = ok(result)
    assert set(body["counts"]) >= {"queued", "running", "completed"}, body
    return body


def system_texts(body: dict[str, Any]) -> list[str]:
    """The texts of the system-role messages Claude Code put into the conversation."""
    texts = []
    for message in body["messages"]:
        if message["role"] == "system":
            content = message["content"]
            texts.append(content if isinstance(content, str) else "".join(b.get("text", "") for b in content))
    return texts


@pytest.mark.parametrize("loss", ["proxy-404", "restart"])
async def test_claude_code_reinitializes_after_session_not_found(
    claude_code: ClaudeCode, jct_env: dict[str, str], tmp_path: Path, loss: str
) -> None:
    async with AsyncExitStack() as servers:
        jct = await servers.enter_async_context(http_server(jct_env, tmp_path))
        proxy: McpProxy | None = None
        loss_at: dict[str, Any] = {}  # the lost session, and where in the proxy's log it was lost

        async def lose_the_session(result: ToolResult | None) -> ToolUse:
            nonlocal servers
            assert result is not None
            assert proxy is not None
            stats(result)
            assert len(proxy.sessions()) == 1, proxy.log()
            loss_at["session"] = proxy.sessions()[0]
            if loss == "proxy-404":
                proxy.drop(loss_at["session"])
            else:
                await servers.aclose()
                servers = AsyncExitStack()
                proxy.upstream = await servers.enter_async_context(http_server(jct_env, tmp_path))
            loss_at["index"] = len(proxy.exchanges)
            return STATS

        steps: list[Step] = [STATS, lose_the_session, STATS, STATS, Reply("done")]
        try:
            with anyio.fail_after(LIMIT):
                async with mcp_proxy(jct) as (proxy, proxy_url), scripted_model(steps) as (model, model_url):
                    servers_config = {"jct": {"type": "http", "url": f"{proxy_url}/mcp"}}
                    run = await claude_code.print("Check the queue.", servers_config, model_url, "legacy")
        finally:
            await servers.aclose()

    log = proxy.log()
    context = f"{run.explain()}\n{log}\n{claude_code.mcp_logs()}"
    assert model.errors == [], "\n".join(model.errors)
    assert run.returncode == 0, context
    assert [r.step for r in model.main_requests()] == [0, 1, 2, 3, 4], context

    # The model never sees the 404: all four calls answer JCT's success JSON.
    assert len(model.tool_results) == 4, context
    for result in model.tool_results:
        stats(result)
    # ... but it is told the server disconnected, in the request carrying the recovered call's result.
    third = model.main_requests()[2].body
    assert any(DISCONNECTED in text and "jct" in text for text in system_texts(third)), system_texts(third)
    assert "WaitForMcpServers" in {tool["name"] for tool in third["tools"]}

    session_a, at = loss_at["session"], loss_at["index"]
    before, after = proxy.exchanges[:at], proxy.exchanges[at:]
    assert [e.rpc for e in before if e.rpc == ["tools/call"]] == [["tools/call"]], log
    assert all(e.session == session_a for e in before[1:]), log

    # The lost session is tried once more by the call (404), and, when the server restarted, by the reconnect of its
    # cut GET stream (404, before or after the call); nothing else ever uses it again.
    lost = [e for e in after if e.session == session_a]
    assert [e.rpc for e in lost if e.http_method == "POST"] == [["tools/call"]], log
    assert all(e.status == 404 for e in lost), log
    assert all(e.http_method == "GET" for e in lost if e.rpc != ["tools/call"]), log
    assert len(lost) <= (1 if loss == "proxy-404" else 2), log  # the call and, after a restart, one GET at most
    fresh = [e for e in after if e.session != session_a]

    # JCT refuses nothing after those 404s: handshakes, streams, listings and calls on the new sessions (an
    # exchange still open when Claude Code exited has no status).
    assert all(e.status is None or e.status < 400 for e in fresh), log

    # Then fresh handshakes, without a session id: at least two, each answered with a new session. On a busy machine
    # Claude Code may make more (its reconnect timer fires late) and move its later calls to the newest one.
    initializes = [e for e in after if e.rpc == ["initialize"]]
    assert all((e.session, e.status) == (None, 200) for e in initializes), log
    assert len(initializes) >= 2, log
    new_sessions = [e.new_session for e in initializes]
    assert None not in new_sessions, log
    assert len(set(new_sessions)) == len(new_sessions), log
    assert session_a not in new_sessions, log

    # The retried second call and the two later ones go to new sessions, each initialized first, and succeed.
    calls = [e for e in fresh if e.rpc == ["tools/call"]]
    assert [e.status for e in calls] == [200, 200, 200], log
    for session in {e.session for e in calls}:
        assert session in new_sessions, log
        assert methods(after, session)[:1] == ["notifications/initialized"], log

    # No session is ever ended with DELETE, and nothing tried to leave 127.0.0.1.
    assert not any(e.http_method == "DELETE" for e in proxy.exchanges), log
    assert claude_code.egress.attempts == []


def methods(exchanges: list[Exchange], session: str | None) -> list[str]:
    """The JSON-RPC methods (and GETs) a session's requests carried, in order."""
    return [",".join(e.rpc) or e.http_method for e in exchanges if e.session == session]
