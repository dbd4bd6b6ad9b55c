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
    if not isinstance(spec, dict) or set(spec) - {"title", "goal", "phases"}:
        fail(f"{file} must be one object with title, goal and phases", 2)
    created = run_core(
        lambda core, actor: missions.create_mission(
            core,
            actor,
            title=spec.get("title", ""),
            goal=spec.get("goal", ""),
            phases=spec.get("phases"),
            idempotency_key=key,
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
            blockers.add_row(b.task_id, b.kind, escape(b.reason), escape(b.action))
        parts.append(blockers)
    if view.decisions:
        decisions = Table("when", "decision", "task_id", title="decisions, newest first", box=box.SIMPLE_HEAD)
        for d in view.decisions:
            decisions.add_row(d.at.strftime("%Y-%m-%d %H:%M"), escape(d.decision), d.task_id)
        parts.append(decisions)
    return Group(*parts)
