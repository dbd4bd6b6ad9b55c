"""The mission page (jct://missions/{id}): what is claimable next and what is stuck first, then the phases,
the decisions so far, and every task."""

from __future__ import annotations

from server.core import results
from server.markdown import block, duration, fit, headline, line, stamp, task_uri
from server.resources.render import page_text

GOAL_CHARS = 1_200
TASKS_CHARS = 4_000
DECISIONS_CHARS = 2_000
SUMMARY_CHARS = 1_500
FILES_CHARS = 2_000


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
        f"Spent {cost(view.spent)}{_budget(mission)}.",
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
    if view.outcome is not None:
        lines += ["", *_outcome(view.outcome, mission.summary, pointer)]
    lines += ["", "## Blockers"]
    lines += [f"{_held_back(b, 160)}. Next: {line(b.action, 160)}" for b in view.blockers] or ["None."]
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


def cost(spent: results.Spent) -> str:
    """`$1.25, 48,000 tokens, 12m of agent time`: what runs reported."""
    return f"${spent.cost_usd:.2f}, {int(spent.tokens):,} tokens, {duration(spent.duration_seconds)} of agent time"


def _budget(mission: results.MissionDetail) -> str:
    limits = [f"${mission.max_cost_usd:.2f}" if mission.max_cost_usd is not None else ""]
    limits.append(f"{mission.max_tokens:,} tokens" if mission.max_tokens is not None else "")
    shown = " and ".join(limit for limit in limits if limit)
    if not shown:
        return ""
    return f" of a budget of {shown}" + (" (**spent**: its tasks are not handed out)" if mission.budget_spent else "")


def _outcome(outcome: results.MissionOutcome, summary: str | None, pointer: str) -> list[str]:
    lines = [
        "## Outcome",
        f"**{outcome.outcome}** after {duration(outcome.duration_seconds)}; cost {cost(outcome.spent)}.",
    ]
    if summary:
        lines += block(summary, SUMMARY_CHARS, pointer)
    lines += ["", "### Achieved"]
    lines += [
        f"- {task_uri(a.task_id)}: {headline(a.objective, 90)}" + (f": {line(a.summary, 300)}" if a.summary else "")
        for a in outcome.achieved
    ] or ["Nothing approved."]
    lines += ["", "### Limitations"]
    lines += [_held_back(x, 300) for x in outcome.limitations] or ["None."]
    lines += ["", "### Files changed (verified from git)"]
    files = [f"- `{line(f.path, 200)}` ({f.status}, +{f.added} -{f.removed})" for f in outcome.files_changed]
    if outcome.files_truncated:
        files.append("- and more (the list was cut)")
    lines += fit(files, FILES_CHARS, pointer) if files else ["None JCT could read (no verifiable repository)."]
    return lines


def _task(task: results.MissionTask) -> str:
    waits = f" · waits for {', '.join(task.depends_on)}" if task.depends_on and not task.approved else ""
    approved = " · approved" if task.approved else ""
    return f"**{task.status}**{approved} · {headline(task.objective, 90)} ({task_uri(task.task_id)}){waits}"


def _held_back(what: results.Blocker | results.TaskLimitation, reason_chars: int) -> str:
    """A list item for what holds back a task (or, with no task, the whole mission), and why."""
    where = task_uri(what.task_id) if what.task_id else "the mission"
    return f"- {where} ({what.kind}): {line(what.reason, reason_chars)}"
