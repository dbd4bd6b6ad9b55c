"""Observe tools: read tasks, runs, evidence, artifacts, the audit trail and queue statistics."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from pydantic import Field

from server.core import results
from server.core.claims import queue
from server.core.operators import observe
from server.core.service import Core
from server.identity import Identity
from server.tools.annotations import READ
from server.tools.declare import tool
from server.tools.params import AuditLimit, Cursor, RunId, TaskId


def register(mcp: MCPServer[Any], core: Core, identity: Identity) -> None:
    @tool(mcp, READ)
    async def jct_get_task(task_id: TaskId) -> results.TaskView:
        """A task: status, attempts, result, error, runs, cost."""
        return await observe.get_task(core, task_id)

    @tool(mcp, READ)
    async def jct_get_run(run_id: RunId) -> results.RunView:
        """A run: status, executor, outputs, progress events, artifact ids, verdict."""
        return await observe.get_run(core, run_id)

    @tool(mcp, READ)
    async def jct_get_evidence(run_id: RunId) -> results.EvidenceView:
        """A run's evidence pack: verdict, reason, checks, criteria with cited artifacts, review_state; its id goes to
        jct_submit_review."""
        return await observe.get_evidence(core, run_id)

    @tool(mcp, READ)
    async def jct_get_artifact(
        artifact_id: str,
        offset: Annotated[int, Field(ge=0, description="First character.")] = 0,
        max_chars: Annotated[int, Field(ge=1, le=100_000)] = 20_000,
    ) -> results.ArtifactContent:
        """An artifact's content from offset; truncated: call again at next_offset."""
        return await observe.get_artifact(core, artifact_id, offset=offset, max_chars=max_chars)

    @tool(mcp, READ)
    async def jct_get_audit_trail(
        entity_kind: Literal["Task", "Issue", "Run", "Artifact", "EvidencePack"],
        entity_id: str,
        limit: AuditLimit = 50,
        cursor: Cursor = None,
    ) -> results.AuditTrail:
        """An entity's recorded changes, oldest first: actor, action, before/after."""
        return await observe.get_audit_trail(core, entity_kind, entity_id, limit=limit, cursor=cursor)

    @tool(mcp, READ)
    async def jct_queue_stats() -> results.QueueStats:
        """Task counts by status, expired leases, oldest queued age, pending reviews."""
        return await queue.queue_stats(core)
