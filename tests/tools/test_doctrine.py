"""Doctrine through the MCP client: jct_manage_doctrine, doctrine named at enqueue and on mission tasks,
doctrine by repository prefix, the text in the briefing, and jct://doctrine/{namespace}/{name}."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import TextResourceContents

from tests.tools.conftest import ClientFactory, error, ok

pytestmark = pytest.mark.anyio

STYLE = "Use type hints everywhere.\nKeep functions under 40 lines."
TASK = {"objective": "Add a health check", "operation": "code_change", "target_repo": "myorg/api"}


async def page(client: Client, uri: str) -> str:
    content = (await client.read_resource(uri)).contents[0]
    assert isinstance(content, TextResourceContents)
    return content.text


async def briefing(client: Client, task_id: str) -> tuple[dict[str, Any], str]:
    context = await ok(client, "jct_get_context", task_id=task_id)
    return context, await page(client, f"jct://issues/{context['issue']['id']}")


async def test_add_list_show_remove(connect: ClientFactory) -> None:
    async with connect() as client:
        added = await ok(client, "jct_manage_doctrine", action="add", name="myorg/code-style", body=STYLE)
        (entry,) = added["doctrine"]
        assert (entry["ref"], entry["uri"], entry["body"]) == (
            "myorg/code-style",
            "jct://doctrine/myorg/code-style",
            STYLE,
        )
        assert entry.get("repo_prefix") is None
        await ok(client, "jct_manage_doctrine", action="add", name="myorg/security", body="No secrets in logs.")
        listed = await ok(client, "jct_manage_doctrine", action="list")
        assert [d["ref"] for d in listed["doctrine"]] == ["myorg/code-style", "myorg/security"]
        replaced = await ok(
            client, "jct_manage_doctrine", action="add", name="myorg/code-style", body="v2", repo_prefix="myorg/"
        )
        assert replaced["doctrine"][0]["repo_prefix"] == "myorg/"
        shown = await ok(client, "jct_manage_doctrine", action="show", name="myorg/code-style")
        assert shown["doctrine"][0]["body"] == "v2"
        await ok(client, "jct_manage_doctrine", action="remove", name="myorg/code-style")
        gone = await error(client, "jct_manage_doctrine", action="show", name="myorg/code-style")
        assert gone["code"] == "DOCTRINE_NOT_FOUND"
        assert [d["ref"] for d in (await ok(client, "jct_manage_doctrine", action="list"))["doctrine"]] == [
            "myorg/security"
        ]


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"action": "add", "name": "no-slash", "body": "x"}, "INVALID_ARGUMENT"),
        ({"action": "add", "name": "a/b/c", "body": "x"}, "INVALID_ARGUMENT"),
        ({"action": "add", "name": "myorg/x"}, "INVALID_ARGUMENT"),
        ({"action": "add", "name": "myorg/x", "body": "   "}, "INVALID_ARGUMENT"),
        ({"action": "show"}, "INVALID_ARGUMENT"),
        ({"action": "remove", "name": "myorg/nothing"}, "DOCTRINE_NOT_FOUND"),
    ],
    ids=["no namespace", "two slashes", "add without body", "empty body", "show without name", "remove unknown"],
)
async def test_bad_doctrine_calls_change_nothing(connect: ClientFactory, arguments: dict[str, Any], code: str) -> None:
    async with connect() as client:
        assert (await error(client, "jct_manage_doctrine", **arguments))["code"] == code
        assert (await ok(client, "jct_manage_doctrine", action="list"))["doctrine"] == []


async def test_doctrine_named_at_enqueue_is_in_the_briefing_with_its_text(connect: ClientFactory) -> None:
    async with connect() as client:
        await ok(client, "jct_manage_doctrine", action="add", name="myorg/code-style", body=STYLE)
        await ok(client, "jct_manage_doctrine", action="add", name="myorg/other", body="Not for this task.")
        task = await ok(client, "jct_enqueue_task", **TASK, doctrine=["myorg/code-style"])
        context, text = await briefing(client, task["task_id"])
        assert [(d["namespace"], d["name"], d["body"]) for d in context["doctrine_refs"]] == [
            ("myorg", "code-style", STYLE)
        ]
        section = text.split("## Doctrine")[1]
        assert "myorg/code-style" in section
        assert "jct://doctrine/myorg/code-style" in section
        assert "Use type hints everywhere." in section
        assert "Keep functions under 40 lines." in section
        assert "Not for this task" not in text


async def test_unknown_doctrine_at_enqueue_enqueues_nothing(connect: ClientFactory) -> None:
    async with connect() as client:
        before = (await ok(client, "jct_queue_stats"))["counts"]
        refused = await error(client, "jct_enqueue_task", **TASK, doctrine=["myorg/missing"])
        assert refused["code"] == "DOCTRINE_NOT_FOUND"
        assert "myorg/missing" in refused["message"]
        assert (await ok(client, "jct_queue_stats"))["counts"] == before
        bad = await error(client, "jct_enqueue_task", **TASK, doctrine=["nope"])
        assert bad["code"] == "INVALID_ARGUMENT"


async def test_doctrine_by_repository_prefix_reaches_every_task_under_it(connect: ClientFactory) -> None:
    async with connect() as client:
        early = await ok(client, "jct_enqueue_task", **TASK)
        await ok(client, "jct_manage_doctrine", action="add", name="myorg/code-style", body=STYLE, repo_prefix="myorg/")
        await ok(client, "jct_manage_doctrine", action="add", name="x/underscore", body="U", repo_prefix="my_rg/")
        late = await ok(client, "jct_enqueue_task", **(TASK | {"target_repo": "myorg/web"}))
        other = await ok(client, "jct_enqueue_task", **(TASK | {"target_repo": "otherorg/api"}))
        for task in (early, late):
            context, text = await briefing(client, task["task_id"])
            assert [d["name"] for d in context["doctrine_refs"]] == ["code-style"]
            assert "Use type hints everywhere." in text
        context, text = await briefing(client, other["task_id"])
        assert context["doctrine_refs"] == []  # and `_` in a prefix is no wildcard: myorg/ is not my_rg/
        assert "## Doctrine" not in text
        await ok(client, "jct_manage_doctrine", action="remove", name="myorg/code-style")
        context, _ = await briefing(client, late["task_id"])
        assert context["doctrine_refs"] == []


async def test_mission_tasks_name_their_doctrine(connect: ClientFactory) -> None:
    async with connect() as client:
        await ok(client, "jct_manage_doctrine", action="add", name="myorg/docs-style", body="Write short sentences.")
        phases: list[dict[str, Any]] = [
            {
                "name": "Build",
                "tasks": [
                    {
                        "key": "a",
                        "objective": "Write the guide",
                        "operation": "docs",
                        "target_repo": "myorg/d",
                        "doctrine": ["myorg/docs-style"],
                    },
                    {"key": "b", "objective": "Fix the API", "operation": "code_change", "target_repo": "myorg/d"},
                ],
            }
        ]
        created = await ok(client, "jct_create_mission", title="Docs", goal="Document it", phases=phases)
        ids = {t["key"]: t["task_id"] for t in created["tasks"]}
        context, text = await briefing(client, ids["a"])
        assert [d["name"] for d in context["doctrine_refs"]] == ["docs-style"]
        assert "Write short sentences." in text
        assert (await ok(client, "jct_get_context", task_id=ids["b"]))["doctrine_refs"] == []
        phases[0]["tasks"][1]["doctrine"] = ["myorg/unknown"]
        refused = await error(client, "jct_create_mission", title="Docs 2", goal="Again", phases=phases)
        assert refused["code"] == "DOCTRINE_NOT_FOUND"


async def test_doctrine_is_a_resource_listed_for_at_mentions(connect: ClientFactory) -> None:
    async with connect() as client:
        await ok(client, "jct_manage_doctrine", action="add", name="myorg/code-style", body=STYLE, repo_prefix="myorg/")
        listed = (await client.list_resources()).resources
        entry = next(r for r in listed if str(r.uri) == "jct://doctrine/myorg/code-style")
        assert "myorg/code-style" in entry.name
        templates = (await client.list_resource_templates()).resource_templates
        assert "jct://doctrine/{namespace}/{name}" in [t.uri_template for t in templates]
        text = await page(client, "jct://doctrine/myorg/code-style")
        assert text.startswith("# Doctrine: myorg/code-style")
        assert "`myorg/`" in text
        assert "> Use type hints everywhere." in text
        await ok(client, "jct_manage_doctrine", action="remove", name="myorg/code-style")
        with pytest.raises(MCPError):
            await client.read_resource("jct://doctrine/myorg/code-style")
        assert "jct://doctrine/myorg/code-style" not in [str(r.uri) for r in (await client.list_resources()).resources]
