"""Workflow tools (DESIGN section 12): list the workflows, start one as a mission."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import Field

from server.core import results
from server.core.models import Limits
from server.core.service import Core
from server.core.workflows import start as workflow_start
from server.identity import Identity
from server.tools.annotations import READ, WRITE
from server.tools.declare import tool
from server.tools.params import IdempotencyKey, Priority, TargetRepo, text

MAX_INPUTS = {"maxProperties": workflow_start.MAX_INPUTS}


def register_plan(mcp: MCPServer[Any], core: Core, identity: Identity) -> None:
    @tool(mcp, WRITE)
    async def jct_start_workflow(
        name: Annotated[str, text("The workflow.", 64)],
        inputs: Annotated[dict[str, str], Field(description="By input name.", json_schema_extra=MAX_INPUTS)],
        target_repo: TargetRepo,
        ctx: Context,
        target_ref: Annotated[str, text("Branch.", Limits.REF)] = "main",
        target_path: Annotated[str, text("Scope.", Limits.PATH)] = "",
        priority: Priority = "P2",
        idempotency_key: IdempotencyKey = None,
    ) -> results.WorkflowStarted:
        """Start a workflow (jct_list_workflows): a mission, a task per step. Undo: jct_cancel_mission."""
        return await workflow_start.start_workflow(
            core,
            identity.actor(ctx),
            name,
            inputs,
            target_repo=target_repo,
            target_ref=target_ref,
            target_path=target_path,
            priority=priority,
            idempotency_key=idempotency_key,
        )


def register_observe(mcp: MCPServer[Any], core: Core, identity: Identity) -> None:
    @tool(mcp, READ)
    async def jct_list_workflows() -> results.WorkflowList:
        """Workflows to start, with their inputs."""
        return workflow_start.list_workflows(core)
