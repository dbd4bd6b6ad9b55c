"""What a client is told about a run is the same everywhere and names nothing on the server's disk: after a
needs_changes round the claim's `attempt`, the run page's number and the task page's run count agree, and
artifacts are jct://artifacts/{id} (never a file:// path) in every result and page."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp import Client

from server.core.service import Core
from server.identity import FixedIdentity
from server.mcp import build_mcp
from tests.forgery import WORKER, hostile_run
from tests.resources.test_agent_text import review_as_bob
from tests.resources.test_resources import serve, text
from tests.tools.conftest import ok

pytestmark = pytest.mark.anyio


def no_server_path(value: Any) -> None:
    dumped = json.dumps(value)
    assert "file:" not in dumped, dumped
    assert '"/' not in dumped, dumped


async def test_counters_agree_after_needs_changes_and_no_server_paths(core: Core) -> None:
    first = await hostile_run(core)
    await review_as_bob(core, first.pack_id, decision="needs_changes", reason="Add the grammar document")
    async with Client(build_mcp(core, FixedIdentity(WORKER))) as worker, Client(serve(core)) as reader:
        claim = await ok(worker, "jct_claim_task", task_id=first.task_id)
        assert claim["attempt"] == 2
        reported = await ok(
            worker,
            "jct_report_artifact",
            task_id=first.task_id,
            run_id=claim["run_id"],
            title="Grammar",
            artifact_type="doc",
            content="list := '[' items ']'\n",
        )
        assert reported["uri"] == f"jct://artifacts/{reported['artifact_id']}"
        no_server_path(reported)

        run = await ok(worker, "jct_get_run", run_id=claim["run_id"])
        assert run["run"]["attempt"] == 2
        assert [a["uri"] for a in run["artifacts"]] == [f"jct://artifacts/{reported['artifact_id']}"]
        no_server_path(run)
        earlier = await ok(worker, "jct_get_run", run_id=first.run_id)
        assert earlier["run"]["attempt"] == 1
        assert [a["uri"] for a in earlier["artifacts"]] == [f"jct://artifacts/{first.artifact_id}"]
        no_server_path(earlier)
        task = await ok(worker, "jct_get_task", task_id=first.task_id)
        assert sorted(r["attempt"] for r in task["runs"]) == [1, 2]
        no_server_path(task)

        run_page = await text(reader, f"jct://runs/{claim['run_id']}")
        assert run_page.startswith("# Run 2: ")
        task_page = await text(reader, f"jct://tasks/{first.task_id}")
        assert " · 2 runs · expired leases 0/" in task_page
        briefing = await text(reader, f"jct://issues/{first.issue_id}")
        assert " · 2 runs · expired leases 0/" in briefing
        for page in (run_page, task_page, briefing, await text(reader, f"jct://runs/{first.run_id}")):
            assert "file:" not in page
        artifact_page = await reader.read_resource(f"jct://artifacts/{reported['artifact_id']}")
        assert "list := " in artifact_page.contents[0].text  # type: ignore[union-attr]
