"""A task's place in its mission's graph (DESIGN section 11): its phase, what it waits for, its blockers.

The rule itself is in server/core/missions/plan.py; this is the part enqueueing a task into a running mission needs
(server/core/briefings/intake.py), without the rest of missions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from server.core.audit import AuditAction, audit_row
from server.core.models import Actor, Limits, parse_id
from server.core.service import Core
from server.db import missions as q
from server.db.records import Task
from server.errors import ErrorCode, JctError, invalid, not_found
from server.vocab import EntityKind, MissionStatus, TaskStatus


def mission_not_found(mission_id: str) -> JctError:
    return not_found(ErrorCode.MISSION_NOT_FOUND, "Mission", mission_id, "Use jct_list_missions to find one.")


async def place(
    core: Core,
    conn: AsyncConnection,
    task: dict[str, Any],
    mission_id: str,
    phase: int | None,
    depends_on: Sequence[str],
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Make a task being enqueued (jct_enqueue_task with mission_id) one of the mission's: its phase (default:
    the last; one past the last starts a new one), its dependencies (tasks of this mission, of its phase or an
    earlier one), and its blockers, read under the mission's row lock, which every approval of its tasks takes
    before it unblocks anything (server/db/missions.py). A phase that was done is re-opened: the later tasks
    that have not started wait for it again. Returns the dependency pairs to store once the task row exists,
    and the (id, trace id) of the tasks that were queued and are blocked again."""
    mission = await q.get_mission(conn, mission_id, lock=True)
    if mission is None:
        raise mission_not_found(mission_id)
    if mission.status != MissionStatus.ACTIVE:
        raise invalid(f"Mission {mission_id} is {mission.status}.", "Add tasks only to an active mission.")
    phases = await q.phases_of(conn, mission_id, lock=True)
    index = len(phases) - 1 if phase is None else phase
    if not 0 <= index <= len(phases):
        raise invalid(
            f"phase {phase} is outside 0..{len(phases)} for this mission.",
            "Use an existing phase, or the next one to start it.",
        )
    if index == len(phases):
        await q.add_phase(conn, mission_id, index, f"Phase {index + 1}")
    waits = await q.dependencies_in(conn, mission_id, list(depends_on))
    foreign = sorted(set(depends_on) - {row.id for row in waits})
    if foreign:
        raise invalid(
            f"depends_on names task(s) that are not tasks of mission {mission_id}: {', '.join(foreign)}.",
            "Depend only on tasks of the same mission.",
        )
    later = [row.id for row in waits if row.phase > index]
    if later:
        raise invalid(f"depends_on names task(s) of a later phase: {', '.join(later)}.", "It could never start.")
    unapproved = sum(row.approved_at is None for row in waits)
    earlier_done = all(phase.remaining == 0 for phase in phases[:index])
    start(task, mission_id, index, unapproved=unapproved, earlier_phases_done=earlier_done)
    reblocked = await q.reopen(conn, mission_id, index) if index < len(phases) - 1 else []
    await q.count_in(conn, mission_id, index)
    return [(task["id"], dep) for dep in depends_on], reblocked


def start(
    task: dict[str, Any], mission_id: str, phase: int, *, unapproved: int, earlier_phases_done: bool
) -> TaskStatus:
    """A task's place and starting blockers: its dependencies not yet approved, and whether it waits for the
    phases before its own; with either, it starts `blocked` (the rule: server/core/missions/plan.py). Its
    status."""
    waits_for_phase = phase > 0 and not earlier_phases_done
    status = TaskStatus.BLOCKED if unapproved or waits_for_phase else TaskStatus.QUEUED
    task.update(mission_id=mission_id, phase=phase, blockers=unapproved, waits_for_phase=waits_for_phase, status=status)
    return status


def reblocked_audit(actor: Actor, task_id: str, reblocked: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """The audit rows of the queued tasks a task joining an earlier phase blocked again."""
    after = {"status": TaskStatus.BLOCKED, "reason": f"task {task_id} joined an earlier phase"}
    before = {"status": TaskStatus.QUEUED}
    return [
        audit_row(actor, AuditAction.TASK_BLOCKED, EntityKind.TASK, blocked_id, before, after, trace_id)
        for blocked_id, trace_id in reblocked
    ]


def check_placement(mission_id: str | None, phase: int | None, depends_on: Sequence[str] | None) -> list[str]:
    """The mission parameters of jct_enqueue_task, checked: the dependency ids, canonical."""
    if mission_id is None:
        if phase is not None or depends_on:
            raise invalid("phase and depends_on need a mission_id.", "Pass the mission_id the task belongs to.")
        return []
    parse_id(mission_id, "mission_id")
    if phase is not None and not isinstance(phase, int):
        raise invalid("phase must be a whole number.", "Pass the phase index (0, 1, ...).")
    deps = list(depends_on or [])
    if len(deps) > Limits.DEPENDENCIES:
        raise invalid(f"{len(deps)} dependencies; the limit is {Limits.DEPENDENCIES}.", "Use phases instead.")
    return list(dict.fromkeys(parse_id(dep, f"depends_on[{n}]") for n, dep in enumerate(deps)))


async def store_dependencies(conn: AsyncConnection, pairs: Sequence[tuple[str, str]]) -> None:
    for task_id in {task for task, _ in pairs}:
        await q.insert_dependencies(conn, task_id, [dep for task, dep in pairs if task == task_id])


async def blocked(conn: AsyncConnection, task: Task) -> JctError:
    """TASK_BLOCKED for a claim of a task that still waits, naming what it waits for."""
    waiting = await q.waiting_for(conn, task.id)
    parts = [f"{row['id']} ({row['status']}: {' '.join(str(row['objective']).split())[:60]})" for row in waiting[:10]]
    if len(waiting) > 10:
        parts.append(f"and {len(waiting) - 10} more")
    if not waiting:
        parts.append(f"the tasks of the phases before {task.phase} of mission {task.mission_id} to be approved")
    return JctError(
        ErrorCode.TASK_BLOCKED,
        f"Task {task.id} is blocked: it waits for " + "; ".join(parts) + ".",
        "Claim another task (jct_claim_next never returns a blocked one); it becomes claimable once those are "
        "approved.",
    )
