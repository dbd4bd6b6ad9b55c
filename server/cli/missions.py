"""Missions by hand: plan one from a file, list them, and see where one stands."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich import box
from rich.console import Group
from rich.markup import escape
from rich.table import Table

from server.cli.common import fail, run_core
from server.cli.options import limit_option, status_option
from server.cli.render import console, fields
from server.core import results
from server.core.missions import budget
from server.core.missions import plan as missions
from server.core.missions import status as mission_status
from server.core.models import parse_id
from server.errors import JctError

MISSION_STATUSES = ("active", "completed", "cancelled", "all")


def plan(
    file: str = typer.Argument(..., help="A JSON file (- for standard input): {title, goal, phases: [{name, tasks}]}."),
    key: str | None = typer.Option(None, help="Idempotency key: planning the same key twice is one mission."),
) -> None:
    """Create a mission from a file: phases of tasks with dependencies, as jct_create_mission takes them."""
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text()
        spec = json.loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read {file}: {exc}", 2)
    except json.JSONDecodeError as exc:
        fail(f"{file} is not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}", 2)
    if not isinstance(spec, dict) or set(spec) - {"title", "goal", "phases", "max_cost_usd", "max_tokens"}:
        fail(f"{file} must be one object with title, goal and phases (and max_cost_usd, max_tokens)", 2)
    created = run_core(
        lambda core, actor: missions.create_mission(
            core,
            actor,
            title=spec.get("title", ""),
            goal=spec.get("goal", ""),
            phases=spec.get("phases"),
            idempotency_key=key,
            max_cost_usd=spec.get("max_cost_usd"),
            max_tokens=spec.get("max_tokens"),
        )
    )
    note = " (duplicate: this key was planned before)" if created.duplicate else ""
    console.print(f"mission {created.mission_id} created with {len(created.tasks)} task(s){note}")
    for task in created.tasks:
        console.print(f"  {task.key or '-':<20} {task.task_id}  phase {task.phase}  {task.status}")


def missions_command(status: str = status_option("active", MISSION_STATUSES), limit: int = limit_option()) -> None:
    """List missions, newest first, with their progress."""
    page = run_core(lambda core, _actor: mission_status.list_missions(core, status=status, limit=limit))
    table = Table(title=f"{page.count} mission(s), status {status}", box=box.SIMPLE_HEAD)
    table.add_column("mission_id", no_wrap=True, min_width=36)
    table.add_column("status", no_wrap=True)
    table.add_column("approved", no_wrap=True, justify="right")
    table.add_column("title", overflow="fold", ratio=1)
    for m in page.missions:
        table.add_row(m.mission_id, m.status, f"{m.approved}/{m.total}", escape(m.title))
    console.print(table)


def mission(mission_id: str = typer.Argument(..., metavar="ID", help="A mission id, from `jct missions`.")) -> None:
    """Show where a mission stands: progress, phases, blockers, what is claimable, decisions, tasks."""
    try:
        canonical = parse_id(mission_id, "ID")
    except JctError as exc:
        fail(exc.message)
    view = run_core(lambda core, _actor: mission_status.get_mission(core, canonical, include=["tasks"]))
    console.print(_mission(view))


def mission_budget(
    mission_id: str = typer.Argument(..., metavar="ID", help="A mission id, from `jct missions`."),
    max_cost_usd: float | None = typer.Option(None, help="The most its runs may report spending, in US dollars."),
    max_tokens: int | None = typer.Option(None, help="The most tokens (input + output) its runs may report."),
    clear: bool = typer.Option(False, "--clear", help="Remove the budget (then give no limit)."),
) -> None:
    """Set, raise or remove a mission's budget. Once its runs have spent it, its tasks are not handed out: raising
    it lets them go again (claims waiting for work are woken)."""
    if clear and (max_cost_usd is not None or max_tokens is not None):
        fail("--clear removes the budget: give it alone, or give the new limits without it", 2)
    try:
        canonical = parse_id(mission_id, "ID")
    except JctError as exc:
        fail(exc.message)
    m = run_core(
        lambda core, actor: budget.set_budget(
            core, actor, canonical, max_cost_usd=max_cost_usd, max_tokens=max_tokens, clear=clear
        )
    )
    limits = ", ".join(
        text
        for text in (
            f"max_cost_usd ${m.max_cost_usd:.2f}" if m.max_cost_usd is not None else "",
            f"max_tokens {m.max_tokens}" if m.max_tokens is not None else "",
        )
        if text
    )
    state = "spent: its tasks wait" if m.budget_spent else "not spent: its tasks may be claimed"
    console.print(f"mission {m.mission_id}: budget {limits or 'none'} ({state})")


def mission_summary(
    mission_id: str = typer.Argument(..., metavar="ID", help="A mission id, from `jct missions`."),
    summary: str = typer.Argument(..., help="What the mission achieved and left (- for standard input)."),
) -> None:
    """Write a mission's closing summary (its planner's account of the outcome), shown on its page."""
    try:
        canonical = parse_id(mission_id, "ID")
    except JctError as exc:
        fail(exc.message)
    text = sys.stdin.read() if summary == "-" else summary
    m = run_core(lambda core, actor: budget.set_summary(core, actor, canonical, text))
    console.print(f"mission {m.mission_id}: closing summary recorded")


def _mission(view: results.MissionView) -> Group:
    m, progress = view.mission, view.progress
    summary = fields(
        f"mission {m.mission_id}",
        {
            "title": escape(m.title),
            "status": m.status,
            "goal": escape(m.goal),
            "progress": f"{progress.approved}/{progress.total} approved ({progress.percent_done}%)",
            "milestones": progress.milestones,
            "review rounds": progress.review_rounds,
            "spent": f"${view.spent.cost_usd:.2f}, {int(view.spent.tokens):,} tokens",
            "budget": _budget(m),
            "outcome": view.outcome.outcome if view.outcome else None,
            "created": m.created_at,
            "completed": m.completed_at,
        },
    )
    phases = Table("#", "phase", "status", "approved", title="phases", box=box.SIMPLE_HEAD)
    for phase in view.phases:
        phases.add_row(str(phase.index), escape(phase.name), phase.status, f"{phase.approved}/{phase.total}")
    tasks = Table("task_id", "phase", "status", "objective", title="tasks", box=box.SIMPLE_HEAD)
    for task in view.tasks or []:
        status = f"{task.status} (approved)" if task.approved else task.status
        tasks.add_row(task.task_id, str(task.phase), status, escape(task.objective.splitlines()[0][:80]))
    parts: list[Table] = [summary, phases, tasks]
    if view.blockers:
        blockers = Table("task_id", "kind", "reason", "next", title="blockers", box=box.SIMPLE_HEAD)
        for b in view.blockers:
            blockers.add_row(b.task_id or "-", b.kind, escape(b.reason), escape(b.action))
        parts.append(blockers)
    if view.outcome is not None:
        parts.append(_outcome(view.outcome, m.summary))
    if view.decisions:
        decisions = Table("when", "decision", "task_id", title="decisions, newest first", box=box.SIMPLE_HEAD)
        for d in view.decisions:
            decisions.add_row(d.at.strftime("%Y-%m-%d %H:%M"), escape(d.decision), d.task_id)
        parts.append(decisions)
    return Group(*parts)


def _budget(m: results.MissionDetail) -> str | None:
    limits = [
        f"${m.max_cost_usd:.2f}" if m.max_cost_usd is not None else "",
        f"{m.max_tokens:,} tokens" if m.max_tokens is not None else "",
    ]
    shown = " and ".join(limit for limit in limits if limit)
    return f"{shown}{' (spent: its tasks wait)' if m.budget_spent else ''}" if shown else None


def _outcome(outcome: results.MissionOutcome, summary: str | None) -> Table:
    table = Table("task_id", "what", "detail", title=f"outcome: {outcome.outcome}", box=box.SIMPLE_HEAD)
    if summary:
        table.add_row("-", "summary", escape(summary))
    for a in outcome.achieved:
        table.add_row(a.task_id, "achieved", escape(a.summary or a.objective))
    for x in outcome.limitations:
        table.add_row(x.task_id or "-", x.kind, escape(x.reason))
    for f in outcome.files_changed:
        table.add_row(", ".join(f.tasks), "file", escape(f"{f.path} ({f.status}, +{f.added} -{f.removed})"))
    return table
