"""Completing a claimed task: the prover's evidence, the review policy, and a retry that changes nothing."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from server.core import leases, prover, results, review, views
from server.core.models import Actor, Limits, check_text, parse_id
from server.core.service import Core
from server.core.text import parse_json, storable
from server.core.work import fenced_change, task_row
from server.db import changes, queries
from server.db.leases import Fence
from server.errors import ErrorCode, JctError, invalid
from server.vocab import ArtifactType

TELEMETRY_NUMBERS = ("tokens_input", "tokens_output", "cost_usd", "duration_seconds")
# Artifact types whose inline content the prover reads (diffs for scope, logs for test results).
PROVED_CONTENT = (ArtifactType.CODE_PATCH, ArtifactType.LOG)


async def complete_task(
    core: Core,
    actor: Actor,
    task_id: str,
    *,
    success: bool,
    summary: str,
    outputs: str | dict[str, Any] | None = None,
    error_message: str | None = None,
    criteria_results: list[dict[str, Any]] | None = None,
    telemetry: dict[str, Any] | None = None,
    run_id: str | None = None,
) -> results.Completion:
    task_id = parse_id(task_id, "task_id")
    fence = leases.fence_for(core, actor, task_id, run_id)
    check_text(summary, "summary", Limits.SUMMARY)
    if error_message is not None:
        check_text(error_message, "error_message", Limits.MESSAGE, required=False)
    parsed_outputs = _parse_outputs(outputs)
    checked_telemetry = _check_telemetry(telemetry)
    if criteria_results is not None and not isinstance(criteria_results, list):
        raise invalid("criteria_results must be a list.", "Send a list of {criterion, status, evidence, note}.")

    ts = core.now()

    def decide(facts: changes.Facts) -> tuple[list[changes.Write], results.Completion]:
        task, run = facts.task, facts.run
        criteria = facts.acceptance_criteria
        evidence = prover.prove(
            prover.ProverInput(
                operation=task["operation"],
                success=success,
                target_path=task["target_path"],
                time_budget_seconds=task["time_budget_seconds"],
                duration_seconds=(datetime.now(UTC) - run["started_at"]).total_seconds(),
                acceptance_criteria=criteria,
                claims=prover.resolve_claims(criteria, criteria_results or []),
                artifacts=tuple(_prover_artifact(core, a) for a in facts.artifacts),
            )
        )
        return review.settle_completion(
            core,
            actor,
            task=task,
            run=run,
            evidence=evidence,
            success=success,
            summary=summary,
            outputs=parsed_outputs,
            error_message=error_message,
            telemetry=checked_telemetry,
            ts=ts,
        )

    try:
        changed = await fenced_change(core, fence, decide, completion=True)
    except changes.RowMissed:
        raise JctError(
            ErrorCode.TASK_NOT_CLAIMED,
            f"Task {task_id} ended while completing (it was cancelled or expired); nothing was recorded.",
            "Use jct_get_task to see where the task stands.",
        ) from None
    if changed is not None:
        return changed.result
    # The fence refused: a retry of a recorded completion gets that outcome; anything else is an error.
    async with core.db.read() as conn:
        recorded = await _recorded_outcome(core, conn, fence)
        if recorded is not None:
            return recorded
        raise await leases.refusal(core, conn, fence)


def _prover_artifact(core: Core, row: Mapping[str, Any]) -> prover.ProverArtifact:
    """Called off the event loop: it reads stored content."""
    content = None
    if row["stored"] and row["type"] in PROVED_CONTENT:
        content, _total, _more = core.store.read_text(row["uri"], 0, core.settings.max_artifact_bytes)
    return prover.ProverArtifact(id=row["id"], type=row["type"], title=row["title"], content=content)


async def _recorded_outcome(core: Core, conn: AsyncConnection, fence: Fence) -> results.Completion | None:
    """A retried completion: the caller's run already has its evidence, so report that, change nothing."""
    mine = await leases.claimant_run(core, conn, fence)
    if mine is None:
        return None
    pack = await queries.evidence_pack_for_run(conn, mine["id"])
    if pack is None:
        return None
    task_id = fence.task_id
    task = await task_row(conn, task_id)
    decision = await queries.review_decision_for_pack(conn, pack["id"])
    return results.Completion(
        task_id=task_id,
        task_status=task["status"],
        run_id=mine["id"],
        run_status=mine["status"],
        evidence_pack=views.evidence_summary(pack),
        review=review.outcome_of(pack, decision),
        duplicate=True,
    )


def _parse_outputs(outputs: str | dict[str, Any] | None) -> Any:
    if outputs is None:
        return None
    if isinstance(outputs, dict):
        storable(outputs, "outputs")
        text = json.dumps(outputs)
    else:
        text = outputs
    if len(text) > Limits.OUTPUTS:
        raise invalid(
            f"outputs is {len(text)} characters; the limit is {Limits.OUTPUTS}.", "Report large data as an artifact."
        )
    parsed = outputs if isinstance(outputs, dict) else parse_json(outputs, "outputs")
    if not isinstance(parsed, dict):
        raise invalid("outputs is not a JSON object.", 'Send an object, e.g. {"pr_url": "https://..."}.')
    return parsed


def _check_telemetry(telemetry: dict[str, Any] | None) -> dict[str, Any] | None:
    if telemetry is None:
        return None
    if not isinstance(telemetry, dict):
        raise invalid("telemetry must be an object.", 'Send e.g. {"tokens_input": 1200, "cost_usd": 0.02}.')
    storable(telemetry, "telemetry")
    for key in TELEMETRY_NUMBERS:
        value = telemetry.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
            raise invalid(f"telemetry.{key} must be a non-negative number.", f"Send {key} as a number, or omit it.")
    if len(json.dumps(telemetry)) > 16_000:
        raise invalid("telemetry is larger than 16,000 characters.", "Keep telemetry to a few numbers.")
    return telemetry
