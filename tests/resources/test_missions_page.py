"""The mission page (jct://missions/{id}): listed while active, completed by id or title words, rendered with
what is claimable next and what blocks, and announced when one of its tasks changes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import ResourceTemplateReference

from server.core.service import Core
from server.identity import FixedIdentity
from server.mcp import build_mcp
from server.notify.feed import ChangeFeed
from tests.core.test_missions import created
from tests.support.missions import mission, task
from tests.tools.conftest import ok

pytestmark = pytest.mark.anyio


@pytest.fixture
async def client(core: Core) -> AsyncIterator[Client]:
    async with Client(build_mcp(core, FixedIdentity("planner")), mode="legacy") as connected:
        yield connected


async def text(client: Client, uri: str) -> str:
    contents = (await client.read_resource(uri)).contents
    return "".join(getattr(part, "text", "") for part in contents)


async def test_an_active_mission_is_listed_first_and_reads_as_a_page(client: Client) -> None:
    ids = await created(client, mission([task("spec")], [task("build", "spec")], title="Release 2.0"))
    listed = (await client.list_resources()).resources
    uris = [str(r.uri) for r in listed]
    assert uris[:3] == ["jct://queue", "jct://reviews/pending", f"jct://missions/{ids['mission']}"]
    assert listed[2].name == "Mission: Release 2.0"

    page = await text(client, f"jct://missions/{ids['mission']}")
    headings = [line for line in page.splitlines() if line.startswith("#")]
    assert headings == [
        "# Mission: Release 2.0",
        "## Goal",
        "## Claimable next",
        "## Blockers",
        "## Phases",
        "## Decisions so far, newest first",
        "## Tasks",
        "## Next",
    ]
    claimable = page.split("## Claimable next")[1].split("## Blockers")[0]
    assert f"jct://tasks/{ids['spec']}" in claimable
    assert f"jct://tasks/{ids['build']}" not in claimable
    assert "0/2 tasks approved" in page


async def test_mission_ids_complete_by_prefix_and_title_words(client: Client) -> None:
    ids = await created(client, mission([task("a")], title="Migrate billing"))
    await created(client, mission([task("b")], title="Refresh docs"))
    ref = ResourceTemplateReference(type="ref/resource", uri="jct://missions/{mission_id}")
    by_words = await client.complete(ref, {"name": "mission_id", "value": "billing"})
    assert by_words.completion.values == [ids["mission"]]
    by_prefix = await client.complete(ref, {"name": "mission_id", "value": ids["mission"][:8]})
    assert ids["mission"] in by_prefix.completion.values


async def test_an_unknown_mission_is_resource_not_found(client: Client) -> None:
    with pytest.raises(Exception, match="Unknown resource"):
        await client.read_resource("jct://missions/6f8dc5fc-b239-45c9-a79e-d7f107855007")


async def test_a_subscriber_to_a_mission_hears_when_its_task_is_claimed(core: Core) -> None:
    """The change feed reads a task's mission with the task's audit row: the mission page is announced."""
    seen: list[str] = []
    changed = anyio.Event()

    async def inbox(message: Any) -> None:
        uri = str(getattr(getattr(message, "params", None), "uri", ""))
        if uri:
            seen.append(uri)
            changed.set()

    server = build_mcp(core, FixedIdentity("watcher"))
    feed = ChangeFeed(core, server.hub.deliver, 0.05)
    async with Client(server, mode="legacy", message_handler=inbox) as watcher:
        ids = await created(watcher, mission([task("a")]))
        await feed.start_position()
        uri = f"jct://missions/{ids['mission']}"
        await watcher.subscribe_resource(uri)
        claim = await ok(watcher, "jct_claim_task", task_id=ids["a"])
        with anyio.fail_after(10):
            while uri not in seen:
                await feed.poll()
                with anyio.move_on_after(0.2):
                    await changed.wait()
                changed = anyio.Event()
        assert claim["mission_id"] == ids["mission"]
