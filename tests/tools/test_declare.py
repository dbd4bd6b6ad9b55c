"""Every server of a process registers the same tool and resource functions, each closed over its own Core: the
second is built from the first one's tools (server/tools/declare.py) and templates (server/resources/templates.py
`_template`), and must list and behave exactly as if built anew."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from server import sdk, uris
from server.config import Settings
from server.core.service import Core
from server.identity import FixedIdentity
from server.mcp import build_mcp
from server.resources import templates
from server.tools import declare
from tests.conftest import sqlite_template
from tests.tools.conftest import ok

pytestmark = [pytest.mark.anyio, pytest.mark.dialects("sqlite")]


@pytest.fixture
async def cores(
    make_settings: Callable[..., Settings], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[Core, Core]]:
    """Two Cores on two databases, in this process."""
    other = tmp_path / "second.db"
    shutil.copyfile(await sqlite_template(tmp_path_factory.getbasetemp()), other)
    first = Core.build(make_settings())
    second = Core.build(make_settings(database_url=f"sqlite+aiosqlite:///{other}"))
    try:
        yield first, second
    finally:
        await first.db.dispose()
        await second.db.dispose()


async def _listed(core: Core, kind: str) -> list[dict[str, Any]]:
    async with Client(build_mcp(core, FixedIdentity("local")), mode="legacy") as client:
        if kind == "tools":
            return [tool.model_dump(mode="json") for tool in (await client.list_tools()).tools]
        listed = (await client.list_resource_templates()).resource_templates
        return [template.model_dump(mode="json") for template in listed]


async def _built_alike(cores: tuple[Core, Core], monkeypatch: pytest.MonkeyPatch, kind: str) -> int:
    """The first server builds every tool or template from its function, the second lists the same (twice: what
    the copies share stays as the first server left it); how many were built."""
    built = declare if kind == "tools" else templates
    monkeypatch.setattr(built, "_BUILT", {})
    first, second = cores
    built_anew = await _listed(first, kind)
    assert len(built._BUILT) == len(built_anew)
    assert await _listed(second, kind) == built_anew
    assert await _listed(second, kind) == built_anew
    return len(built_anew)


async def test_a_second_server_lists_what_the_first_did_and_calls_into_its_own_core(
    cores: tuple[Core, Core], monkeypatch: pytest.MonkeyPatch
) -> None:
    await _built_alike(cores, monkeypatch, "tools")
    first, second = cores
    async with Client(build_mcp(second, FixedIdentity("local")), mode="legacy") as client:
        enqueued = await ok(client, "jct_enqueue_task", objective="o", operation="analysis", target_repo="a/b")
    async with Client(build_mcp(first, FixedIdentity("local")), mode="legacy") as client:
        listed = await ok(client, "jct_list_tasks")
    assert enqueued["task_id"] not in {task["task_id"] for task in listed["tasks"]}
    async with Client(build_mcp(second, FixedIdentity("local")), mode="legacy") as client:
        listed = await ok(client, "jct_list_tasks")
    assert enqueued["task_id"] in {task["task_id"] for task in listed["tasks"]}


async def test_a_second_server_lists_the_first_one_s_templates_and_reads_from_its_own_core(
    cores: tuple[Core, Core], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert await _built_alike(cores, monkeypatch, "templates") == 9
    first, second = cores
    server = build_mcp(second, FixedIdentity("local"))
    artifact = server._resource_manager._templates[uris.TEMPLATES["Artifact"]]
    assert isinstance(artifact, templates.MediaTypedTemplate)  # the copy keeps the class that keeps media types
    assert artifact.security is sdk.resource_security(server)

    async with Client(server, mode="legacy") as client:
        task_id = (await ok(client, "jct_enqueue_task", objective="o", operation="analysis", target_repo="a/b"))[
            "task_id"
        ]
        page = await client.read_resource(uris.task(task_id))
    assert task_id in page.contents[0].text  # type: ignore[union-attr]
    async with Client(build_mcp(first, FixedIdentity("local")), mode="legacy") as client:
        with pytest.raises(MCPError, match="Unknown resource"):
            await client.read_resource(uris.task(task_id))
