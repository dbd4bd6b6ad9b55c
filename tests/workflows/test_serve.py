"""A real `jct serve` whose workflow directory holds broken files: it starts, serves, logs each refused file
with its line and reason, and offers the good workflows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from server.config import Settings
from tests.support.flows import flows_with
from tests.support.serving import served
from tests.transports.conftest import call

pytestmark = pytest.mark.anyio

GOOD = """\
name: tidy
summary: Tidy a module
steps:
  - id: tidy
    operation: code_change
    objective: Tidy it
"""


async def test_broken_workflow_files_never_stop_the_server(
    tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    flows = flows_with(
        tmp_path,
        tidy=GOOD,
        object="name: !!python/object/apply:os.system [touch pwned]\n",
        huge=GOOD + "#" * (5 * 1024 * 1024),
        cycle=GOOD.replace("tidy\nsummary", "loop\nsummary") + "    depends_on: [tidy]\n",
    )
    (flows / "binary.yml").write_bytes(b"\x00\xff\xfe" * 100)
    with anyio.fail_after(120):
        async with served(make_settings, workflows_dir=flows) as (url, _core):
            async with httpx2.AsyncClient() as http:
                assert (await http.get(f"{url}/readyz")).json()["status"] == "ready"
            async with Client(streamable_http_client(f"{url}/mcp"), mode="legacy") as client:
                listed = await call(client, "jct_list_workflows")
    assert {w["name"] for w in listed["workflows"]} == {"bugfix", "docs", "feature", "tidy"}
    refused = "\n".join(listed["refused"])
    assert f"{flows / 'object.yaml'}:1: uses the YAML tag" in refused
    assert f"{flows / 'huge.yaml'}:1: is larger than" in refused
    assert f"{flows / 'cycle.yaml'}:" in refused
    assert "depends on itself" in refused
    assert f"{flows / 'binary.yml'}:1:" in refused
    assert not (tmp_path / "pwned").exists()
