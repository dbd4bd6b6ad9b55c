"""JCT's prompts as Claude Code's slash commands, run in print mode: what arguments reach `prompts/get`."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from tests.claude_code.harness import ClaudeCode
from tests.claude_code.model import Reply, scripted_model
from tests.claude_code.proxy import mcp_proxy

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LIMIT = 180.0


def texts(body: dict[str, Any]) -> list[str]:
    """Every text block of the user messages of a Messages API request."""
    found = []
    for message in body["messages"]:
        if message["role"] == "user" and isinstance(message["content"], list):
            found += [block["text"] for block in message["content"] if block.get("type") == "text"]
    return found


async def test_a_multi_word_slash_command_reaches_jct_whole(claude_code: ClaudeCode, jct: str) -> None:
    """Claude Code 2.1.328 splits what follows a slash command on whitespace and hands the words to the
    prompt's arguments in order, dropping words past the last argument; quotes group nothing.

    JCT's free-text prompts take their text as `request` (or `goal`) plus one word each in w2..w64, and
    join them: `/mcp__jct__enqueue Add a CHANGELOG to myorg/api-service` embeds the whole request.
    """
    with anyio.fail_after(LIMIT):
        async with mcp_proxy(jct) as (proxy, proxy_url), scripted_model([Reply("ok")]) as (model, model_url):
            servers = {"jct": {"type": "http", "url": f"{proxy_url}/mcp"}}
            run = await claude_code.print("/mcp__jct__enqueue Add a CHANGELOG to myorg/api-service", servers, model_url)
            quoted = await claude_code.print('/mcp__jct__work_next "code_change docs"', servers, model_url)

    assert model.errors == [], "\n".join(model.errors)
    assert run.returncode == 0, run.explain()
    assert quoted.returncode == 0, quoted.explain()
    gets = [e.messages[0]["params"] for e in proxy.exchanges if e.rpc == ["prompts/get"]]
    assert [(get["name"], get["arguments"]) for get in gets] == [
        ("enqueue", {"request": "Add", "w2": "a", "w3": "CHANGELOG", "w4": "to", "w5": "myorg/api-service"}),
        ("work_next", {"operation": '"code_change'}),
    ], proxy.log()

    first = texts(model.main_requests()[0].body)
    assert any('Request:\n"""\nAdd a CHANGELOG to myorg/api-service\n"""' in text for text in first), first
    assert claude_code.egress.attempts == []
