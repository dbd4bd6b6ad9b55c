"""The operator's commands (DESIGN section 14): cancel, requeue, priority, agents, stuck, audit. Each is one
call into server/core (the same operation the MCP tool and the dashboard use)."""

from __future__ import annotations

import typer

from server.cli import render
from server.cli.common import run_core
from server.cli.options import limit_option
from server.cli.render import console
from server.core.claims import cancel
from server.core.operators import actions


def cancel_command(
    task_id: str = typer.Argument(..., help="The task to cancel."),
    reason: str = typer.Option(..., help="Why; kept in the audit log."),
) -> None:
    """Cancel a queued, blocked or running task (its agent's next call fails). Cannot be undone."""
    result = run_core(lambda core, actor: cancel.cancel_task(core, actor, task_id, reason))
    console.print(f"cancelled task {result.task_id}" + (f" and its run {result.run_id}" if result.run_id else ""))


def requeue(
    task_id: str = typer.Argument(..., help="A failed, cancelled or rejected task."),
    reason: str = typer.Option(..., help="Why; kept in the audit log."),
    feedback: str | None = typer.Option(None, help="What the next agent should do differently (in its briefing)."),
) -> None:
    """Put a failed, cancelled or rejected task back on the queue, attempts reset."""
    result = run_core(lambda core, actor: actions.requeue_task(core, actor, task_id, reason, feedback))
    version = f", briefing v{result.context_packet_version}" if result.context_packet_version else ""
    console.print(f"requeued task {result.task_id}: {result.task_status}{version}")


def priority(
    task_id: str = typer.Argument(..., help="A queued, blocked or running task."),
    level: str = typer.Argument(..., metavar="P0..P4", help="P0 is claimed first."),
) -> None:
    """Change a task's priority."""
    result = run_core(lambda core, actor: actions.set_priority(core, actor, task_id, level.upper()))
    console.print(f"task {result.task_id}: priority {result.previous} -> {result.priority}")


def agents(within: int = typer.Option(3600, help="Agents with a run in the last this many seconds.")) -> None:
    """Agents: the claims each holds with lease ends, when last seen, runs done and failed."""
    console.print(render.agents(run_core(lambda core, _actor: actions.list_agents(core, active_within_seconds=within))))


def stuck(limit: int = limit_option(50, 200)) -> None:
    """Work that needs a person, each with its reason and the action to take."""
    console.print(render.stuck(run_core(lambda core, _actor: actions.list_stuck(core, limit=limit))))


def audit(
    actor: str | None = typer.Option(None, help="Only this actor's rows."),
    action: str | None = typer.Option(None, help="Only this action, e.g. task.cancelled."),
    kind: str | None = typer.Option(
        None, help="Only this entity kind: Task, Issue, Run, Artifact, EvidencePack, Mission."
    ),
    since: str | None = typer.Option(None, help="From this ISO 8601 time."),
    until: str | None = typer.Option(None, help="Before this ISO 8601 time."),
    limit: int = limit_option(50, 200),
    cursor: str | None = typer.Option(None, help="The next page: the cursor the previous page printed."),
) -> None:
    """Search the audit log, newest first."""
    page = run_core(
        lambda core, _actor: actions.search_audit(
            core, actor_id=actor, action=action, entity_kind=kind, since=since, until=until, limit=limit, cursor=cursor
        )
    )
    console.print(render.audit(page))
    if page.next_cursor:
        console.print(f"next page: --cursor {page.next_cursor}")
