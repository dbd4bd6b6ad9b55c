"""`claude mcp list` sees JCT over every transport Claude Code has: streamable HTTP, SSE and stdio."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from tests.claude_code.harness import ERAS, ClaudeCode, stdio_server
from tests.claude_code.model import scripted_model
from tests.claude_code.proxy import mcp_proxy

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LIMIT = 180.0
FIRST_REQUEST = {"auto": "server/discover", "legacy": "initialize"}


@pytest.mark.parametrize("era", list(ERAS))
async def test_mcp_list_reports_every_transport_connected(
    claude_code: ClaudeCode, jct: str, jct_env: dict[str, str], tmp_path: Path, era: str
) -> None:
    """Each server is added with `claude mcp add-json --scope user`, then `claude mcp list` health-checks them.

    HTTP and SSE go through the logging proxy, which shows the protocol era Claude Code chose: by default
    it asks `server/discover` and speaks the stateless 2026-07-28 protocol; MCP_PROTOCOL_NEGOTIATION=legacy
    makes it `initialize`. Listing never calls the model.
    """
    with anyio.fail_after(LIMIT):
        async with mcp_proxy(jct) as (proxy, proxy_url), scripted_model([]) as (model, model_url):
            servers = {
                "jct-http": {"type": "http", "url": f"{proxy_url}/mcp"},
                "jct-sse": {"type": "sse", "url": f"{proxy_url}/sse"},
                "jct-stdio": stdio_server(jct_env, tmp_path),
            }
            for name, config in servers.items():
                added = await claude_code.run(
                    ["mcp", "add-json", "--scope", "user", name, json.dumps(config)], model_url, era
                )
                assert added.returncode == 0, added.explain()
            listed = await claude_code.run(["mcp", "list"], model_url, era)

    assert listed.returncode == 0, listed.explain()
    lines = {line.split(":", 1)[0]: line for line in listed.stdout.splitlines() if ":" in line}
    for name in servers:
        assert name in lines, listed.explain()
        assert "✔ Connected" in lines[name], f"{lines[name]}\n{claude_code.mcp_logs()}"
    assert "(HTTP)" in lines["jct-http"]
    assert "(SSE)" in lines["jct-sse"]
    assert "serve --stdio" in lines["jct-stdio"]

    mcp = [e for e in proxy.exchanges if e.path == "/mcp"]
    assert mcp, proxy.log()
    assert mcp[0].rpc == [FIRST_REQUEST[era]], proxy.log()
    assert all(e.status == 200 for e in mcp if e.rpc != ["notifications/initialized"]), proxy.log()
    assert any(e.path == "/sse" and e.http_method == "GET" and e.status == 200 for e in proxy.exchanges), proxy.log()
    assert any(e.path.startswith("/messages") and e.rpc == ["tools/list"] for e in proxy.exchanges), proxy.log()
    assert model.requests == []
    assert claude_code.egress.attempts == []
