"""Telemetry mid-run: jct_report_progress carries what was spent since the last report, the run keeps the
sums, its page shows them, and jct_queue_stats adds up every run's."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp_types import TextResourceContents
from sqlalchemy import select

from server.core.claims import queue
from server.core.service import Core
from server.db import tables
from tests.core.helpers import bare
from tests.tools.conftest import ClientFactory, error, ok

pytestmark = pytest.mark.anyio

TASK = {"objective": "Write docs", "operation": "docs", "target_repo": "myorg/docs"}


async def claimed(client: Client) -> dict[str, Any]:
    task = await ok(client, "jct_enqueue_task", **TASK)
    return await ok(client, "jct_claim_task", task_id=task["task_id"])


async def page(client: Client, uri: str) -> str:
    result = await client.read_resource(uri)
    content = result.contents[0]
    assert isinstance(content, TextResourceContents)
    return content.text


async def test_progress_telemetry_is_summed_on_the_run_and_shown_on_its_page(connect: ClientFactory) -> None:
    async with connect() as client:
        claim = await claimed(client)
        task_id, run_id = claim["task_id"], claim["run_id"]
        first = {"tokens_input": 1000, "tokens_output": 200, "cost_usd": 0.25, "duration_seconds": 30, "model": "a"}
        await ok(client, "jct_report_progress", task_id=task_id, message="Read the code", telemetry=first)
        second = {"tokens_input": 500, "cost_usd": 0.5, "model": "b"}
        await ok(client, "jct_report_progress", task_id=task_id, message="Wrote it", telemetry=second)

        run = (await ok(client, "jct_get_run", run_id=run_id))["run"]
        assert run["telemetry"] == {
            "tokens_input": 1500,
            "tokens_output": 200,
            "cost_usd": 0.75,
            "duration_seconds": 30,
            "model": "b",
        }
        text = await page(client, f"jct://runs/{run_id}")
        assert "## Telemetry" in text
        assert '"tokens_input":1500' in text.replace(" ", "")

        await ok(client, "jct_report_artifact", task_id=task_id, title="guide.md", artifact_type="doc", content="#")
        await ok(
            client,
            "jct_complete_task",
            task_id=task_id,
            success=True,
            summary="Done",
            telemetry={"tokens_output": 100, "duration_seconds": 15},
        )
        run = (await ok(client, "jct_get_run", run_id=run_id))["run"]
        assert run["telemetry"]["tokens_output"] == 300
        assert run["telemetry"]["duration_seconds"] == 45
        assert run["telemetry"]["tokens_input"] == 1500


async def test_queue_stats_totals_add_every_runs_telemetry(connect: ClientFactory, core: Core) -> None:
    async with connect(core=core) as client:
        before = (await ok(client, "jct_queue_stats"))["telemetry_totals"]
        assert before == {"tokens_input": 0, "tokens_output": 0, "cost_usd": 0.0, "duration_seconds": 0.0}
        one, two = await claimed(client), await claimed(client)
        await ok(client, "jct_report_progress", task_id=one["task_id"], message="a", telemetry={"tokens_input": 10})
        await ok(
            client,
            "jct_report_progress",
            task_id=two["task_id"],
            message="b",
            telemetry={"tokens_input": 5, "cost_usd": 0.5},
        )
        await ok(
            client, "jct_complete_task", task_id=two["task_id"], success=False, summary="x", telemetry={"cost_usd": 1}
        )
        totals = (await ok(client, "jct_queue_stats"))["telemetry_totals"]
        assert totals["tokens_input"] == 15
        assert totals["cost_usd"] == pytest.approx(1.5)
        # The sweeper folds the rows; the totals stay the same.
        await queue.fold_counts(core)
        assert (await ok(client, "jct_queue_stats"))["telemetry_totals"] == totals


@pytest.mark.parametrize(
    "bad",
    [{"cost_usd": -0.5}, {"tokens_input": "many"}, {"duration_seconds": True}, {"tokens_output": -1}],
    ids=["negative cost", "not a number", "boolean", "negative tokens"],
)
async def test_bad_progress_telemetry_is_refused_and_changes_nothing(
    connect: ClientFactory, bad: dict[str, Any]
) -> None:
    async with connect() as client:
        claim = await claimed(client)
        await ok(client, "jct_report_progress", task_id=claim["task_id"], message="a", telemetry={"tokens_input": 7})
        refused = await error(client, "jct_report_progress", task_id=claim["task_id"], message="b", telemetry=bad)
        assert refused["code"] == "INVALID_ARGUMENT"
        assert "telemetry" in refused["message"]
        run = (await ok(client, "jct_get_run", run_id=claim["run_id"]))["run"]
        assert run["telemetry"] == {"tokens_input": 7}
        events = run.get("events") or []
        assert all(e["message"] != "b" for e in events)
        assert (await ok(client, "jct_queue_stats"))["telemetry_totals"]["tokens_input"] == 7


async def test_one_report_with_telemetry_and_a_human_blocker_keeps_both(connect: ClientFactory, core: Core) -> None:
    """Both change the run: they are one update of it (PostgreSQL runs a change's writes as one statement,
    in which a row is updated once), so neither the sum nor the hold is lost."""
    async with connect() as client:
        claim = await claimed(client)
        task_id, run_id = claim["task_id"], claim["run_id"]
        await ok(
            client,
            "jct_report_progress",
            task_id=task_id,
            run_id=run_id,
            message="Needs a production key",
            kind="blocker",
            data={"requires_human": True},
            telemetry={"tokens_input": 700},
        )
        run = (await ok(client, "jct_get_run", run_id=run_id))["run"]
    assert run["telemetry"] == {"tokens_input": 700}
    async with core.db.read() as conn:
        held = (
            await conn.execute(select(tables.runs.c.requires_human).where(tables.runs.c.id == bare(run_id)))
        ).scalar()
    assert held is True
