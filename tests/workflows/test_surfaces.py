"""Workflows beyond the tools, through the real MCP client on both databases: a resource per workflow (listed
for @-mentions, readable, completed by name) and the work_next prompt naming the steps in the queue."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import ResourceTemplateReference, TextContent, TextResourceContents

from server.config import Settings
from server.core.service import Core
from tests.tools.conftest import ok
from tests.workflows.people import agent

pytestmark = pytest.mark.anyio


async def listed_uris(client: Client) -> dict[str, str]:
    found: dict[str, str] = {}
    cursor: str | None = None
    while True:
        page = await client.list_resources(cursor=cursor)
        found |= {str(r.uri): r.name for r in page.resources}
        cursor = page.next_cursor
        if cursor is None:
            return found


async def test_each_workflow_is_a_listed_readable_resource(make_settings: Callable[..., Settings]) -> None:
    core = Core.build(make_settings())
    async with agent(core, "planner") as client:
        listed = await listed_uris(client)
        assert listed["jct://workflows/bugfix"] == "Workflow: bugfix"
        assert {"jct://workflows/feature", "jct://workflows/docs"} <= set(listed)

        result = await client.read_resource("jct://workflows/bugfix")
        [content] = result.contents
        assert isinstance(content, TextResourceContents)
        assert content.mime_type == "text/markdown"
        page = content.text
        version = (await ok(client, "jct_list_workflows"))["workflows"][0]["version"]
        assert page.startswith("# Workflow bugfix\n")
        assert f"Version {version} (shipped with JCT)" in page
        assert "- bug (required): What is wrong" in page
        assert "### fix (code_change)" in page
        assert (
            "Waits for: reproduce. Review: human, 3 review(s) may ask for changes, the last failing the task." in page
        )
        assert "- test-log (log)" in page

        with pytest.raises(MCPError):
            await client.read_resource("jct://workflows/nope")
        completed = await client.complete(
            ResourceTemplateReference(type="ref/resource", uri="jct://workflows/{name}"), {"name": "name", "value": "f"}
        )
        assert completed.completion.values == ["feature"]
    await core.db.dispose()


async def test_work_next_names_the_workflow_step_of_a_queued_task(make_settings: Callable[..., Settings]) -> None:
    core = Core.build(make_settings())
    async with agent(core, "worker") as client:
        await ok(client, "jct_enqueue_task", objective="A plain task", operation="docs", target_repo="myorg/api")
        await ok(client, "jct_start_workflow", name="bugfix", inputs={"bug": "Crash"}, target_repo="myorg/api")
        result = await client.get_prompt("work_next")
        content = result.messages[0].content
        assert isinstance(content, TextContent)
        text = content.text
        assert "context_packet.data.step" in text
        [step_line] = [line for line in text.splitlines() if "Reproduce: Crash" in line]
        assert "workflow bugfix, step reproduce; outputs: failing-test (code_patch), repro (report)" in step_line
        [plain] = [line for line in text.splitlines() if "A plain task" in line]
        assert "workflow" not in plain
    await core.db.dispose()
