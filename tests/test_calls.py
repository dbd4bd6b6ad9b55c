"""The tool-call log (JCT_LOG_TOOL_CALLS), read from the log of a real `jct serve` on both databases: one info
line per call with tool, principal, agent, the task and run it was about, outcome and duration; never what the
call carried; in JSON with JCT_LOG_FORMAT=json; and none with the setting off."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.support.servers import Server, serve
from tests.transports.conftest import call, server_env

pytestmark = pytest.mark.anyio

OBJECTIVE = "Objective text that stays out of the log"
CONTENT = "artifact content that stays out of the log"
LIMIT = 60


async def work(server: Server) -> dict[str, str]:
    """Enqueue, claim, report an artifact, and one refused call: the ids the log should name."""
    async with Client(server.mcp_url, mode="legacy") as client:
        task = await call(
            client, "jct_enqueue_task", objective=OBJECTIVE, operation="analysis", target_repo="myorg/api"
        )
        claim = await call(client, "jct_claim_task", task_id=task["task_id"])
        await call(
            client,
            "jct_report_artifact",
            task_id=task["task_id"],
            title="notes",
            artifact_type="report",
            content=CONTENT,
        )
        refused = await client.call_tool("jct_get_task", {"task_id": "not a task id"})
        assert refused.is_error
    run_id, _, key = claim["run_id"].partition(".")
    return {"task_id": task["task_id"], "run_id": run_id, "key": key}


def lines_of(log: str, logger: str = "jct.calls") -> list[str]:
    return [line for line in log.splitlines() if logger in line]


async def test_every_tool_call_is_one_info_line_without_what_it_carried(database_url: str, tmp_path: Path) -> None:
    env = server_env(database_url, tmp_path, log_level="INFO")
    with anyio.fail_after(LIMIT):
        async with serve(env, tmp_path) as server:
            ids = await work(server)
            log = server.log()
    calls = lines_of(log)
    assert [line.split("tool=")[1].split()[0] for line in calls] == [
        "jct_enqueue_task",
        "jct_claim_task",
        "jct_report_artifact",
        "jct_get_task",
    ], log
    assert all(" INFO jct.calls: " in line for line in calls)
    claimed = calls[1]
    assert f"task_id={ids['task_id']} run_id={ids['run_id']} outcome=ok duration_ms=" in claimed
    assert "principal=local agent=" in claimed
    assert f"task_id={ids['task_id']}" in calls[0]  # the enqueued task, read from the result
    assert "task_id=invalid outcome=INVALID_ARGUMENT" in calls[3]
    assert OBJECTIVE not in log
    assert ids["key"]
    assert ids["key"] not in log  # a run_id's claim key is a credential
    assert CONTENT not in log
    assert "not a task id" not in "\n".join(calls)  # the refusal's own line (jct.tools) quotes it, not this one


async def test_json_lines_carry_each_field_and_the_setting_turns_them_off(database_url: str, tmp_path: Path) -> None:
    as_json = server_env(database_url, tmp_path, log_level="INFO", log_format="json")
    off = server_env(database_url, tmp_path, log_level="INFO", log_tool_calls=False)
    with anyio.fail_after(LIMIT):
        async with serve(as_json, tmp_path, "json") as server:
            ids = await work(server)
            log = server.log()
        async with serve(off, tmp_path, "off") as quiet:
            await work(quiet)
            silent = quiet.log()
    records: list[dict[str, Any]] = [json.loads(line) for line in lines_of(log)]
    claimed = next(record for record in records if record["tool"] == "jct_claim_task")
    assert (claimed["level"], claimed["logger"], claimed["outcome"]) == ("INFO", "jct.calls", "ok")
    assert (claimed["task_id"], claimed["run_id"], claimed["principal"]) == (ids["task_id"], ids["run_id"], "local")
    assert isinstance(claimed["duration_ms"], float)
    assert lines_of(silent) == []
    assert "jct_enqueue_task" not in silent
