"""The issue briefing: everything an agent reads before it starts work, objective and acceptance criteria first.

Each section has a character budget (a typical briefing stays well under 8,000); whatever is cut names the
tool that has the rest.
"""

from __future__ import annotations

from collections.abc import Sequence

from server import uris
from server.core import results
from server.core.operators.pages import IssueBrief, RunLine
from server.markdown import (
    block,
    bullets,
    code,
    compact_json,
    duration,
    fit,
    headline,
    line,
    plain,
    run_uri,
    stamp,
    task_uri,
    who,
)
from server.resources.render import OBJECTIVE_CHARS, page_text, run_entry, runs_text, target_text, task_next

CRITERIA_CHARS = 1_500
CRITERION_CHARS = 400
SUMMARY_CHARS = 1_200
LIST_CHARS = 600
DATA_CHARS = 300
DOCTRINE_CHARS = 4_000
DOCTRINE_BODY_CHARS = 1_500
FEEDBACK_CHARS = 1_500
FEEDBACK_REASON_CHARS = 500
TASKS_CHARS = 900


def _criteria(criteria: Sequence[str], pointer: str) -> list[str]:
    if not criteria:
        return ["None were given: agree what done means from the objective, and say what you checked."]
    numbered = [f"{i}. {line(c, CRITERION_CHARS, pointer)}" for i, c in enumerate(criteria)]
    return fit(numbered, CRITERIA_CHARS, pointer)


def _context(packet: results.ContextPacket | None, pointer: str) -> list[str]:
    if packet is None:
        return ["No context packet."]
    lines = (
        block(packet.summary, SUMMARY_CHARS, pointer) if plain(packet.summary).strip() else ["No summary was given."]
    )
    if packet.prior_art:
        lines += ["", "Prior art:", *fit(bullets(packet.prior_art), LIST_CHARS, pointer)]
    if packet.files_of_interest:
        lines += ["", "Files of interest:", *fit(bullets(packet.files_of_interest), LIST_CHARS, pointer)]
    if packet.data:
        lines += ["", "Data: " + compact_json(packet.data, DATA_CHARS, pointer)]
    return lines


def _constraints(constraints: results.Constraints | None, task: results.TaskDetail | None) -> list[str]:
    lines = []
    if task is not None:
        lines.append(f"- Target: {target_text(task.target)} ({task.operation})")
    if constraints is not None:
        lines += [
            f"- Time budget: {duration(constraints.time_budget_seconds)}",
            f"- Network: {'allowed' if constraints.allow_network else 'not allowed'}; "
            f"secrets: {'allowed' if constraints.allow_secrets else 'not allowed'}",
        ]
        if constraints.allowed_paths:
            lines.append("- Change only: " + ", ".join(code(p) for p in constraints.allowed_paths[:20]))
    return lines or ["None recorded."]


def _doctrine(doctrine: Sequence[results.DoctrineRef], pointer: str) -> list[str]:
    """Each entry's text, in full up to its budget; the cut names the entry's own page."""
    entries = []
    for d in doctrine:
        ref = f"{d.namespace}/{d.name}"
        uri = uris.doctrine(ref)
        text = "\n".join(block(d.body, DOCTRINE_BODY_CHARS, f"read {uri}"))
        entries.append(f"**{line(ref, 130)}** ({uri}):\n{text}\n")
    return fit(entries, DOCTRINE_CHARS, pointer)


def _reviewer(feedback: results.ReviewFeedback, runs: Sequence[RunLine]) -> str:
    if feedback.reviewer_name is not None:
        return who({"actor_id": feedback.reviewer, "name": feedback.reviewer_name})
    # Recorded before the principal was: `reviewer` is the name the reviewer chose, and the principal is
    # on the review decision of the run, when that run is among those shown.
    decided = next((run.review for run in runs if run.run_id == feedback.run_id and run.review), None)
    return who({"actor_id": decided.reviewer.get("actor_id") if decided else "", "name": feedback.reviewer})


def _feedback(feedback: Sequence[results.ReviewFeedback], runs: Sequence[RunLine], pointer: str) -> list[str]:
    entries = [
        f"{n}. **{f.decision}** by {_reviewer(f, runs)}, {stamp(f.at)}"
        + (f", on {run_uri(f.run_id)}" if f.run_id else "")
        + f" (verdict {f.verdict}):\n"
        + "\n".join(f"   {q}".rstrip() for q in block(f.reason, FEEDBACK_REASON_CHARS, pointer))
        for n, f in enumerate(feedback, 1)
    ]
    # The newest feedback matters most: when the budget runs out, the oldest rounds go first.
    return fit(entries, FEEDBACK_CHARS, pointer, keep="last")


def _issue_next(brief: IssueBrief) -> str:
    if not brief.tasks:
        return "No task carries this issue; enqueue one with jct_enqueue_task."
    task = brief.tasks[0]
    runs = [run for run in brief.runs if run.task_id == task.task_id]
    return task_next(task, runs, in_briefing=True) + (
        " Work loop: claim → do the work → jct_report_artifact (a diff as code_patch, test output as log) → "
        "jct_complete_task with criteria_results citing artifact ids."
        if task.status == "queued"
        else ""
    )


def issue_briefing(brief: IssueBrief) -> str:
    issue = brief.issue
    latest = brief.tasks[0] if brief.tasks else None
    pointer = (
        f'call jct_get_context(task_id="{latest.task_id}")' if latest is not None else "call jct_get_context(task_id)"
    )
    objective = latest.objective if latest is not None else issue.title
    criteria = brief.packet.acceptance_criteria if brief.packet is not None else issue.acceptance_criteria
    version = f" (briefing v{brief.packet.version})" if brief.packet is not None else ""
    lines = [
        f"# Issue: {headline(issue.title)}",
        "",
        f"**{issue.status}** · {issue.priority} · {issue.type} · issue `{issue.id}`"
        + (f" · task {task_uri(latest.task_id)}" if latest is not None else ""),
        "",
        "## Objective",
        *block(objective, OBJECTIVE_CHARS, pointer),
        "",
        f"## Acceptance criteria ({len(criteria)}; cite them by index in jct_complete_task criteria_results)",
        *_criteria(criteria, pointer),
        "",
        f"## Context{version}",
        *_context(brief.packet, pointer),
        "",
        "## Constraints",
        *_constraints(brief.constraints, latest),
    ]
    if brief.doctrine:
        lines += ["", "## Doctrine (standing guidance: follow it)", *_doctrine(brief.doctrine, pointer)]
    if brief.feedback:
        lines += [
            "",
            f"## Review feedback ({brief.review_round or 'from an operator'}; oldest first: address every point)",
            *_feedback(brief.feedback, brief.runs, pointer),
        ]
    task_lines: list[str] = []
    for task in brief.tasks:
        task_lines.append(
            f"- **{task.status}** {task.priority} · "
            f"{runs_text([run for run in brief.runs if run.task_id == task.task_id])} · "
            f"expired leases {task.attempts}/{task.max_attempts} · "
            f"{headline(task.objective, 80)} — {task_uri(task.task_id)}"
        )
        task_lines += [f"  {run_entry(run)}" for run in brief.runs if run.task_id == task.task_id]
    lines += [
        "",
        "## Tasks and runs",
        *(fit(task_lines, TASKS_CHARS, "read the task pages") if task_lines else ["No task yet."]),
        "",
        "## Next",
        _issue_next(brief),
    ]
    return page_text(lines, pointer)
