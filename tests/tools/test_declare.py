"""Every server of a process registers the same tool functions, each closed over its own Core: the second is
built from the first one's tools (server/tools/declare.py), and must list and behave exactly as if built anew."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from server.config import Settings
from server.core.service import Core
from server.identity import FixedIdentity
from server.mcp import build_mcp
from server.tools import declare
from tests.conftest import sqlite_template
from tests.tools.conftest import ok

pytestmark = pytest.mark.anyio


async def _listed(core: Core) -> list[dict[str, Any]]:
    async with Client(build_mcp(core, FixedIdentity("local")), mode="legacy") as client:
        return [tool.model_dump(mode="json") for tool in (await client.list_tools()).tools]


@pytest.mark.dialects("sqlite")
async def test_a_second_server_lists_what_the_first_did_and_calls_into_its_own_core(
    make_settings: Callable[..., Settings],
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(declare, "_BUILT", {})  # the first server below builds every tool from its function
    other = tmp_path / "second.db"
    shutil.copyfile(await sqlite_template(tmp_path_factory.getbasetemp()), other)
    first = Core.build(make_settings())
    second = Core.build(make_settings(database_url=f"sqlite+aiosqlite:///{other}"))
    try:
        built_anew = await _listed(first)
        assert len(declare._BUILT) == len(built_anew)
        assert await _listed(second) == built_anew
        # Twice from the copies: the schemas they share stay as the first server trimmed them.
        assert await _listed(second) == built_anew

        async with Client(build_mcp(second, FixedIdentity("local")), mode="legacy") as client:
            enqueued = await ok(client, "jct_enqueue_task", objective="o", operation="analysis", target_repo="a/b")
        async with Client(build_mcp(first, FixedIdentity("local")), mode="legacy") as client:
            listed = await ok(client, "jct_list_tasks")
        assert enqueued["task_id"] not in {task["task_id"] for task in listed["tasks"]}
        async with Client(build_mcp(second, FixedIdentity("local")), mode="legacy") as client:
            listed = await ok(client, "jct_list_tasks")
        assert enqueued["task_id"] in {task["task_id"] for task in listed["tasks"]}
    finally:
        await first.db.dispose()
        await second.db.dispose()
