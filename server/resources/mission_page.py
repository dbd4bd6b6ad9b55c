"""The mission page (jct://missions/{id}): what is claimable next and what is stuck first, then the phases,
the decisions so far, and every task."""

from __future__ import annotations

from server.core import results
from server.markdown import block, duration, fit, headline, line, stamp, task_uri
from server.resources.render import page_text

GOAL_CHARS = 1_200
TASKS_CHARS = 4_000
DECISIONS_CHARS = 2_000


def mission_page(view: results.MissionView) -> str:
    mission, progress = view.mission, view.progress
    pointer = f'call jct_get_mission(mission_id="{mission.mission_id}")'
    lines = [
        f"# Mission: {headline(mission.title)}",
        "",
        f"**{mission.status}** · {progress.approved}/{progress.total} tasks approved ({progress.percent_done}%) · "
        f"{progress.milestones} milestones · {progress.review_rounds} review rounds · "
        f"running for {duration(progress.elapsed_seconds)}",
        f"Created {stamp(mission.created_at)} by {line(mission.created_by, 64)}; mission id `{mission.mission_id}`.",
        "",
        "## Goal",
        *block(mission.goal, GOAL_CHARS, pointer),
        "",
        "## Claimable next",
    ]
    lines += [f"- {_task(task)}" for task in view.claimable] or [
        "Nothing: every open task waits for an approval, a person, or a requeue (see Blockers)."
        if mission.status == "active"
        else f"Nothing: the mission is {mission.status}."
    ]
    lines += ["", "## Blockers"]
    lines += [
        f"- {task_uri(b.task_id)} ({b.kind}): {line(b.reason, 160)}. Next: {line(b.action, 160)}" for b in view.blockers
    ] or ["None."]
    lines += ["", "## Phases"]
    lines += [
        f"{phase.index}. **{line(phase.name, 80)}**: {phase.status}, {phase.approved}/{phase.total} approved"
        for phase in view.phases
    ]
    lines += ["", "## Decisions so far, newest first"]
    decisions = [
        f"- {line(d.decision, 200)} ({stamp(d.at)}, {task_uri(d.task_id)})"
        + (f": {line(d.rationale, 300)}" if d.rationale else "")
        for d in view.decisions
    ]
    lines += fit(decisions, DECISIONS_CHARS, pointer) if decisions else ["None recorded."]
    lines += ["", "## Tasks"]
    tasks = [f"- phase {task.phase} · {_task(task)}" for task in view.tasks or []]
    lines += fit(tasks, TASKS_CHARS, f"{pointer} with include=['tasks']")
    lines += [
        "",
        "## Next",
        "Claim a claimable task with jct_claim_task (or jct_claim_next); record decisions with "
        'jct_report_progress(kind="decision") so later tasks read them.',
    ]
    return page_text(lines, pointer)


def _task(task: results.MissionTask) -> str:
    waits = f" · waits for {', '.join(task.depends_on)}" if task.depends_on and not task.approved else ""
    approved = " · approved" if task.approved else ""
    return f"**{task.status}**{approved} · {headline(task.objective, 90)} ({task_uri(task.task_id)}){waits}"
