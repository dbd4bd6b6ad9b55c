"""Where a mission stands (DESIGN section 11): progress, phases, blockers, what is claimable next, decisions."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from server.core import results as r
from server.core import views
from server.core.missions import budget, outcomes
from server.core.missions.graph import mission_not_found
from server.core.models import check_text, parse_enum, parse_id, parse_moment
from server.core.service import Core, check_limit, encode_cursor, time_id_after
from server.db import missions as q
from server.db import outcomes as outcome_rows
from server.db.records import FlaggedRun, Mission, MissionTaskRow, Phase
from server.errors import invalid
from server.vocab import TASK_ENDED_UNAPPROVED, EventKind, MissionStatus, PhaseStatus, ReviewState, TaskStatus

DECISIONS_SHOWN = 20
CLAIMABLE_SHOWN = 20
MILESTONES_SHOWN = 20
AGENT_CHARS = 256  # an actor_id, as jct_search_audit bounds it
INCLUDES = frozenset({"tasks", "milestones"})


async def get_mission(
    core: Core,
    mission_id: str,
    *,
    include: Sequence[str] | None = None,
    phase: int | None = None,
    since: str | None = None,
    agent: str | None = None,
) -> r.MissionView:
    """The mission's page. `include=["tasks"]` adds every task (of `phase` only, if given), `"milestones"` the
    newest milestones reported; `since` (ISO time) keeps only the decisions and milestones after it, `agent`
    (an actor_id) only those its runs recorded."""
    mission_id = parse_id(mission_id, "mission_id")
    wanted = set(include or ())
    if wanted - INCLUDES:
        raise invalid(f"include {sorted(wanted - INCLUDES)} is not known.", "include may name: tasks, milestones.")
    after = parse_moment(since, "since")
    if agent is not None:
        check_text(agent, "agent", AGENT_CHARS, single_line=True)
    async with core.db.read() as conn:
        mission = await q.get_mission(conn, mission_id)
        if mission is None:
            raise mission_not_found(mission_id)
        phases = await q.phases_of(conn, mission_id)
        tasks = await q.tasks_of(conn, mission_id, 10_000)
        deps = await q.dependencies_of(conn, [task.id for task in tasks])
        decisions = await q.decisions_of(conn, mission_id, DECISIONS_SHOWN, after, agent)
        noted = (
            await q.decisions_of(conn, mission_id, MILESTONES_SHOWN, after, agent, EventKind.MILESTONE)
            if "milestones" in wanted
            else None
        )
        milestones = await q.events_of(conn, mission_id, [EventKind.MILESTONE])
        humans = await q.human_blocked_runs(conn, mission_id)
        tally = await q.review_tally(conn, mission_id)
        sums = await outcome_rows.spent_of(conn, mission_id)
        depends: dict[str, list[str]] = {}
        for task_id, depends_on in deps:
            depends.setdefault(task_id, []).append(depends_on)
        shown = [_task(task, depends) for task in tasks]
        held = budget.is_spent(mission)
        blockers = _blockers(shown, humans)
        if held and mission.status == MissionStatus.ACTIVE:
            blockers.append(_budget_blocker(mission, shown))
        ended = outcomes.outcome_of(mission, shown, humans, held)
        spent = views.spent(sums)
        outcome = (
            await outcomes.describe(conn, ended, mission, tasks, blockers, spent, sums.last_ended) if ended else None
        )
    if phase is not None and not any(p.index == phase for p in phases):
        raise invalid(f"Mission {mission_id} has no phase {phase}.", f"Phases run 0..{len(phases) - 1}.")
    return r.MissionView(
        mission=budget.detail(mission),
        progress=_progress(mission, shown, milestones, tally),
        phases=_phases(phases, shown),
        blockers=blockers,
        claimable=[] if held else [task for task in shown if task.status == TaskStatus.QUEUED][:CLAIMABLE_SHOWN],
        decisions=[r.DecisionView.model_validate(d) for d in decisions],
        tasks=[task for task in shown if phase is None or task.phase == phase] if "tasks" in wanted else None,
        spent=spent,
        outcome=outcome,
        milestones=[r.MilestoneView.model_validate(row) for row in noted] if noted is not None else None,
    )


def _budget_blocker(mission: Mission, tasks: Sequence[r.MissionTask]) -> r.Blocker:
    waiting = sum(task.status == TaskStatus.QUEUED for task in tasks)
    return r.Blocker(
        kind="budget_spent",
        reason=f"its budget is spent ({budget.spent_text(mission)}): {waiting} queued task(s) are not handed out",
        action=budget.raise_hint(mission.id),
    )


def _task(task: MissionTaskRow, depends: Mapping[str, list[str]]) -> r.MissionTask:
    return r.MissionTask.model_validate(
        {**task.columns(), "approved": task.approved_at is not None, "depends_on": depends.get(task.id, [])}
    )


def _progress(
    mission: Mission, tasks: Sequence[r.MissionTask], milestones: Sequence[Any], tally: Sequence[tuple[str, str, int]]
) -> r.MissionProgress:
    approved = sum(task.approved for task in tasks)
    end = mission.completed_at or datetime.now(UTC)
    verdicts: Counter[str] = Counter()
    rounds = 0
    for verdict, state, n in tally:
        verdicts[str(verdict)] += n
        if state == ReviewState.NEEDS_CHANGES:
            rounds += n
    return r.MissionProgress(
        total=len(tasks),
        approved=approved,
        percent_done=round(100 * approved / len(tasks)) if tasks else 100,
        tasks_by_status=dict(Counter(str(task.status) for task in tasks)),
        milestones=len(milestones),
        review_rounds=rounds,
        verdicts=dict(verdicts),
        elapsed_seconds=max(0.0, (end - mission.created_at).total_seconds()),
    )


def _phases(phases: Sequence[Phase], tasks: Sequence[r.MissionTask]) -> list[r.PhaseView]:
    views = []
    open_seen = False
    for phase in phases:
        mine = [task for task in tasks if task.phase == phase.index]
        approved = sum(task.approved for task in mine)
        if approved == len(mine):
            status = PhaseStatus.DONE
        elif not open_seen:
            status, open_seen = PhaseStatus.ACTIVE, True
        else:
            status = PhaseStatus.PENDING
        views.append(r.PhaseView(index=phase.index, name=phase.name, status=status, total=len(mine), approved=approved))
    return views


def _blockers(tasks: Sequence[r.MissionTask], humans: Sequence[FlaggedRun]) -> list[r.Blocker]:
    """What keeps the mission from finishing by itself, each with the action that lifts it."""
    by_id = {task.task_id: task for task in tasks}
    blockers = []
    for task in tasks:
        if task.status in TASK_ENDED_UNAPPROVED and not task.approved:
            blockers.append(
                r.Blocker(
                    task_id=task.task_id,
                    kind="failed" if task.status == TaskStatus.FAILED else "cancelled",
                    reason=f"the task {task.status}: {' '.join(task.objective.split())[:80]}",
                    action=(
                        "Requeue it with feedback (an admin: jct requeue TASK_ID); if it ran out of review rounds "
                        "(quality_gate_exhausted), an admin may approve its last work instead (jct_submit_review "
                        "with override_reason); or cancel the mission."
                    ),
                )
            )
        elif task.status == TaskStatus.BLOCKED:
            ended = [d for d in task.depends_on if d in by_id and by_id[d].status in TASK_ENDED_UNAPPROVED]
            if ended:
                blockers.append(
                    r.Blocker(
                        task_id=task.task_id,
                        kind="dependency_failed",
                        reason=f"it waits for {', '.join(ended)}, which ended {by_id[ended[0]].status}",
                        action="Requeue the dependency (an admin) or cancel the mission.",
                    )
                )
    answer = "A person reviews the run (jct_submit_review, or the dashboard) and answers the blocker."
    for run in humans:
        reason = f"run {run.id} reported a blocker only a person can lift"
        blockers.append(r.Blocker(task_id=run.task_id, kind="human", reason=reason, action=answer))
    return blockers


# --- listing --------------------------------------------------------------------------------


async def list_missions(
    core: Core, *, status: str = "active", limit: int = 10, cursor: str | None = None
) -> r.MissionList:
    statuses = [s.value for s in MissionStatus] if status == "all" else [parse_enum(MissionStatus, status, "status")]
    check_limit(limit)
    after = time_id_after(cursor)
    async with core.db.read() as conn:
        rows = await q.list_missions(conn, statuses, after, limit + 1)
        page = rows[:limit]
        totals = await q.task_totals(conn, [row.id for row in page])
    next_cursor = None
    if len(rows) > limit:
        next_cursor = encode_cursor(page[-1].created_at.isoformat(), page[-1].id)
    summaries = []
    for row in page:
        total = totals.get(row.id, 0)
        summaries.append(
            r.MissionSummary.model_validate(
                {
                    **row.columns(),
                    "total": total,
                    "approved": total - row.remaining,
                    "budget_spent": budget.is_spent(row),
                }
            )
        )
    return r.MissionList(missions=summaries, count=len(page), next_cursor=next_cursor)
