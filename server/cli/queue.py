"""Working the queue by hand: enqueue, list, show, statistics, pending reviews, and deciding one."""

from __future__ import annotations

import json
from typing import Any, assert_never

import typer

from server.cli import render
from server.cli.common import fail, run_core
from server.cli.options import limit_option, status_option
from server.cli.render import console
from server.core.briefings import intake, revise
from server.core.claims import queue
from server.core.models import parse_id
from server.core.operators import observe
from server.core.review import reviews as review
from server.errors import JctError

STATUSES = ("blocked", "queued", "running", "completed", "failed", "cancelled", "all")
DECISIONS = {
    "approve": "approved",
    "approved": "approved",
    "reject": "rejected",
    "rejected": "rejected",
    "needs-changes": "needs_changes",
    "needs_changes": "needs_changes",
}


def enqueue(
    objective: str = typer.Argument(..., help="What the agent should achieve."),
    operation: str = typer.Option(..., help="code_change, docs, analysis or ops."),
    repo: str = typer.Option(..., help="Target repository, e.g. myorg/api."),
    ref: str = typer.Option("main", help="Branch or commit."),
    path: str = typer.Option("", help="Limit the work to this path in the repository."),
    priority: str = typer.Option("P2", help="P0 (first) .. P4."),
    budget: int = typer.Option(3600, help="Time budget in seconds (30..86400)."),
    criterion: list[str] = typer.Option([], help="An acceptance criterion (repeatable)."),
    summary: str | None = typer.Option(None, help="Context summary for the agent's briefing."),
    key: str | None = typer.Option(None, help="Idempotency key: enqueueing the same key twice is one task."),
    doctrine: list[str] = typer.Option([], help="Doctrine to follow, NAMESPACE/NAME (repeatable)."),
    prior_art: list[str] = typer.Option([], "--prior-art", help="Earlier work the agent should know of (repeatable)."),
    data: str | None = typer.Option(None, help="Structured facts for the briefing: a JSON object."),
    touches: list[str] = typer.Option(
        [], help="A path glob the task edits (repeatable; default: --path): no two overlapping tasks run at once."
    ),
) -> None:
    """Put a task on the queue."""
    facts = _json_object(data, "--data")
    result = run_core(
        lambda core, actor: intake.enqueue_task(
            core,
            actor,
            objective=objective,
            operation=operation,
            target_repo=repo,
            target_ref=ref,
            target_path=path,
            time_budget_seconds=budget,
            priority=priority,
            acceptance_criteria=criterion or None,
            context_summary=summary,
            idempotency_key=key,
            doctrine_refs=doctrine or None,
            prior_art=prior_art or None,
            data=facts,
            touches=touches or None,
        )
    )
    note = " (duplicate: this key was enqueued before)" if result.duplicate else ""
    console.print(f"enqueued task {result.task_id} status={result.status} issue={result.cwom_issue_id}{note}")


def tasks(status: str = status_option("queued", STATUSES), limit: int = limit_option()) -> None:
    """List tasks, highest priority first."""
    page = run_core(lambda core, _actor: queue.list_tasks(core, status=status, limit=limit))
    console.print(render.tasks(page, status))
    if page.next_cursor:
        console.print(f"(more than {limit}; pass --limit to see more)")


def show(entity_id: str = typer.Argument(..., metavar="ID", help="A task, run or evidence pack id.")) -> None:
    """Show a task, a run or an evidence pack, whichever the id names."""
    try:
        canonical = parse_id(entity_id, "ID")
    except JctError as exc:
        fail(exc.message)
    found = run_core(lambda core, _actor: observe.find(core, canonical))
    match found:
        case ("task", task):
            console.print(render.task(task))
        case ("run", run):
            console.print(render.run(run))
        case ("evidence", pack):
            console.print(render.evidence(pack))
        case _:
            assert_never(found)


def stats() -> None:
    """Queue statistics: tasks by status, expired leases, the oldest queued task, pending reviews."""
    console.print(render.stats(run_core(lambda core, _actor: queue.queue_stats(core))))


def reviews(limit: int = limit_option()) -> None:
    """Evidence packs awaiting a review decision, oldest first."""
    console.print(render.reviews(run_core(lambda core, _actor: review.list_pending_reviews(core, limit=limit))))


def review_command(
    evidence_pack_id: str = typer.Argument(..., help="From `jct reviews`."),
    decision: str = typer.Argument(..., metavar="approve|reject|needs-changes"),
    reason: str = typer.Option(..., help="Why; the agent reads this when changes are needed."),
    override: str | None = typer.Option(
        None, help="Approve past a quality gate (a person's gate, or rounds run out): why, for the audit log."
    ),
) -> None:
    """Decide an evidence pack: approve, reject, or send the task back with needs-changes."""
    choice = DECISIONS.get(decision.lower())
    if choice is None:
        fail(f"decision {decision!r} is not one of: approve, reject, needs-changes", 2)
    result = run_core(
        lambda core, actor: review.submit_review(
            core, actor, evidence_pack_id, choice, reason, reviewer_name=actor.actor_id, override_reason=override
        )
    )
    console.print(
        f"review {result.review_id}: {result.decision}; task {result.task_status}, run {result.run_status}"
        + (f", issue {result.issue_status}" if result.issue_status else "")
        + (f", briefing v{result.context_packet_version}" if result.context_packet_version else "")
    )


def _json_object(text: str | None, option: str) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"{option} is not JSON: {exc.msg}", 2)
    if not isinstance(value, dict):
        fail(f"{option} must be a JSON object", 2)
    return value


def brief(
    task_id: str = typer.Argument(..., help="The task whose briefing to revise."),
    summary: str | None = typer.Option(None, help="A new context summary."),
    prior_art: list[str] = typer.Option([], "--prior-art", help="Prior art, replacing the list (repeatable)."),
    file_of_interest: list[str] = typer.Option([], "--file", help="Files of interest, replacing them (repeatable)."),
    criterion: list[str] = typer.Option([], help="Acceptance criteria, replacing the list (repeatable)."),
    data: str | None = typer.Option(None, help="Structured facts, replacing them: a JSON object."),
) -> None:
    """Revise a task's briefing without a review round: a new context packet version (admin or its enqueuer)."""
    facts = _json_object(data, "--data")
    packet = run_core(
        lambda core, actor: revise.revise_briefing(
            core,
            actor,
            task_id,
            summary=summary,
            prior_art=prior_art or None,
            files_of_interest=file_of_interest or None,
            acceptance_criteria=criterion or None,
            data=facts,
        )
    )
    console.print(f"briefing of task {task_id} is now version {packet.version}")
