"""The prompts' words: pure functions from live state to the message a slash command puts in front of a model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from server.core import results
from server.core.models import Limits
from server.core.operators.pages import PackState
from server.markdown import artifact_cut_note, artifact_uri, block, clip, fenced, headline, line, stamp, who
from server.vocab import Operation, Priority

QUEUE_SHOWN = 10
REVIEWS_SHOWN = 10
REQUEST_CHARS = 8_000
TEXT_CHARS = 1_500
# The diffs a review prompt embeds, all together.
DIFF_CHARS = 8_000


def _minutes(seconds: int) -> str:
    return f"{seconds // 60} minutes" if seconds >= 120 else f"{seconds} seconds"


# --- work_next -------------------------------------------------------------------------------


def _queue_lines(
    stats: results.QueueStats,
    page: results.TaskList,
    operation: str | None,
    steps: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[str]:
    counts = ", ".join(f"{count} {status}" for status, count in stats.counts.items())
    lines = [f"Tasks: {counts}. Pending reviews: {stats.pending_reviews}. Expired leases: {stats.expired_leases}."]
    which = f"queued {operation} tasks" if operation else "queued tasks"
    if not page.tasks:
        lines.append(f"There are no {which} right now: jct_claim_next will return claimed: false.")
        return lines
    lines.append(f"Top {which}, in the order jct_claim_next takes them:")
    for number, task in enumerate(page.tasks, 1):
        step = (steps or {}).get(task.task_id)
        lines.append(
            f"{number}. {task.priority} {task.operation} · {line(task.target_repo, 60)} — {headline(task.objective)} "
            f"(task_id {task.task_id})" + (f" · {_step_line(step)}" if step else "")
        )
    if page.next_cursor is not None:
        lines.append("…and more: jct_list_tasks pages through the rest, or read jct://queue.")
    return lines


def _step_line(step: Mapping[str, Any]) -> str:
    outputs = ", ".join(f"{line(o['name'], 40)} ({o['type']})" for o in step.get("outputs", []) if o.get("required"))
    gate = {"agent": "another agent approves", "human": "a person approves"}.get(step.get("review", ""), "")
    parts = [f"workflow {line(step['workflow'], 40)}, step {line(step['step'], 40)}"]
    parts += [f"outputs: {outputs}"] if outputs else []
    parts += [gate] if gate else []
    return "; ".join(parts)


def work_next(
    stats: results.QueueStats,
    page: results.TaskList,
    operation: str | None,
    lease_seconds: int,
    steps: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    claim = f'jct_claim_next(operation="{operation}")' if operation else "jct_claim_next()"
    return "\n".join(
        [
            "Work through the JCT queue, one task at a time, with this loop. Start now.",
            "",
            f"1. Claim: call {claim}. If it returns claimed: false, the queue is empty for you: stop and say so.",
            "2. Read the briefing the claim returns before touching code: objective; acceptance_criteria "
            "(numbered from 0); context_packet (summary, files_of_interest, prior_art, and review_feedback from "
            "earlier attempts: address every point of it); constraints (time budget, allowed paths, network). "
            "jct_get_context(task_id) re-reads it; the resource jct://issues/<issue_id> renders it as Markdown.",
            "3. Work in the target repository with your own tools. Change only what the objective needs, inside "
            f"the allowed paths. Your claim is a lease of {_minutes(lease_seconds)}: any call on the task renews "
            "it, so call jct_report_progress(task_id, message, progress) every few minutes of long work. If a "
            "call fails with LEASE_EXPIRED, stop: the task went back to the queue.",
            "4. Report each output with jct_report_artifact: the diff as code_patch (a unified diff, media_type "
            "text/x-diff), test output as log, documentation as doc, findings as report. Keep each artifact_id. "
            "When the claim carried base_commit, JCT reads the repository itself: commit your work on that commit "
            "(push it to the repository, or commit it in a local working tree) and report it with "
            "artifact_type='commit', content='<commit id or branch>'; JCT checks it and reads the files it changed.",
            "5. Complete with jct_complete_task(task_id, success=true, summary, criteria_results=[{criterion: "
            '<index>, status: "satisfied" | "unsatisfied", evidence: [<artifact ids>], note}]). A criterion '
            "counts as satisfied only when it cites an artifact of this run. If you tried and could not do it: "
            "success=false with error_message. If you should not do it at all: jct_release_task(task_id, reason).",
            "6. Note the verdict (pass, partial or fail) and the review status it returns (needs_changes: the task "
            "went back to the queue with what to fix in its briefing's review_feedback), then go back to step 1.",
            "",
            "A task that is a workflow step carries it in context_packet.data.step (workflow, step, outputs, "
            "review gate): report each of its outputs as an artifact titled exactly with the output's name and of "
            "its type (json: content that is JSON matching its schema), or the prover fails the run; "
            "jct_get_context lists in dependency_artifacts what the steps before it delivered: read those first.",
            "",
            "Rules: hold one claim at a time; only report on tasks you claimed; every JCT error carries a "
            "suggestion: follow it. When the queue is empty, summarise what you completed (task ids, verdicts).",
            "",
            "## The queue now",
            *_queue_lines(stats, page, operation, steps),
        ]
    )


# --- review ------------------------------------------------------------------------------------

JUDGING = [
    "How to judge an evidence pack:",
    "1. Verdict: the prover's mechanical result. pass = every check passed and every acceptance criterion is "
    "satisfied with cited evidence; partial = something is unverified (a criterion without evidence, no test "
    "log); fail = a check failed or the run failed. verdict_reason says which.",
    "2. Checks: required evidence for the operation, tests (a log whose runner summary shows failures fails "
    "it), scope (files changed outside the allowed paths), time budget, and for a workflow step outputs (each "
    "declared output reported, a json one matching its schema). A failed check needs a reason to approve.",
    "3. Criteria: for each acceptance criterion, open the cited artifacts and decide yourself whether they "
    "show it. A cited artifact that does not show the criterion is not evidence.",
    "4. Read the diff: the code_patch artifact (jct_get_artifact(artifact_id), or the jct://artifacts/<id> "
    "resource); when the run has a base_commit, the change JCT read in the repository instead (jct_git_diff(run_id) "
    "or jct://runs/<run_id>/diff). Does it do what the objective says, and nothing else? Is it correct, tested, safe?",
    "5. Decide with jct_submit_review(evidence_pack_id, decision, reason): approved (the objective is met and "
    "the change is sound); needs_changes (fixable: the task is requeued and your reason lands in the next "
    "attempt's briefing, so say exactly what to change and how to show it); rejected (wrong approach or "
    "should not be done: the task fails). Give a reason a worker can act on. A workflow step's gate may say who "
    "approves (agent: not its executor; human: a person), and each needs_changes spends one of its review "
    "rounds: the last one fails the task (quality_gate_exhausted), which an admin may override "
    "(override_reason).",
]


def review_pending(page: results.PendingReviews, total: int) -> str:
    lines = [*JUDGING, "", f"## Awaiting review: {total}"]
    if not page.reviews:
        lines.append("Nothing awaits a decision. Stop here.")
    else:
        lines.append(
            "Review them oldest first. For each, read its evidence (jct://evidence/<id>) and the diff, "
            "then submit your decision."
        )
    for number, item in enumerate(page.reviews, 1):
        lines.append(
            f"{number}. verdict {item.verdict} — {headline(item.objective)} — by {who(item.executor)}, "
            f"{stamp(item.created_at)} (evidence_pack_id {item.evidence_pack_id}, run_id {item.run_id}): "
            f"{line(item.verdict_reason, 200)}"
        )
    if page.next_cursor is not None:
        lines.append("…and more: jct_list_pending_reviews pages through the rest.")
    return "\n".join(lines)


def review_pack(state: PackState) -> str:
    pack = state.pack
    pointer = f'call jct_get_evidence(run_id="{pack.run_id}")'
    if pack.review_state == "pending":
        status = "pending: it is yours to decide."
    elif state.decision is not None:
        status = f"already decided: {state.decision} ({line(state.decision_reason, 200)}). Nothing to submit."
    else:
        status = f"{pack.review_state}: nothing to submit."
    lines = [
        *JUDGING,
        "",
        f"## Evidence pack {pack.id}",
        f"Review state: {status}",
        f"Task {pack.task_id}, run {pack.run_id} by {who(state.executor)}.",
        "",
        "Objective:",
        *block(state.objective, TEXT_CHARS, f'call jct_get_task(task_id="{pack.task_id}")'),
    ]
    if state.run_summary:
        lines += ["", "The agent's summary:", *block(state.run_summary, TEXT_CHARS, pointer)]
    reason = line(pack.verdict_reason, 600, pointer)
    verdict = reason if reason.startswith(f"{pack.verdict}:") else f"{pack.verdict}: {reason}"
    lines += ["", f"Verdict {verdict}", "", "Checks:"]
    marks = {True: "passed", False: "FAILED", None: "n/a"}
    checks = [f"- {marks[c.passed]} · {line(c.name, 60)}: {line(c.detail, 300)}" for c in pack.checks[:30]]
    lines += checks or ["- none"]
    lines += ["", "Acceptance criteria:"]
    for c in pack.criteria_results[:50]:
        cited = line(", ".join(c.evidence[:5]), 300) or "nothing cited"
        note = f" (note: {line(c.note, 200)})" if c.note else ""
        lines.append(f"- {c.status} · {line(c.criterion, 300)} — evidence: {cited}{note}")
    if not pack.criteria_results:
        lines.append("- the task had none")
    if pack.evidence_missing:
        lines += ["", "Missing evidence:", *[f"- {line(m, 200)}" for m in pack.evidence_missing[:20]]]
    lines += ["", "Artifacts of the run (read the code_patch first):"]
    for a in state.artifacts[:30]:
        size = f"{a.size_bytes} bytes" if a.size_bytes is not None else f"remote {line(a.uri, 200)}"
        lines.append(
            f"- {line(a.title, 80)} ({a.type}, {line(a.media_type, 60)}, {size}): jct_get_artifact(artifact_id="
            f'"{a.artifact_id}") or {artifact_uri(a.artifact_id)}'
        )
    if not state.artifacts:
        lines.append("- none were reported")
    for diff in state.diffs:
        lines += [
            "",
            f"The diff, {line(diff.artifact.title, 80)} ({diff.artifact.artifact_id}):",
            *fenced(diff.text.rstrip(), "diff"),
        ]
        if diff.total_chars > len(diff.text):
            lines.append(artifact_cut_note(diff.artifact.artifact_id, len(diff.text), diff.total_chars))
    if pack.review_state == "pending":
        lines += [
            "",
            f'Then decide: jct_submit_review(evidence_pack_id="{pack.id}", decision, reason).',
        ]
    return "\n".join(lines)


# --- enqueue -----------------------------------------------------------------------------------

OPERATIONS = {
    Operation.CODE_CHANGE: "a change to code; the worker must report a code_patch (unified diff) or commit",
    Operation.DOCS: "documentation; a doc or code_patch artifact",
    Operation.ANALYSIS: "an investigation or answer; a report artifact",
    Operation.OPS: "an operational action; a log or report artifact",
}
PRIORITIES = {
    Priority.P0: "drop everything",
    Priority.P1: "next",
    Priority.P2: "normal (default)",
    Priority.P3: "when there is time",
    Priority.P4: "someday",
}


def enqueue(request: str, allowed_prefixes: Sequence[str], queued: results.TaskList) -> str:
    repos = _allowed(" It must start with", allowed_prefixes)
    lines = [
        *_opening(
            "Turn the request below into well-formed JCT tasks and enqueue each with jct_enqueue_task.",
            "Request",
            request,
        ),
        "Each task is one independently reviewable change: split the request into several if it bundles "
        "unrelated work, and keep one task when it is a single change. If something essential is unclear "
        "(which repository, what done means), ask before enqueuing.",
        "",
        "Fields of jct_enqueue_task:",
        f"- objective: an imperative first line (it becomes the title), then what to do and why. At most "
        f"{Limits.OBJECTIVE:,} characters.",
        "- operation: " + "; ".join(f"{op.value} = {words}" for op, words in OPERATIONS.items()) + ".",
        f"- target_repo: the repository, e.g. owner/name.{repos} target_ref: the branch (default main). "
        "target_path: the directory or file the change is confined to (it becomes the allowed path; empty = "
        "whole repository). touches: the path globs it edits (default target_path); two tasks whose touches "
        "overlap never run at once, so name what it edits and no more.",
        f"- acceptance_criteria: 1 to 5 checkable statements (at most {Limits.CRITERIA}, each under "
        f"{Limits.CRITERION:,} characters), each provable from an artifact: a named test passes, an endpoint "
        "returns 400 for X, a document has a section on Y. Not 'the code is clean'. The worker cites "
        "artifacts per criterion and the prover checks them.",
        "- context_summary: what the worker needs that is not in the repository: background, pointers to "
        "files, decisions already made, pitfalls.",
        "- priority: " + ", ".join(f"{p.value} {words}" for p, words in PRIORITIES.items()) + ".",
        "- time_budget_seconds: 30 to 86400 (default 3600): a realistic bound for one agent session.",
        "- idempotency_key: a stable key per task (e.g. a slug of the request and the task), so that a retry "
        "does not enqueue it twice.",
        "",
        "Afterwards, list each task's task_id and its briefing jct://issues/<cwom_issue_id>.",
    ]
    existing = [
        f"- {t.priority} {t.operation} · {line(t.target_repo, 60)} — {headline(t.objective)} (task_id {t.task_id})"
        for t in queued.tasks
    ]
    return "\n".join(lines + _existing("Already queued (do not enqueue duplicates of these):", existing))


# --- plan --------------------------------------------------------------------------------------


def plan(goal: str, allowed_prefixes: Sequence[str], active: results.MissionList) -> str:
    repos = _allowed(" Repositories must start with", allowed_prefixes)
    lines = [
        *_opening("Plan the goal below as one JCT mission and create it with jct_create_mission.", "Goal", goal),
        "How a mission runs: its phases run in order, and a task is claimable only once every task it "
        "depends_on and every task of the earlier phases is approved; until then it is blocked. Agents record "
        'decisions with jct_report_progress(kind="decision"), and every later task of the mission reads them in '
        "its briefing.",
        "",
        "Plan it like this:",
        "1. Phases in the order work must happen (e.g. Specify, Build, Document). A phase needs at least one "
        "task; use as few phases as the work needs.",
        "2. Tasks: each one independently reviewable change, with a short unique key (e.g. spec-api), an "
        "imperative objective, an operation (code_change, docs, analysis or ops), target_repo (and target_path "
        "to confine it; touches for the files it edits, so tasks sharing files never run at once), and 1 to 5 "
        f"acceptance criteria provable from an artifact.{repos}",
        "3. depends_on: within a phase, the keys a task must wait for (tasks of earlier phases wait anyway). "
        "No cycles, and never a task of a later phase.",
        "4. idempotency_key: a slug of the goal, so a retry does not create it twice.",
        "",
        "If something essential is unclear (which repository, what done means), ask before creating it. "
        "Afterwards, give the mission_id and its page jct://missions/<mission_id>.",
    ]
    existing = [
        f"- {headline(m.title)} · {m.approved}/{m.total} approved (mission_id {m.mission_id})" for m in active.missions
    ]
    return "\n".join(lines + _existing("Active missions (do not plan one of these again):", existing))


def _allowed(lead: str, allowed_prefixes: Sequence[str]) -> str:
    """The sentence naming the repository prefixes JCT accepts; nothing when any repository goes."""
    return f"{lead} one of: {', '.join(allowed_prefixes)}." if allowed_prefixes else ""


def _opening(instruction: str, label: str, text: str) -> list[str]:
    """What the model is to do, then the requester's words, clipped, between triple quotes."""
    return [instruction, "", f"{label}:", '"""', clip(text, REQUEST_CHARS, "ask the requester for the rest"), '"""', ""]


def _existing(heading: str, entries: list[str]) -> list[str]:
    """What is there already, so the model does not make it again; nothing when there is none."""
    return ["", heading, *entries] if entries else []
