"""Worker tools: find, claim, brief, report, complete, release."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from server.core import results
from server.core.claims import queue, work
from server.core.claims.holders import HUNG_UP
from server.core.models import Limits, check_text, parse_id
from server.core.operators import observe
from server.core.review import completion
from server.core.service import Core
from server.errors import invalid
from server.identity import Identity
from server.tools.annotations import READ, RETRY_SAFE, WRITE
from server.tools.declare import tool
from server.tools.params import ClaimedRun, Cursor, Limit, OperationFilter, Reason, TaskId, Uuid, bounded, text


def _as_text(value: Any) -> Any:
    """The SDK parses a text argument not typed plain `str` as JSON when it can (for clients that send objects
    as JSON text), so artifact content that is a JSON object or array arrives parsed: write it back as text."""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else value


# Artifact content: text, even when it is JSON (a workflow's json output).
Content = Annotated[str | None, BeforeValidator(_as_text), Field(description="Stored by JCT.")]


class CriterionReport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    criterion: str | int = Field(
        description="Its text or 0-based index.", json_schema_extra={"maxLength": Limits.CRITERION}
    )
    status: Literal["satisfied", "unsatisfied"]
    evidence: list[Uuid] = Field(
        default_factory=list,
        description="Ids of this run's artifacts that show it.",
        json_schema_extra={"maxItems": Limits.EVIDENCE},
    )
    note: str | None = Field(None, description="For the reviewer.", json_schema_extra={"maxLength": Limits.MESSAGE})

    def checked(self, where: str) -> dict[str, Any]:
        """The report as core takes it, after the limits on every text a client sends (docs/tools.md, Input limits)."""
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


# Summed on the run (server/core/telemetry.py), so each report gives what was spent since the last one,
# jct_complete_task's too (its telemetry's description names the keys).
Spent = Annotated[dict[str, Any] | None, Field(description="Spent since last report.")]


def register(mcp: MCPServer[Any], core: Core, identity: Identity) -> None:
    @tool(mcp, READ)
    async def jct_list_tasks(
        status: Literal["blocked", "queued", "running", "completed", "failed", "cancelled", "all"] = "queued",
        operation: OperationFilter = None,
        limit: Limit = 10,
        cursor: Cursor = None,
    ) -> results.TaskList:
        """The queue, P0 and oldest first (jct_claim_next takes the next)."""
        return await queue.list_tasks(core, status=status, operation=operation, limit=limit, cursor=cursor)

    @tool(mcp, WRITE)
    async def jct_claim_task(task_id: TaskId, ctx: Context) -> results.Claim:
        """Claim a queued task by id. Returns run_id (pass it to later calls), the briefing (context_packet) and
        lease_expires_at. Undo: jct_release_task."""
        return await queue.claim_task(core, identity.actor(ctx), task_id)

    @tool(mcp, WRITE)
    async def jct_claim_next(
        ctx: Context,
        operation: OperationFilter = None,
        repo_prefix: Annotated[str | None, text("Only target_repos starting with this.", Limits.REPO)] = None,
        wait_seconds: Annotated[float, Field(description="Wait this long for one.")] = 0,
    ) -> results.ClaimNext:
        """Claim the highest-priority eligible task, as jct_claim_task does (claimed: true). claimed: false: nothing
        left for you, stop. Undo: jct_release_task."""

        async def still_waiting(waited: float, wait: float) -> None:
            await ctx.report_progress(waited, wait, "waiting for a task")

        claimed = results.ClaimNext(claimed=False)  # what a client that hung up is answered, into the void

        async def claim() -> None:
            nonlocal claimed
            claimed = await queue.claim_next(
                core,
                identity.actor(ctx),
                operation=operation,
                repo_prefix=repo_prefix,
                wait_seconds=wait_seconds,
                progress=still_waiting,
            )

        await unless_hung_up(claim)
        return claimed

    @tool(mcp, READ)
    async def jct_get_context(task_id: TaskId) -> results.TaskContext:
        """A task's briefing: issue, context_packet (with review_feedback), constraints, doctrine to follow."""
        return await observe.get_context(core, task_id)

    @tool(mcp, WRITE)
    async def jct_report_artifact(
        task_id: TaskId,
        title: Annotated[str, text("A short name.", Limits.TITLE)],
        artifact_type: Annotated[
            Literal["code_patch", "commit", "doc", "report", "log", "trace"],
            Field(description="code_patch: a unified diff."),
        ],
        ctx: Context,
        content: Content = None,
        uri: Annotated[str | None, text("Or where it is kept (not file://).", Limits.URI)] = None,
        media_type: Annotated[str, bounded(Limits.MEDIA_TYPE)] = "text/plain",
        run_id: ClaimedRun = None,
    ) -> results.ArtifactReported:
        """Record an output of your claimed task (content, or a remote uri); renews the lease; kept for good. The prover
        wants a code_patch or commit for code_change, a doc for docs, a report for analysis, a log or report for ops.
        Returns artifact_id: cite it in criteria_results."""
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

    @tool(mcp, WRITE)
    async def jct_report_progress(
        task_id: TaskId,
        message: Annotated[str, text("What happened.", Limits.MESSAGE)],
        ctx: Context,
        progress: Annotated[int | None, Field(ge=0, le=100, description="Percent done.")] = None,
        kind: Annotated[
            Literal["progress", "milestone", "decision", "blocker"], Field(description="blocker: stuck.")
        ] = "progress",
        run_id: ClaimedRun = None,
        data: Annotated[dict[str, Any] | None, Field(description="See kind.")] = None,
        telemetry: Spent = None,
    ) -> results.ProgressReported:
        """Add a note (kept for good) to your claimed task and renew its lease: every few minutes, or the lease lapses
        and the task is requeued. kind decision: data {decision, rationale, alternatives}, read by later mission
        tasks. blocker: data {requires_human: true} holds approval for a person."""
        return await work.report_progress(
            core,
            identity.actor(ctx),
            task_id,
            message=message,
            progress=progress,
            kind=kind,
            run_id=run_id,
            data=data,
            telemetry=telemetry,
        )

    @tool(mcp, RETRY_SAFE)
    async def jct_complete_task(
        task_id: TaskId,
        success: Annotated[bool, Field(description="false: you could not.")],
        summary: Annotated[str, text("What was done.", Limits.SUMMARY)],
        ctx: Context,
        outputs: Annotated[str | dict[str, Any] | None, Field(description="A JSON object.")] = None,
        error_message: Annotated[str | None, text("Why it failed.", Limits.MESSAGE)] = None,
        criteria_results: Annotated[
            list[CriterionReport] | None, Field(json_schema_extra={"maxItems": Limits.CRITERIA})
        ] = None,
        telemetry: Annotated[
            dict[str, Any] | None, Field(description="tokens_input, tokens_output, cost_usd, duration_seconds.")
        ] = None,
        run_id: ClaimedRun = None,
    ) -> results.Completion:
        """Finish your claimed task's run, for good (a retry returns the recorded outcome, duplicate: true). Runs the
        prover (verdict pass/partial/fail) and the review policy; a criterion counts as satisfied only with an
        artifact of this run cited in criteria_results."""
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

    @tool(mcp, WRITE)
    async def jct_release_task(
        task_id: TaskId,
        reason: Reason,
        ctx: Context,
        run_id: ClaimedRun = None,
    ) -> results.Released:
        """Give your claim back, no penalty: the task is requeued (claim it again to undo). Tried and failed? Use
        jct_complete_task(success=false)."""
        return await work.release_task(core, identity.actor(ctx), task_id, reason, run_id=run_id)


async def unless_hung_up(work: Callable[[], Awaitable[None]]) -> None:
    """Run `work`, cancelled if the client hangs up before the call is answered (HUNG_UP): a waiting claim of a
    legacy HTTP session whose client is gone would otherwise wait out its time and claim for nobody (a claim
    committed as it is cancelled is released: server/core/claims/queue.py). An error of `work` comes out as
    itself."""
    hung_up = HUNG_UP.get()
    if hung_up is None:
        await work()
        return
    with hung_up.cancelled_by_it():
        await work()
