"""Pure functions from JCT's records to Markdown written for a model: what an agent needs first, then details.

Every section has a character budget; whatever is cut names the tool or resource that has the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from server.core import results
from server.core.briefings import doctrine
from server.core.operators.pages import EvidencePage, Review, RunLine, RunPage, TaskPage
from server.markdown import (
    artifact_uri,
    block,
    bullets,
    clip,
    code,
    compact_json,
    duration,
    evidence_uri,
    fit,
    headline,
    issue_uri,
    line,
    run_uri,
    stamp,
    task_uri,
    who,
)

# Section budgets, in characters.
OBJECTIVE_CHARS = 1_500
TEXT_CHARS = 1_500
EVENTS_CHARS = 2_500
EVENT_CHARS = 240
ARTIFACTS_CHARS = 2_500
CHECKS_CHARS = 2_000
REVIEW_REASON_CHARS = 240
# The list on the queue and pending-reviews pages.
LIST_PAGE_CHARS = 9_000
# A last line of defence for any one page.
PAGE_CHARS = 12_000


def page_text(lines: Sequence[str], pointer: str) -> str:
    """A whole page, cut at PAGE_CHARS with `pointer` to the rest."""
    return clip("\n".join(lines), PAGE_CHARS, pointer) + "\n"


# --- queue and pending reviews ---------------------------------------------------------------


def queue_page(stats: results.QueueStats, page: results.TaskList) -> str:
    counts = " · ".join(f"{count} {status}" for status, count in stats.counts.items())
    lines = [
        "# JCT queue",
        "",
        f"{counts} · {stats.pending_reviews} awaiting review · {stats.expired_leases} expired leases",
    ]
    if stats.oldest_queued_age_seconds is not None:
        lines.append(f"The oldest queued task has waited {duration(stats.oldest_queued_age_seconds)}.")
    queued = stats.counts.get("queued", 0)
    lines += ["", f"## Queued tasks, highest priority first ({page.count} of {queued})"]
    if not page.tasks:
        lines.append("The queue is empty: there is nothing to claim.")
    entries = [
        f"{number}. **{task.priority}** {task.operation} · {code(task.target_repo, 60)} — "
        f"{headline(task.objective)} — {task_uri(task.task_id)}"
        for number, task in enumerate(page.tasks, 1)
    ]
    lines += _list_end(
        entries,
        "jct_list_tasks",
        'status="queued"',
        page.next_cursor,
        "Take the top task with jct_claim_next (or a given one with jct_claim_task(task_id)). Each task page "
        "links its briefing (jct://issues/<issue_id>): objective, acceptance criteria, context, review feedback.",
    )
    return page_text(lines, "call jct_list_tasks")


def pending_reviews_page(page: results.PendingReviews, total: int) -> str:
    lines = ["# Evidence packs awaiting review", "", f"{total} pending, oldest first (showing {page.count})."]
    if not page.reviews:
        lines.append("Nothing awaits a decision.")
    entries = []
    for number, item in enumerate(page.reviews, 1):
        entry = [
            f"{number}. **{item.verdict}** — {headline(item.objective)} — by {who(item.executor)}, "
            f"{stamp(item.created_at)}",
            f"   {evidence_uri(item.evidence_pack_id)} · run {run_uri(item.run_id)}",
            f"   prover: {line(item.verdict_reason, REVIEW_REASON_CHARS)}",
        ]
        if item.summary:
            entry.append(f"   agent: {line(item.summary, REVIEW_REASON_CHARS)}")
        entries.append("\n".join(entry))
    lines += _list_end(
        entries,
        "jct_list_pending_reviews",
        "",
        page.next_cursor,
        "Read a pack (its checks, criteria and cited artifacts, the diff first), then decide with "
        'jct_submit_review(evidence_pack_id, decision="approved" | "needs_changes" | "rejected", reason). '
        "needs_changes requeues the task with your reason in its briefing: say exactly what to change.",
    )
    return page_text(lines, "call jct_list_pending_reviews")


def _list_end(entries: Sequence[str], tool: str, filters: str, next_cursor: str | None, next_step: str) -> list[str]:
    """A list page's entries, as many as fit, then the tool call for the next page, then what to do next."""
    lines = fit(entries, LIST_PAGE_CHARS, f"call {tool}({filters})" if filters else f"call {tool}")
    if next_cursor is not None:
        lines.append(f'More: call {tool}({filters}{", " if filters else ""}cursor="{next_cursor}").')
    return [*lines, "", "## Next", next_step]


# --- tasks --------------------------------------------------------------------------------


def target_text(target: results.Target) -> str:
    where = code(f"{target.repo}@{target.ref}")
    where = f"{where} path {code(target.path)}" if target.path else where
    if target.touches:
        where += " touches " + ", ".join(code(t) for t in target.touches[:TOUCHES_SHOWN])
        where += f" (+{len(target.touches) - TOUCHES_SHOWN} more)" if len(target.touches) > TOUCHES_SHOWN else ""
    return where


# The touches a page names in a task's target line (a task declares at most 50).
TOUCHES_SHOWN = 10


def run_entry(run: RunLine) -> str:
    parts = [f"run {run.number} **{run.status}**", f"by {who(run.executor)}", f"started {stamp(run.started_at)}"]
    if run.status == "running" and run.lease_expires_at is not None:
        parts.append(f"lease until {stamp(run.lease_expires_at)}")
    if run.verdict is not None:
        parts.append(f"verdict {run.verdict}")
    if run.review is not None:
        parts.append(
            f"review {run.review.decision} by {who(run.review.reviewer)}: "
            f"{line(run.review.reason, REVIEW_REASON_CHARS)}"
        )
    elif run.review_state == "pending":
        parts.append("awaiting review")
    links = run_uri(run.run_id)
    if run.evidence_pack_id is not None:
        links += f" · {evidence_uri(run.evidence_pack_id)}"
    return f"- {' · '.join(parts)} — {links}"


def task_next(task: results.TaskDetail, runs: Sequence[RunLine], *, in_briefing: bool = False) -> str:
    latest = runs[0] if runs else None
    match task.status:
        case "queued":
            where = "above" if in_briefing else "in its briefing"
            again = ""
            if latest is not None and latest.review is not None and latest.review.decision == "needs_changes":
                again = f" A review asked for changes: address the review feedback {where} first."
            elif latest is not None:
                again = f" Its last run ended {latest.status}."
            return f'Queued. Claim it with jct_claim_task(task_id="{task.task_id}").{again}'
        case "running":
            return (
                f"Running (run {run_uri(task.active_run_id) if task.active_run_id else '-'}). Only its claimant can "
                "report on it; watch progress on the run page."
            )
        case "completed" if latest is not None and latest.review_state == "pending":
            pack = evidence_uri(latest.evidence_pack_id) if latest.evidence_pack_id else "its evidence pack"
            return f"Completed, awaiting review: read {pack}, then jct_submit_review."
        case _:
            return f"{task.status.capitalize()}. Nothing more to do unless someone enqueues a follow-up."


def runs_text(runs: Sequence[RunLine]) -> str:
    """How many runs a task has had: its newest run's number, the `attempt` its claim and run page show."""
    count = max((run.number for run in runs), default=0)
    return f"{count} run{'s' if count != 1 else ''}"


def task_page(page: TaskPage) -> str:
    task = page.task
    lines = [
        f"# Task: {headline(task.objective)}",
        "",
        f"**{task.status}** · {task.priority} · {task.operation} · {target_text(task.target)} · "
        f"{runs_text(page.runs)} · expired leases {task.attempts}/{task.max_attempts} · "
        f"budget {duration(task.time_budget_seconds)} · {page.review_round}",
    ]
    if task.cwom_issue_id is not None:
        title = f" ({line(page.issue_title, 80)})" if page.issue_title else ""
        lines.append(f"Briefing: {issue_uri(task.cwom_issue_id)}{title}")
    lines += [
        f"Queued {stamp(task.queued_at)} by {line(task.requested_by, 64)}; claimed {stamp(task.claimed_at)}; "
        f"ended {stamp(task.completed_at)}. Task id `{task.task_id}`, trace `{task.trace_id}`.",
        "",
        "## Objective",
        *block(task.objective, OBJECTIVE_CHARS, f'call jct_get_task(task_id="{task.task_id}")'),
    ]
    if task.result or task.error:
        lines += ["", "## Last outcome" if task.status == "queued" else "## Outcome"]
        result = task.result or {}
        if result.get("summary"):
            pointer = f"read {run_uri(str(result.get('run_id')))}"
            lines += ["Summary:", *block(str(result["summary"]), TEXT_CHARS, pointer)]
        if result.get("outputs") is not None:
            lines += ["", "Outputs: " + compact_json(result["outputs"], 500, "call jct_get_task")]
        if task.error:
            lines += ["", "Error:", *block(task.error, TEXT_CHARS, "call jct_get_task")]
    lines += ["", "## Runs, newest first"]
    lines += [run_entry(run) for run in page.runs] or ["None yet."]
    lines += ["", "## Next", task_next(task, page.runs)]
    return page_text(lines, f'call jct_get_task(task_id="{task.task_id}")')


# --- runs, evidence, artifacts -------------------------------------------------------------


def _size(size: int | None) -> str:
    if size is None:
        return "remote"
    if size < 1024:
        return f"{size} B"
    return f"{size / 1024:.1f} KiB" if size < 1024 * 1024 else f"{size / 1024 / 1024:.1f} MiB"


def verdict_line(verdict: str, reason: str, pointer: str) -> str:
    """The prover's reasons usually start with the verdict; say it once. They quote agent text (criteria)."""
    reason = line(reason, TEXT_CHARS, pointer)
    if reason.startswith(f"{verdict}:"):
        reason = reason[len(verdict) + 1 :].strip()
    return f"Verdict **{verdict}**: {reason}"


def _review_state(evidence: results.EvidencePackDetail, review: Review | None) -> str:
    if review is not None:
        reason = line(review.reason, TEXT_CHARS, "call jct_get_audit_trail")
        return f"{review.decision} by {who(review.reviewer)}: {reason}"
    if evidence.review_state == "pending":
        return f'pending: decide with jct_submit_review(evidence_pack_id="{evidence.id}", decision, reason)'
    return evidence.review_state


def integration_lines(merge: results.IntegrationView, pointer: str) -> list[str]:
    """Where the run's work stands on its way to the target branch (DESIGN section 16)."""
    lines = [f"**{merge.status}** into `{line(merge.ref, 80)}` ({merge.strategy}) · queued {stamp(merge.queued_at)}"]
    if merge.commit is not None and merge.status == "merged":
        lines.append(f"Landed as `{merge.commit}` ({stamp(merge.ended_at)}).")
    if merge.waiting:
        lines.append("Waits: " + line(merge.waiting, TEXT_CHARS, pointer))
    if merge.conflicting_files:
        lines.append("Conflicts in: " + line(", ".join(merge.conflicting_files), TEXT_CHARS, pointer))
    if merge.check_output:
        lines += ["Check output (its tail):", *block(merge.check_output[-2000:], TEXT_CHARS, pointer)]
    return lines


def run_page(page: RunPage) -> str:
    run = page.run
    pointer = f'call jct_get_run(run_id="{run.run_id}")'
    lines = [
        f"# Run {page.number}: {headline(page.objective)}",
        "",
        f"**{run.status}** · by {who(run.executor)} · started {stamp(run.started_at)} · ended {stamp(run.ended_at)}",
    ]
    if run.status == "running" and run.lease_expires_at is not None:
        lines.append(f"Lease expires {stamp(run.lease_expires_at)}: the claimant renews it with any call on the task.")
    links = [f"task {task_uri(run.task_id)}"]
    if run.cwom_issue_id is not None:
        links.append(f"briefing {issue_uri(run.cwom_issue_id)}")
    lines.append("Links: " + " · ".join(links) + f". Run id `{run.run_id}`.")
    lines += ["", "## Verdict"]
    if page.evidence is None:
        lines.append("No evidence yet: the prover runs when the run is completed with jct_complete_task.")
    else:
        lines += [
            verdict_line(page.evidence.verdict, page.evidence.verdict_reason, pointer),
            f"Review: {_review_state(page.evidence, page.review)}",
            f"Evidence: {evidence_uri(page.evidence.id)}",
        ]
    if run.summary:
        lines += ["", "## Summary", *block(run.summary, TEXT_CHARS, pointer)]
    if run.failure:
        lines += ["", "## Failure", compact_json(run.failure, TEXT_CHARS // 2, pointer)]
    if run.base_commit is not None:
        lines += [
            "",
            "## Change read by JCT in the repository",
            *files_changed(run.run_id, run.base_commit, run.files_changed),
        ]
    if run.workspace is not None:
        space = run.workspace
        where = f", worktree `{space.path}`" if space.path else " (on the remote: fetch it, commit, push)"
        lines += ["", f"Workspace: branch `{space.branch}` at `{space.base_commit[:12]}`{where}."]
    if page.integration is not None:
        lines += ["", "## Integration", *integration_lines(page.integration, pointer)]
    lines += ["", f"## Artifacts ({len(page.artifacts)})"]
    artifacts = [
        f"- {line(a.title, 80)} ({a.type}, {line(a.media_type, 60)}, {_size(a.size_bytes)}) — "
        f"{artifact_uri(a.artifact_id)}"
        for a in page.artifacts
    ]
    lines += fit(artifacts, ARTIFACTS_CHARS, pointer) if artifacts else ["None reported."]
    lines += ["", f"## Progress ({len(page.events)} latest events, oldest first)"]
    events = [
        f"- {stamp(e.created_at)} {e.kind}"
        + (f" {e.progress}%" if e.progress is not None else "")
        + f": {line(e.message, EVENT_CHARS)}"
        for e in page.events
    ]
    lines += fit(events, EVENTS_CHARS, pointer, keep="last") if events else ["No progress reported."]
    if run.outputs is not None:
        lines += ["", "## Outputs", compact_json(run.outputs, TEXT_CHARS // 2, pointer)]
    if run.telemetry:
        lines += ["", "## Telemetry", compact_json(run.telemetry, 400, pointer)]
    lines += ["", "## Trace manifest", *_manifest_lines(page.manifest, pointer)]
    return page_text(lines, pointer)


def files_changed(run_id: str, base: str, read: Mapping[str, Any] | None) -> list[str]:
    """The files a run changed as JCT read them: path, status, lines added and removed; the diff's URI."""
    diff = f"{run_uri(run_id)}/diff"
    if read is None:
        return [f"Base commit `{base[:12]}` (recorded at claim); files are read at completion. Diff: {diff}"]
    head = read.get("head")
    where = f"`{str(head)[:12]}`" if head else "the working tree"
    tree = " plus what is not committed yet" if read.get("working_tree") and head else ""
    rows = [
        f"- {line(str(f['path']), 160)} ({f['status']}"
        + (f" from {line(str(f['old_path']), 120)}" if f.get("old_path") else "")
        + (f", +{f['added']} -{f['removed']}" if f.get("added") is not None else ", binary")
        + ")"
        for f in read.get("files", [])
    ]
    more = ["(the list was cut: too many files)"] if read.get("truncated") else []
    head_line = f"`{base[:12]}` to {where}{tree}: {len(rows)} file(s). Diff: {diff}"
    return [head_line, *(fit(rows, ARTIFACTS_CHARS, f"read {diff}") if rows else ["No file changed."]), *more]


def _manifest_lines(manifest: dict[str, Any] | None, pointer: str) -> list[str]:
    """What the trace store holds for the run (server/core/review/manifest.py), written when it completed."""
    if manifest is None:
        return ["None yet: the trace store writes one when the run is completed."]
    pack = manifest.get("evidence_pack_id")
    lines = [
        f"Written at completion: run {manifest.get('run_status')}, verdict {manifest.get('verdict') or 'none'}"
        + (f", evidence {evidence_uri(str(pack))}" if pack else "")
        + f"; {manifest.get('total_bytes', 0)} bytes stored."
    ]
    entries = []
    for entry in manifest.get("artifacts") or []:
        where = f"`{entry.get('file')}`" if entry.get("file") else "remote"
        digest = f"sha256 `{entry['sha256']}`" if entry.get("sha256") else "no sha256"
        size = f"{entry['size_bytes']} bytes" if entry.get("size_bytes") is not None else "size unknown"
        entries.append(f"- {line(str(entry.get('title', '')), 120)} ({entry.get('type')}): {where}, {size}, {digest}")
    lines += fit(entries, ARTIFACTS_CHARS, pointer) if entries else ["No artifacts."]
    return lines


def evidence_page(page: EvidencePage) -> str:
    pack = page.pack
    pointer = f'call jct_get_evidence(run_id="{pack.run_id}")'
    lines = [
        f"# Evidence: {headline(page.objective)}",
        "",
        verdict_line(pack.verdict, pack.verdict_reason, pointer),
        f"Review: {_review_state(pack, page.review)}",
        f"Run {run_uri(pack.run_id)} by {who(page.executor)} · task {task_uri(pack.task_id)}"
        + (f" · briefing {issue_uri(page.issue_id)}" if page.issue_id else "")
        + f" · prover {pack.prover_id} · {stamp(pack.created_at)}",
    ]
    if page.run_summary:
        lines += ["", "## The agent's summary", *block(page.run_summary, TEXT_CHARS, f"read {run_uri(pack.run_id)}")]
    lines += ["", "## Checks"]
    marks = {True: "passed", False: "FAILED", None: "n/a"}
    checks = [f"- {marks[c.passed]} · {line(c.name, 60)}: {line(c.detail, 300)}" for c in pack.checks]
    lines += fit(checks, CHECKS_CHARS, pointer) if checks else ["None."]
    lines += ["", "## Acceptance criteria"]
    criteria = []
    for c in pack.criteria_results:
        cited = (
            ", ".join(f"{line(page.artifact_titles.get(a, a), 40)} {artifact_uri(a)}" for a in c.evidence[:5])
            or "no evidence cited"
        )
        note = f" — note: {line(c.note, 200)}" if c.note else ""
        criteria.append(f"- **{c.status}** · {line(c.criterion, 200)} — {cited}{note}")
    lines += fit(criteria, CHECKS_CHARS, pointer) if criteria else ["The task had no acceptance criteria."]
    if pack.unexpected_files:
        lines += ["", "## Files outside target_path", *fit(bullets(pack.unexpected_files), 1_000, pointer)]
    if page.files_changed is not None:
        base = str(page.files_changed.get("base", ""))
        lines += ["", "## Change read by JCT in the repository", *files_changed(pack.run_id, base, page.files_changed)]
    if pack.evidence_missing:
        lines += ["", "## Missing evidence", *fit(bullets(pack.evidence_missing), 800, pointer)]
    if pack.evidence_collected:
        collected = [
            f"- {line(str(item.get('type', '?')), 40)}: {line(str(item.get('title', '')), 80)}"
            + (f" {artifact_uri(item['artifact_id'])}" if item.get("artifact_id") else "")
            for item in pack.evidence_collected
        ]
        lines += ["", "## Evidence collected", *fit(collected, 1_000, pointer)]
    if pack.review_state == "pending":
        lines += [
            "",
            "## Next",
            "Read the cited artifacts (the diff first), check each criterion yourself, then "
            f'jct_submit_review(evidence_pack_id="{pack.id}", decision, reason).',
        ]
    return page_text(lines, pointer)


def remote_artifact(artifact: results.ArtifactView) -> str:
    """text/uri-list: a comment naming the artifact, then its URI."""
    comment = f"# {line(artifact.title, 120)} ({artifact.type}, {artifact.media_type}), stored outside JCT"
    return f"{comment}\r\n{artifact.uri}\r\n"


def doctrine_page(entry: doctrine.DoctrineEntry) -> str:
    """A doctrine entry: standing guidance, and which briefings carry it."""
    pointer = f'call jct_manage_doctrine(action="show", name="{entry.ref}")'
    reach = (
        f"In the briefing of every task whose repository starts with {code(entry.repo_prefix)}, and of every task "
        "that named it at enqueue."
        if entry.repo_prefix
        else "In the briefing of every task that named it at enqueue (doctrine=[...])."
    )
    lines = [f"# Doctrine: {line(entry.ref, 260)}", "", reach, "", "## Guidance"]
    lines += block(entry.body, TEXT_CHARS, pointer)
    return page_text(lines, pointer)
