"""Every server of a process registers the same resource functions, each closed over its own Core: the second is
built from the first one's templates (server/resources/templates.py `_template`), and must list and read exactly
as if built anew."""

from __future__ import annotations

import shutil
from collections.abc import Callable
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
from tests.conftest import sqlite_template
from tests.tools.conftest import ok

pytestmark = pytest.mark.anyio


async def _listed(core: Core) -> list[dict[str, Any]]:
    async with Client(build_mcp(core, FixedIdentity("local")), mode="legacy") as client:
        listed = (await client.list_resource_templates()).resource_templates
        return [template.model_dump(mode="json") for template in listed]


@pytest.mark.dialects("sqlite")
async def test_a_second_server_lists_the_first_one_s_templates_and_reads_from_its_own_core(
    make_settings: Callable[..., Settings],
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(templates, "_BUILT", {})  # the first server below builds every template from its function
    other = tmp_path / "second.db"
    shutil.copyfile(await sqlite_template(tmp_path_factory.getbasetemp()), other)
    first = Core.build(make_settings())
    second = Core.build(make_settings(database_url=f"sqlite+aiosqlite:///{other}"))
    try:
        built_anew = await _listed(first)
        assert len(templates._BUILT) == len(built_anew) == 9
        assert await _listed(second) == built_anew
        server = build_mcp(second, FixedIdentity("local"))
        artifact = server._resource_manager._templates[uris.TEMPLATES["Artifact"]]
        assert isinstance(artifact, templates.MediaTypedTemplate)  # the copy keeps the class that keeps media types
        assert artifact.security == sdk.resource_security(server)

        async with Client(server, mode="legacy") as client:
            task_id = (await ok(client, "jct_enqueue_task", objective="o", operation="analysis", target_repo="a/b"))[
                "task_id"
            ]
            page = await client.read_resource(uris.task(task_id))
        assert task_id in page.contents[0].text  # type: ignore[union-attr]
        async with Client(build_mcp(first, FixedIdentity("local")), mode="legacy") as client:
            with pytest.raises(MCPError, match="Unknown resource"):
                await client.read_resource(uris.task(task_id))
    finally:
        await first.db.dispose()
        await second.db.dispose()
