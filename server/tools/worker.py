"""Worker tools: find, claim, brief, report, complete, release."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import BaseModel, ConfigDict, Field

from server.core import completion, observe, queue, results, work
from server.core.models import Limits, check_text, parse_id
from server.core.service import Core
from server.errors import invalid
from server.identity import Identity
from server.tools.annotations import READ, RETRY_SAFE, WRITE
from server.tools.params import ClaimedRun, Cursor, Limit, OperationFilter, TaskId


class CriterionReport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    criterion: str | int = Field(description="The criterion's text or 0-based index.")
    status: Literal["satisfied", "unsatisfied"] = Field(description="Whether the work meets it.")
    evidence: list[str] = Field(default_factory=list, description="Ids of this run's artifacts that show it.")
    note: str | None = Field(default=None, description="Anything the reviewer should know.")

    def checked(self, where: str) -> dict[str, Any]:
        """The report as core takes it, after the limits every text a client sends has (README, Input limits)."""
        if isinstance(self.criterion, str):
            check_text(self.criterion, f"{where}.criterion", Limits.CRITERION)
        if len(self.evidence) > Limits.EVIDENCE:
            raise invalid(
                f"{where}.evidence cites {len(self.evidence)} artifacts; the limit is {Limits.EVIDENCE}.",
                "Cite the artifacts that show the criterion is met.",
            )
        evidence = [parse_id(e, f"{where}.evidence[{i}]") for i, e in enumerate(self.evidence)]
        if self.note is not None:
            check_text(self.note, f"{where}.note", Limits.MESSAGE, required=False)
        return {**self.model_dump(), "evidence": evidence}


def register(mcp: MCPServer[Any], core: Core, identity: Identity) -> None:
    @mcp.tool(
        name="jct_list_tasks",
        annotations=READ,
        description=(
            "Browse the queue, highest priority (P0) and oldest first. Use jct_claim_next to simply take the "
            "next task. Returns tasks[] (task_id, objective, operation, target_repo, priority, status, "
            "time_budget_seconds) and next_cursor when more pages exist."
        ),
    )
    async def jct_list_tasks(
        status: Annotated[
            Literal["blocked", "queued", "running", "completed", "failed", "cancelled", "all"],
            Field(description="Tasks in this status; all: any."),
        ] = "queued",
        operation: OperationFilter = None,
        limit: Limit = 10,
        cursor: Cursor = None,
    ) -> results.TaskList:
        return await queue.list_tasks(core, status=status, operation=operation, limit=limit, cursor=cursor)

    @mcp.tool(
        name="jct_claim_task",
        annotations=WRITE,
        description=(
            "Claim one queued task by id. Atomic: exactly one agent wins. Returns run_id (pass it to every later "
            "call on the task), objective, target, constraints, context_packet (summary, files_of_interest, "
            "acceptance_criteria, review_feedback) and lease_expires_at. Error TASK_ALREADY_CLAIMED: someone "
            "else has it; use jct_claim_next."
        ),
    )
    async def jct_claim_task(task_id: TaskId, ctx: Context) -> results.Claim:
        return await queue.claim_task(core, identity.actor(ctx), task_id)

    @mcp.tool(
        name="jct_claim_next",
        annotations=WRITE,
        description=(
            "Claim the highest-priority queued task, optionally filtered. Same result as jct_claim_task plus "
            "claimed: true; claimed: false when nothing is eligible (the queue is empty for you: stop)."
        ),
    )
    async def jct_claim_next(
        ctx: Context,
        operation: OperationFilter = None,
        repo_prefix: Annotated[str | None, Field(description="Only tasks whose target_repo starts with this.")] = None,
    ) -> results.ClaimNext:
        return await queue.claim_next(core, identity.actor(ctx), operation=operation, repo_prefix=repo_prefix)

    @mcp.tool(
        name="jct_get_context",
        annotations=READ,
        description=(
            "Re-read a task's full briefing: issue, latest context_packet (with review_feedback from earlier "
            "attempts), constraint_snapshot and doctrine_refs (standing guidance to follow)."
        ),
    )
    async def jct_get_context(task_id: TaskId) -> results.TaskContext:
        return await observe.get_context(core, task_id)

    @mcp.tool(
        name="jct_report_artifact",
        annotations=WRITE,
        description=(
            "Record an output of your claimed task: give content (stored by JCT, size-limited) or a remote uri. "
            "The prover needs a code_patch (unified diff) or commit for code_change, a doc for docs, a report "
            "for analysis, a log or report for ops; a log with a test-runner summary is checked for failures. "
            "Renews your lease. Returns artifact_id: cite it in criteria_results. Errors: LEASE_EXPIRED (stop, "
            "the task was requeued), NOT_CLAIMANT, PAYLOAD_TOO_LARGE (split it or pass a uri)."
        ),
    )
    async def jct_report_artifact(
        task_id: TaskId,
        title: Annotated[str, Field(description="Short name, e.g. 'Code changes'.")],
        artifact_type: Annotated[
            Literal["code_patch", "commit", "doc", "report", "log", "trace"],
            Field(description="code_patch: a unified diff; log: e.g. test output."),
        ],
        ctx: Context,
        content: Annotated[str | None, Field(description="The content, stored by JCT; or give uri.")] = None,
        uri: Annotated[str | None, Field(description="Where it is kept instead (not file://).")] = None,
        media_type: Annotated[str, Field(description="e.g. text/x-diff, text/markdown.")] = "text/plain",
        run_id: ClaimedRun = None,
    ) -> results.ArtifactReported:
        return await work.report_artifact(
            core,
            identity.actor(ctx),
            task_id,
            title=title,
            artifact_type=artifact_type,
            content=content,
            uri=uri,
            media_type=media_type,
            run_id=run_id,
        )

    @mcp.tool(
        name="jct_report_progress",
        annotations=WRITE,
        description=(
            "Post a progress note on your claimed task and renew its lease; call it every few minutes of long "
            "work or the lease expires and the task is requeued. kind: progress, milestone, decision (data: "
            "{decision, rationale, alternatives}; later tasks of the mission read it) or blocker (data: "
            "{requires_human: true} stops automatic approval until a person reviews)."
        ),
    )
    async def jct_report_progress(
        task_id: TaskId,
        message: Annotated[str, Field(description="What happened, in a line or two.")],
        ctx: Context,
        progress: Annotated[int | None, Field(ge=0, le=100, description="Percent done.")] = None,
        kind: Annotated[
            Literal["progress", "milestone", "decision", "blocker"], Field(description="blocker: you are stuck.")
        ] = "progress",
        run_id: ClaimedRun = None,
        data: Annotated[dict[str, Any] | None, Field(description="Structured detail; see kind.")] = None,
    ) -> results.ProgressReported:
        return await work.report_progress(
            core,
            identity.actor(ctx),
            task_id,
            message=message,
            progress=progress,
            kind=kind,
            run_id=run_id,
            data=data,
        )

    @mcp.tool(
        name="jct_complete_task",
        annotations=RETRY_SAFE,
        description=(
            "Finish your claimed task (success=false if you could not do it, with error_message). Runs the "
            "prover (verdict pass/partial/fail) and the review policy. A criterion counts as satisfied only if "
            "you cite an artifact of this run in criteria_results. Returns task_status, run_status, "
            "evidence_pack{id, verdict, verdict_reason}, review{status: auto_approved | awaiting_manual_review "
            "| not_required}. Safe to retry: a repeat returns the recorded outcome with duplicate: true."
        ),
    )
    async def jct_complete_task(
        task_id: TaskId,
        success: Annotated[bool, Field(description="false if you could not do it.")],
        summary: Annotated[str, Field(description="What was done, for the reviewer.")],
        ctx: Context,
        outputs: Annotated[str | dict[str, Any] | None, Field(description="JSON object of structured outputs.")] = None,
        error_message: Annotated[str | None, Field(description="Why it failed (success=false).")] = None,
        criteria_results: Annotated[
            list[CriterionReport] | None, Field(description="Per acceptance criterion, citing artifact ids.")
        ] = None,
        telemetry: Annotated[
            dict[str, Any] | None, Field(description="tokens_input, tokens_output, cost_usd, duration_seconds.")
        ] = None,
        run_id: ClaimedRun = None,
    ) -> results.Completion:
        return await completion.complete_task(
            core,
            identity.actor(ctx),
            task_id,
            success=success,
            summary=summary,
            outputs=outputs,
            error_message=error_message,
            criteria_results=(
                [c.checked(f"criteria_results[{n}]") for n, c in enumerate(criteria_results)]
                if criteria_results is not None
                else None
            ),
            telemetry=telemetry,
            run_id=run_id,
        )

    @mcp.tool(
        name="jct_release_task",
        annotations=WRITE,
        description=(
            "Give your claim back without penalty (the task returns to the queue for someone else). Use it when "
            "you cannot or should not do the task; use jct_complete_task with success=false when you tried and failed."
        ),
    )
    async def jct_release_task(
        task_id: TaskId,
        reason: Annotated[str, Field(description="Why you are giving it back.")],
        ctx: Context,
        run_id: ClaimedRun = None,
    ) -> results.Released:
        return await work.release_task(core, identity.actor(ctx), task_id, reason, run_id=run_id)
