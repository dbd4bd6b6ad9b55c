"""Who reviews in the workflow tests: agents (FixedIdentity) and people, through the real MCP client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

from mcp import Client

from server.core.models import Actor
from server.core.service import Core
from server.identity import FixedIdentity
from server.mcp import build_mcp
from tests.tools.conftest import ok

PATCH = "diff --git a/src/app.py b/src/app.py\n--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1 @@\n-a\n+b\n"
TEST_LOG = "===== 12 passed in 0.40s ====="


def draft_then_publish(name: str, summary: str, draft_review: str, more_steps: str = "") -> str:
    """A workflow file: a docs step `draft` (gate: `draft_review`, 2 rounds), then `publish` after it, then
    `more_steps` (YAML list items, indented as steps are)."""
    return f"""\
name: {name}
summary: {summary}
inputs:
  - {{name: topic, required: true}}
steps:
  - id: draft
    operation: docs
    objective: "Draft {{topic}}"
    outputs:
      - {{name: draft, type: doc}}
    gate: {{review: {draft_review}, max_rounds: 2}}
  - id: publish
    depends_on: [draft]
    operation: docs
    objective: "Publish {{topic}}"
    outputs:
      - {{name: page, type: doc}}
{more_steps}"""


@dataclass(frozen=True)
class Person:
    """A person's principal, as a reviewer token without the worker role gives one (`admin` for an admin's)."""

    name: str
    admin: bool = False
    kind: Literal["human", "agent"] = "human"

    def actor(self, ctx: Any) -> Actor:
        return Actor(actor_id=self.name, actor_kind=self.kind, name=self.name, admin=self.admin, principal=self.name)

    def may_use(self, tool: str, toolset: str) -> bool:
        return True


@asynccontextmanager
async def person(
    core: Core, name: str, *, admin: bool = False, kind: Literal["human", "agent"] = "human"
) -> AsyncIterator[Client]:
    async with Client(build_mcp(core, Person(name, admin, kind)), mode="legacy") as client:
        yield client


@asynccontextmanager
async def agent(core: Core, name: str) -> AsyncIterator[Client]:
    async with Client(build_mcp(core, FixedIdentity(name)), mode="legacy") as client:
        yield client


async def deliver(client: Client, task_id: str, outputs: list[tuple[str, str, str]]) -> dict[str, Any]:
    """Claim the task by id, report each output (title, type, content), complete it citing every criterion."""
    claim = await ok(client, "jct_claim_task", task_id=task_id)
    run = {"task_id": task_id, "run_id": claim["run_id"]}
    ids = []
    for title, kind, content in outputs:
        reported = await ok(client, "jct_report_artifact", **run, title=title, artifact_type=kind, content=content)
        ids.append(reported["artifact_id"])
    criteria = claim["context_packet"]["acceptance_criteria"] if claim.get("context_packet") else []
    results = [{"criterion": n, "status": "satisfied", "evidence": ids} for n in range(len(criteria))]
    return await ok(client, "jct_complete_task", **run, success=True, summary="Done.", criteria_results=results)
