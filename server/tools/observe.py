"""Observe tools: read tasks, runs, evidence, artifacts, the audit trail and queue statistics."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from pydantic import Field

from server.core import observe, queue, results
from server.core.service import Core
from server.identity import Identity
from server.tools.annotations import READ
from server.tools.params import Cursor, RunId, TaskId


def register(mcp: MCPServer[Any], core: Core, identity: Identity) -> None:
    @mcp.tool(
        name="jct_get_task",
        annotations=READ,
        description="A task's full record (status, attempts, result, error) and its runs, newest first.",
    )
    async def jct_get_task(task_id: TaskId) -> results.TaskView:
        return await observe.get_task(core, task_id)

    @mcp.tool(
        name="jct_get_run",
        annotations=READ,
        description="A run: status, executor, outputs, progress events, artifacts (ids for jct_get_artifact), verdict.",
    )
    async def jct_get_run(run_id: RunId) -> results.RunView:
        return await observe.get_run(core, run_id)

    @mcp.tool(
        name="jct_get_evidence",
        annotations=READ,
        description=(
            "The prover's evidence pack for a run: verdict, verdict_reason, each check, each criterion's status "
            "with cited artifacts, evidence_missing, and review_state. Its id is what jct_submit_review takes."
        ),
    )
    async def jct_get_evidence(run_id: RunId) -> results.EvidenceView:
        return await observe.get_evidence(core, run_id)

    @mcp.tool(
        name="jct_get_artifact",
        annotations=READ,
        description=(
            "Read an artifact's stored content, max_chars at a time from offset; truncated: true and next_offset "
            "tell you to call again for the rest."
        ),
    )
    async def jct_get_artifact(
        artifact_id: Annotated[str, Field(description="The artifact's id (UUID).")],
        offset: Annotated[int, Field(ge=0, description="First character to read.")] = 0,
        max_chars: Annotated[int, Field(ge=1, le=100_000, description="Characters to read at most.")] = 20_000,
    ) -> results.ArtifactContent:
        return await observe.get_artifact(core, artifact_id, offset=offset, max_chars=max_chars)

    @mcp.tool(
        name="jct_get_audit_trail",
        annotations=READ,
        description="Every recorded change to an entity, oldest first: who (actor), what (action), before/after.",
    )
    async def jct_get_audit_trail(
        entity_kind: Annotated[
            Literal["Task", "Issue", "Run", "Artifact", "EvidencePack"], Field(description="What entity_id names.")
        ],
        entity_id: Annotated[str, Field(description="Its id (UUID).")],
        limit: Annotated[int, Field(ge=1, le=200, description="At most this many per page.")] = 50,
        cursor: Cursor = None,
    ) -> results.AuditTrail:
        return await observe.get_audit_trail(core, entity_kind, entity_id, limit=limit, cursor=cursor)

    @mcp.tool(
        name="jct_queue_stats",
        annotations=READ,
        description="Queue health: task counts by status, expired leases, oldest queued task age, pending reviews.",
    )
    async def jct_queue_stats() -> results.QueueStats:
        return await queue.queue_stats(core)
