"""A task's whole life as an agent lives it, driven through the real Claude Code CLI in print mode."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from server.config import Settings
from server.core.operators import observe
from server.core.service import Core
from tests.claude_code.harness import ERAS, ClaudeCode
from tests.claude_code.model import Reply, Step, ToolResult, ToolUse, ok, scripted_model
from tests.claude_code.proxy import mcp_proxy
from tests.core.helpers import bare, enqueue

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LIMIT = 180.0
CRITERION = "Email is validated"
PATCH = """diff --git a/src/users.py b/src/users.py
--- a/src/users.py
+++ b/src/users.py
@@ -1 +1,2 @@
 def register(email):
+    validate_email(email)
"""


@pytest.mark.parametrize("era", list(ERAS))
async def test_claim_report_complete_through_claude_code(
    claude_code: ClaudeCode, jct: str, make_settings: Callable[..., Settings], era: str
) -> None:
    """Claude Code claims the task JCT has queued, reports a diff and completes it: the task ends `completed`.

    Each step's arguments come from the previous tool result, as a model would take them: the claim's
    task_id and run_id, then the artifact_id the report returned, cited for the acceptance criterion.
    """
    core = Core.build(make_settings())
    try:
        task_id = await enqueue(core, acceptance_criteria=[CRITERION])
    finally:
        await core.db.dispose()

    claimed: dict[str, Any] = {}

    def report(result: ToolResult | None) -> ToolUse:
        claimed.update(ok(result))
        return ToolUse(
            "mcp__jct__jct_report_artifact",
            {
                "task_id": claimed["task_id"],
                "run_id": claimed["run_id"],
                "title": "Code changes",
                "artifact_type": "code_patch",
                "content": PATCH,
            },
        )

    def complete(result: ToolResult | None) -> ToolUse:
        artifact_id = ok(result)["artifact_id"]
        return ToolUse(
            "mcp__jct__jct_complete_task",
            {
                "task_id": claimed["task_id"],
                "run_id": claimed["run_id"],
                "success": True,
                "summary": "register() validates the email before saving.",
                "criteria_results": [{"criterion": CRITERION, "status": "satisfied", "evidence": [artifact_id]}],
            },
        )

    steps: list[Step] = [
        ToolUse("mcp__jct__jct_claim_next", {}, text="Claiming the next task."),
        report,
        complete,
        lambda result: Reply(f"Done: {ok(result)['task_status']}."),
    ]
    with anyio.fail_after(LIMIT):
        async with mcp_proxy(jct) as (proxy, proxy_url), scripted_model(steps) as (model, model_url):
            servers = {"jct": {"type": "http", "url": f"{proxy_url}/mcp"}}
            run = await claude_code.print("Work on the next JCT task.", servers, model_url, era)

    context = f"{run.explain()}\n{proxy.log()}\n{claude_code.mcp_logs()}"
    assert model.errors == [], "\n".join(model.errors)
    assert run.returncode == 0, context
    assert [r.step for r in model.main_requests()] == [0, 1, 2, 3], context
    assert run.json()["result"] == "Done: completed.", context

    claim, artifact, completion = (result.json() for result in model.tool_results)
    assert claim["claimed"] is True
    assert claim["task_id"] == task_id
    assert artifact["type"] == "code_patch"
    assert artifact["run_id"] == bare(claim["run_id"])
    assert completion["task_status"] == "completed"
    assert completion["evidence_pack"]["verdict"] == "pass", completion
    assert completion["review"]["status"] == "auto_approved", completion

    calls = [e for e in proxy.exchanges if e.rpc == ["tools/call"]]
    assert len(calls) == 3, proxy.log()
    assert all(e.status == 200 for e in calls), proxy.log()
    if era == "legacy":  # one session throughout, and Claude Code leaves without DELETE
        assert len(proxy.sessions()) == 1, proxy.log()
        assert all(e.session == proxy.sessions()[0] for e in calls), proxy.log()
    else:  # the 2026-07-28 protocol: no session at all
        assert proxy.sessions() == [], proxy.log()
        assert all(e.session is None for e in proxy.exchanges), proxy.log()
    assert not any(e.http_method == "DELETE" for e in proxy.exchanges), proxy.log()  # it exits without one
    assert claude_code.egress.attempts == []

    core = Core.build(make_settings())
    try:
        view = await observe.get_task(core, task_id)
        run_view = await observe.get_run(core, claim["run_id"])
    finally:
        await core.db.dispose()
    assert view.task.status == "completed"
    assert [(r.run_id, r.status) for r in view.runs] == [(bare(claim["run_id"]), "done")]
    assert [(a.artifact_id, a.type) for a in run_view.artifacts] == [(artifact["artifact_id"], "code_patch")]
