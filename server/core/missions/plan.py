"""Missions (DESIGN section 11): a goal split into phases of tasks that may depend on each other.

The rule, in one place: a task of a mission is claimable (`queued`) only once every task it depends on was
approved and every task of the phase before its own was approved; until then it is `blocked`, and it becomes
`queued` in the same transaction that approves the last of them (server/db/missions.py keeps the blockers).
A task added to a phase that was done re-opens it: the later tasks that have not started wait for it again.
A mission is completed when every one of its tasks was approved. Cycles, unknown keys, a dependency on a later
phase or on another mission's task, an empty phase and an oversized mission are refused before anything is
stored.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from server.core import results as r
from server.core.audit import AuditAction, audit_row
from server.core.briefings import doctrine, intake
from server.core.missions import budget, dag, graph
from server.core.models import Actor, Limits, check_text, new_id
from server.core.service import Core
from server.db import changes, queries
from server.db import missions as q
from server.db.records import Mission
from server.errors import ErrorCode, JctError, invalid
from server.vocab import EntityKind, MissionStatus, TaskStatus

_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
TASK_FIELDS = frozenset(
    {
        "key",
        "objective",
        "operation",
        "target_repo",
        "target_ref",
        "target_path",
        "priority",
        "time_budget_seconds",
        "acceptance_criteria",
        "context_summary",
        "depends_on",
        "doctrine",
        "prior_art",
        "data",
        "touches",
    }
)


@dataclass(frozen=True)
class Planned:
    key: str
    phase: int
    request: intake.Gated  # the task, through the policy gate
    depends_on: tuple[str, ...]  # keys


def plan(core: Core, phases: object) -> tuple[list[str], list[Planned]]:
    """The mission's tasks, each through the policy gate, in phase order; refuses a graph that could never
    finish (a cycle, a dependency on a later phase) and anything malformed, naming what is wrong."""
    if not isinstance(phases, list) or not phases:
        raise invalid("phases must be a non-empty list of {name, tasks}.", "Give at least one phase with tasks.")
    if len(phases) > Limits.PHASES:
        raise invalid(f"{len(phases)} phases; the limit is {Limits.PHASES}.", "Merge phases.")
    planned: list[Planned] = []
    names: list[str] = []
    phase_of: dict[str, int] = {}
    for index, phase in enumerate(phases):
        where = f"phases[{index}]"
        if not isinstance(phase, Mapping) or set(phase) - {"name", "tasks"}:
            raise invalid(f"{where} must be an object with name and tasks.", "Send {name, tasks: [...]}.")
        names.append(check_text(phase.get("name"), f"{where}.name", Limits.TITLE, single_line=True).strip())
        tasks = phase.get("tasks")
        if not isinstance(tasks, list) or not tasks:
            raise invalid(f"{where} ({phase.get('name')!r}) has no tasks.", "Every phase needs at least one task.")
        for number, task in enumerate(tasks):
            planned.append(_planned(core, task, f"{where}.tasks[{number}]", index, phase_of))
            if len(planned) > Limits.MISSION_TASKS:
                raise invalid(
                    f"The mission has more than {Limits.MISSION_TASKS} tasks.", "Split the goal into several missions."
                )
    for task in planned:
        unknown = [key for key in task.depends_on if key not in phase_of]
        if unknown:
            raise invalid(
                f"Task {task.key!r} depends on unknown key(s): {', '.join(unknown)}.",
                "depends_on names the keys of tasks of this mission.",
            )
        later = [key for key in task.depends_on if phase_of[key] > task.phase]
        if later:
            raise invalid(
                f"Task {task.key!r} (phase {task.phase}) depends on {', '.join(later)} of a later phase: it could "
                "never start.",
                "Depend only on tasks of the same or an earlier phase.",
            )
    cycle = dag.cycle({task.key: task.depends_on for task in planned})
    if cycle:
        raise invalid(f"depends_on has a cycle: {' -> '.join(cycle)}.", "Remove one dependency of the cycle.")
    return names, planned


def _planned(core: Core, task: object, where: str, phase: int, phase_of: dict[str, int]) -> Planned:
    if not isinstance(task, Mapping):
        raise invalid(f"{where} must be an object.", "Send each task as {key, objective, operation, ...}.")
    unknown = sorted(set(task) - TASK_FIELDS)
    if unknown:
        raise invalid(f"{where} has unknown field(s): {', '.join(unknown)}.", f"Use: {', '.join(sorted(TASK_FIELDS))}.")
    key = task.get("key")
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise invalid(f"{where}.key {key!r} is not a key.", "Use letters, digits, '.', '_' or '-', up to 64.")
    if key in phase_of:
        raise invalid(f"Key {key!r} is used twice.", "Give every task of the mission its own key.")
    phase_of[key] = phase
    depends_on = task.get("depends_on") or []
    if not isinstance(depends_on, list) or not all(isinstance(d, str) for d in depends_on):
        raise invalid(f"{where}.depends_on must be a list of keys.", "Name the keys of tasks this one waits for.")
    if len(depends_on) > Limits.DEPENDENCIES:
        raise invalid(f"{where} depends on {len(depends_on)} tasks; the limit is {Limits.DEPENDENCIES}.", "Use phases.")
    if key in depends_on:
        raise invalid(f"Task {key!r} depends on itself.", "Remove it from its own depends_on.")
    request = intake.gate(
        core,
        objective=task.get("objective"),
        operation=task.get("operation"),
        target_repo=task.get("target_repo"),
        target_ref=task.get("target_ref", "main"),
        target_path=task.get("target_path", ""),
        time_budget_seconds=task.get("time_budget_seconds", 3600),
        priority=task.get("priority", "P2"),
        acceptance_criteria=task.get("acceptance_criteria") or [],
        context_summary=task.get("context_summary") or "",
        create_cwom=True,
        doctrine=task.get("doctrine"),
        prior_art=task.get("prior_art"),
        data=task.get("data"),
        touches=task.get("touches"),
    )
    return Planned(key, phase, request, tuple(dict.fromkeys(depends_on)))


# --- create ------------------------------------------------------------------------------------


async def create_mission(
    core: Core,
    actor: Actor,
    *,
    title: str,
    goal: str,
    phases: object,
    idempotency_key: str | None = None,
    workflow: dict[str, Any] | None = None,
    steps: Mapping[str, dict[str, Any]] | None = None,
    max_cost_usd: Any = None,
    max_tokens: Any = None,
) -> r.MissionCreated:
    """The whole graph in one transaction: its tasks (blocked or queued), their issues and briefings, the
    dependencies, the phases and the mission. `steps` (a workflow's) gives each task key its step record,
    kept on the task and in its briefing's data."""
    title = check_text(title, "title", Limits.TITLE, single_line=True).strip()
    goal = check_text(goal, "goal", Limits.OBJECTIVE).strip()
    if idempotency_key is not None:
        check_text(idempotency_key, "idempotency_key", Limits.IDEMPOTENCY_KEY, single_line=True)
    cost, tokens = budget.check_budget(max_cost_usd, max_tokens)
    names, planned = plan(core, phases)
    graph = [[p.key, p.phase, p.request.hashed(), list(p.depends_on)] for p in planned]
    request: dict[str, Any] = {
        "title": title,
        "goal": goal,
        "phases": names,
        "workflow": workflow,
        "tasks": graph,
        "steps": steps,
    }
    if cost is not None or tokens is not None:
        request["budget"] = [cost, tokens]
    request_hash = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()

    mission_id = new_id()
    ids = {task.key: new_id() for task in planned}
    bundles = [_task_rows(core, actor, task, mission_id, ids[task.key], steps) for task in planned]
    now = datetime.now(UTC)
    mission = {
        "id": mission_id,
        "title": title,
        "goal": goal,
        "status": MissionStatus.ACTIVE,
        "created_by": actor.actor_id,
        "workflow": workflow,
        "remaining": len(planned),
        "idempotency_key": idempotency_key,
        "idempotency_scope": actor.claimant if idempotency_key is not None else None,
        "request_hash": request_hash,
        "created_at": now,
        "max_cost_usd": cost,
        "max_tokens": tokens,
    }
    phase_rows = [
        {"mission_id": mission_id, "index": index, "name": name, "remaining": sum(p.phase == index for p in planned)}
        for index, name in enumerate(names)
    ]
    dependencies = [(ids[task.key], ids[dep]) for task in planned for dep in task.depends_on]
    created = {"status": MissionStatus.ACTIVE, "tasks": len(planned), "phases": len(names)}
    audit = [audit_row(actor, AuditAction.MISSION_CREATED, EntityKind.MISSION, mission_id, None, created, None)]

    async with core.db.write() as conn:
        if idempotency_key is not None:
            existing = await q.mission_by_idempotency_key(conn, actor.claimant, idempotency_key)
            if existing is not None:
                return await _duplicate(conn, existing, request_hash)
        await queries.insert_task_bundles(conn, bundles)
        await doctrine.link(
            conn,
            [(b.issue["id"], p.request.doctrine) for p, b in zip(planned, bundles, strict=True) if b.issue],
        )
        if not await q.insert_mission(conn, mission, phase_rows, dependencies):
            assert idempotency_key is not None
            winner = await q.mission_by_idempotency_key(conn, actor.claimant, idempotency_key)
            assert winner is not None
            raise _retry_duplicate(winner)
        await queries.insert_audit(conn, audit)
    return r.MissionCreated(
        mission_id=mission_id,
        status=MissionStatus.ACTIVE,
        tasks=[
            r.MissionTaskCreated(key=task.key, task_id=ids[task.key], phase=task.phase, status=bundle.task["status"])
            for task, bundle in zip(planned, bundles, strict=True)
        ],
    )


def _task_rows(
    core: Core,
    actor: Actor,
    task: Planned,
    mission_id: str,
    task_id: str,
    steps: Mapping[str, dict[str, Any]] | None,
) -> queries.TaskBundle:
    rows = intake.bundle(core, actor, task.request, None, None, task_id=task_id)
    # A new mission: nothing is approved yet, and no phase is done.
    status = graph.start(rows.task, mission_id, task.phase, unapproved=len(task.depends_on), earlier_phases_done=False)
    if steps is not None:
        rows.task["step"] = steps[task.key]
        if rows.packet is not None:
            rows.packet["data"] = {"step": steps[task.key]}
    rows.audit[0]["after"] = {**rows.audit[0]["after"], "status": status, "mission_id": mission_id}
    return rows


async def _duplicate(conn: AsyncConnection, existing: Mission, request_hash: str) -> r.MissionCreated:
    if existing.request_hash != request_hash:
        raise JctError(
            ErrorCode.IDEMPOTENCY_CONFLICT,
            f"idempotency_key was already used for mission {existing.id} with a different payload.",
            "Use a new idempotency_key for a different mission, or resend the original payload unchanged.",
        )
    tasks = await q.tasks_of(conn, existing.id, Limits.MISSION_TASKS)
    return r.MissionCreated(
        mission_id=existing.id,
        status=existing.status,
        tasks=[r.MissionTaskCreated(key=None, task_id=t.id, phase=t.phase, status=t.status) for t in tasks],
        duplicate=True,
    )


def _retry_duplicate(winner: Mission) -> JctError:
    return JctError(
        ErrorCode.IDEMPOTENCY_CONFLICT,
        f"Mission {winner.id} was created with this idempotency_key at the same moment.",
        "Call again with the same payload to get it, or with a new key for another mission.",
    )


# --- approval ----------------------------------------------------------------------------------


def approval(actor: Actor, task_id: str) -> changes.Approve:
    """The one way an approval unblocks what waits for the task (its dependents, its mission's next phase) and
    completes its mission, audited as `actor`'s: a write of the approving transaction. A completion the review
    policy approved hands it to its fenced change (server/db/changes/ makes it after the other writes); a
    reviewer's decision makes it at once (`approve`)."""
    return changes.Approve(task_id, partial(_approval_audit, actor))


async def approve(conn: AsyncConnection, actor: Actor, task_id: str) -> None:
    """A reviewer approved the task's work: its approval, made in the review's transaction."""
    write = approval(actor, task_id)
    made = await q.approve(conn, write.task_id, datetime.now(UTC))
    await queries.insert_audit(conn, write.audit(made))


def _approval_audit(actor: Actor, made: q.Approval) -> list[dict[str, Any]]:
    """The audit rows of what an approval unblocked (and completed), by the actor who approved."""
    unblocked = {"status": TaskStatus.QUEUED, "reason": "its dependencies were approved"}
    before = {"status": TaskStatus.BLOCKED}
    rows = [
        audit_row(actor, AuditAction.TASK_UNBLOCKED, EntityKind.TASK, task_id, before, unblocked, trace_id)
        for task_id, trace_id in made.unblocked
    ]
    if made.mission_completed and made.mission_id is not None:
        done = {"status": MissionStatus.COMPLETED}
        rows.append(
            audit_row(actor, AuditAction.MISSION_COMPLETED, EntityKind.MISSION, made.mission_id, None, done, None)
        )
    return rows
