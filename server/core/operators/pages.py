"""What each jct:// page and the review prompt show, read in one transaction per page, as plain data.

The Markdown is the adapters' (server/resources/render.py and briefing.py, server/prompts/texts.py).
Lookups that find nothing raise JctError (TASK_NOT_FOUND, ...), like the tools do; the resource handlers
turn those into the MCP resource-not-found error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import anyio
from pydantic import ValidationError

from server.core import results, views
from server.core.briefings import doctrine
from server.core.models import parse_id, parse_run_id
from server.core.review import gates, manifest
from server.core.service import Core
from server.db import integrations, listing, queries
from server.db.records import Artifact, EvidencePack, ReviewDecision, ReviewedRun
from server.errors import ErrorCode, not_found

RUNS_SHOWN = 10
ISSUE_TASKS_SHOWN = 10
ISSUE_RUNS_SHOWN = 20
FEEDBACK_VERSIONS = 100
EVENTS_SHOWN = 50
ARTIFACT_CHARS = 40_000

T = TypeVar("T")


@dataclass(frozen=True)
class Review:
    """A decision on an evidence pack."""

    decision: str
    reason: str
    reviewer: Mapping[str, Any]  # the record: markdown.who() renders it
    at: datetime | None = None


class RunLine(ReviewedRun):
    """A run as one line of a task or issue page: status, evidence and review (the listed record itself)."""

    @property
    def run_id(self) -> str:
        return self.id

    @property
    def review(self) -> Review | None:
        if self.decision is None:
            return None
        return Review(decision=self.decision, reason=self.decision_reason or "", reviewer=self.reviewer or {})


@dataclass(frozen=True)
class TaskPage:
    task: results.TaskDetail
    issue_title: str | None
    runs: Sequence[RunLine]
    # "review round 1 of 2" (gates.round_of): the reviews that asked for changes, of the task's gate.
    review_round: str = ""


@dataclass(frozen=True)
class IssueBrief:
    issue: results.IssueView
    tasks: Sequence[results.TaskDetail]  # newest first
    runs: Sequence[RunLine]  # newest first
    packet: results.ContextPacket | None
    feedback: Sequence[results.ReviewFeedback]  # oldest first
    constraints: results.Constraints | None
    doctrine: Sequence[results.DoctrineRef] = field(default_factory=list)
    # The newest task's rounds of changes (gates.round_of), once a review asked for changes.
    review_round: str | None = None


@dataclass(frozen=True)
class RunPage:
    run: results.RunDetail
    number: int
    objective: str
    artifacts: Sequence[results.ArtifactView]
    events: Sequence[results.RunEventView]
    evidence: results.EvidencePackDetail | None
    review: Review | None
    # The trace store's manifest (server/core/review/manifest.py); None until the run completes.
    manifest: dict[str, Any] | None = None
    # Its work's place in the merge queue (an integrable repository).
    integration: results.IntegrationView | None = None


@dataclass(frozen=True)
class EvidencePage:
    pack: results.EvidencePackDetail
    objective: str
    issue_id: str | None
    run_summary: str | None
    executor: Mapping[str, Any]
    artifact_titles: Mapping[str, str]
    review: Review | None
    # What JCT read of the run's change in its repository (a verifiable task).
    files_changed: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Diff:
    """The start of a stored code_patch artifact."""

    artifact: results.ArtifactView
    text: str
    total_chars: int


@dataclass(frozen=True)
class PackState:
    """One evidence pack with what a reviewer reads next to it (the review prompt)."""

    pack: results.EvidencePackDetail
    objective: str
    run_summary: str | None
    executor: Mapping[str, Any]
    artifacts: Sequence[results.ArtifactView]
    decision: str | None
    decision_reason: str | None
    diffs: Sequence[Diff] = ()


def review_of(row: ReviewDecision | None) -> Review | None:
    if row is None:
        return None
    return Review(decision=row.decision, reason=row.reason, reviewer=row.reviewer or {}, at=row.created_at)


def run_line(row: ReviewedRun) -> RunLine:
    """A run of listing.runs_of_tasks / latest_runs, as a page's line."""
    return RunLine(**row.columns())


def _found(row: T | None, code: ErrorCode, what: str, value: str) -> T:
    """The row a page is about, or the not-found error (`what` `value`) that a resource read turns into its own."""
    if row is None:
        raise not_found(code, what, value, "Pick one from resources/list or complete the id.")
    return row


async def task_page(core: Core, task_id: str) -> TaskPage:
    task_id = parse_id(task_id, "task_id")
    async with core.db.read() as conn:
        task = _found(await queries.get_task(conn, task_id), ErrorCode.TASK_NOT_FOUND, "Task", task_id)
        issue = await queries.get_issue(conn, task.issue_id) if task.issue_id else None
        runs = await listing.runs_of_tasks(conn, [task_id], RUNS_SHOWN)
    return TaskPage(
        task=views.task_detail(task),
        issue_title=issue["title"] if issue is not None else None,
        runs=[run_line(row) for row in runs],
        review_round=gates.round_of(task.review_rounds, gates.gate_of(task.step, core.settings.max_review_rounds)),
    )


def _feedback(versions: list[list[Any]]) -> list[results.ReviewFeedback]:
    """Every version's review_feedback, each round once, oldest first."""
    seen: set[tuple[str | None, str, str]] = set()
    feedback: list[results.ReviewFeedback] = []
    for version in versions:
        for item in version:
            try:
                parsed = results.ReviewFeedback.model_validate(item)
            except ValidationError:
                continue
            key = (parsed.run_id, parsed.decision, parsed.reason)
            if key not in seen:
                seen.add(key)
                feedback.append(parsed)
    return feedback  # versions oldest first, each list in the order it grew: chronological


async def issue_brief(core: Core, issue_id: str) -> IssueBrief:
    issue_id = parse_id(issue_id, "issue_id")
    async with core.db.read() as conn:
        issue = _found(await queries.get_issue(conn, issue_id), ErrorCode.INVALID_ARGUMENT, "Issue", issue_id)
        tasks = await listing.tasks_of_issue(conn, issue_id, ISSUE_TASKS_SHOWN)
        packet = await queries.latest_context_packet(conn, issue_id)
        feedback = await listing.feedback_of_issue(conn, issue_id, FEEDBACK_VERSIONS)
        runs = await listing.runs_of_tasks(conn, [task.id for task in tasks], ISSUE_RUNS_SHOWN)
        latest = tasks[0] if tasks else None
        doctrine_refs = await doctrine.for_issue(conn, issue_id, latest.target_repo if latest else None)
        snapshot_id = latest.constraint_snapshot_id if latest is not None else None
        snapshot = await queries.get_constraint_snapshot(conn, snapshot_id) if snapshot_id else None
    rounds = core.settings.max_review_rounds
    return IssueBrief(
        issue=views.issue(issue),
        tasks=[views.task_detail(task) for task in tasks],
        runs=[run_line(row) for row in runs],
        packet=views.context_packet(packet),
        feedback=_feedback(feedback),
        constraints=views.constraints(snapshot, latest.time_budget_seconds) if latest is not None else None,
        doctrine=doctrine_refs,
        review_round=(
            gates.round_of(latest.review_rounds, gates.gate_of(latest.step, rounds))
            if latest is not None and latest.review_rounds
            else None
        ),
    )


async def run_page(core: Core, run_id: str) -> RunPage:
    run_id, _key = parse_run_id(run_id)  # the run_id a claim returned reads its run too
    async with core.db.read() as conn:
        run = _found(await queries.get_run(conn, run_id), ErrorCode.RUN_NOT_FOUND, "Run", run_id)
        task = await queries.get_task(conn, run.task_id)
        artifacts = await queries.artifacts_of_run(conn, run_id)
        events = await queries.run_events(conn, run_id, EVENTS_SHOWN)
        pack = await queries.evidence_pack_for_run(conn, run_id)
        decision = await queries.review_decision_for_pack(conn, pack.id) if pack is not None else None
        number = await listing.run_number(conn, run.task_id, run.started_at, run_id)
        merge = (await integrations.of_runs(conn, [run_id])).get(run_id)
    return RunPage(
        run=views.run_detail(run),
        number=number,
        objective=task.objective if task is not None else "",
        artifacts=[views.artifact(a) for a in artifacts],
        events=[views.run_event(e) for e in events],
        evidence=views.evidence_detail(pack) if pack is not None else None,
        review=review_of(decision),
        manifest=await manifest.read(core, run_id) if run.ended_at is not None else None,
        integration=views.integration(merge) if merge is not None else None,
    )


async def evidence_page(core: Core, pack_id: str) -> EvidencePage:
    read = await _read_pack(core, pack_id)
    return EvidencePage(
        pack=views.evidence_detail(read.pack),
        objective=read.objective,
        issue_id=read.pack.issue_id,
        files_changed=read.files_changed,
        run_summary=read.run_summary,
        executor=read.executor,
        artifact_titles={a.id: a.title for a in read.artifacts},
        review=review_of(read.decision),
    )


@dataclass(frozen=True)
class _PackRead:
    pack: EvidencePack
    objective: str
    run_summary: str | None
    executor: Mapping[str, Any]
    artifacts: Sequence[Artifact]
    decision: ReviewDecision | None
    files_changed: Mapping[str, Any] | None = None


async def _read_pack(core: Core, pack_id: str) -> _PackRead:
    """An evidence pack with its task's objective, its run, the run's artifacts and the review decision."""
    pack_id = parse_id(pack_id, "evidence_pack_id")
    async with core.db.read() as conn:
        found = await queries.get_evidence_pack(conn, pack_id)
        pack = _found(found, ErrorCode.EVIDENCE_PACK_NOT_FOUND, "Evidence pack", pack_id)
        task = await queries.get_task(conn, pack.task_id)
        run = await queries.get_run(conn, pack.run_id)
        artifacts = await queries.artifacts_of_run(conn, pack.run_id)
        decision = await queries.review_decision_for_pack(conn, pack_id)
    return _PackRead(
        pack=pack,
        objective=task.objective if task is not None else "",
        run_summary=run.summary if run is not None else None,
        executor=run.executor if run is not None else {},
        artifacts=artifacts,
        decision=decision,
        files_changed=run.files_changed if run is not None else None,
    )


async def artifact_content(core: Core, artifact_id: str) -> tuple[results.ArtifactView, str | None, int]:
    """The artifact, the start of its stored text (None for URI-only artifacts), and its total length."""
    artifact_id = parse_id(artifact_id, "artifact_id")
    async with core.db.read() as conn:
        found = await queries.get_artifact(conn, artifact_id)
    row = _found(found, ErrorCode.ARTIFACT_NOT_FOUND, "Artifact", artifact_id)
    view = views.artifact(row)
    if not row.stored:
        return view, None, 0
    text: str
    total: int
    text, total, _more = await anyio.to_thread.run_sync(core.store.read_text, row.uri, 0, ARTIFACT_CHARS)
    return view, text, total


async def pack_state(core: Core, pack_id: str, diff_chars: int) -> PackState:
    """An evidence pack for review, with the start of its code_patch artifacts (`diff_chars` in all)."""
    read = await _read_pack(core, pack_id)
    diffs = []
    budget = diff_chars
    for row in read.artifacts:
        if row.stored and row.type == "code_patch" and budget > 0:
            text, total, _more = await anyio.to_thread.run_sync(core.store.read_text, row.uri, 0, budget)
            diffs.append(Diff(artifact=views.artifact(row), text=text, total_chars=total))
            budget -= len(text)
    decision = read.decision
    return PackState(
        pack=views.evidence_detail(read.pack),
        objective=read.objective,
        run_summary=read.run_summary,
        executor=read.executor,
        artifacts=[views.artifact(a) for a in read.artifacts],
        decision=decision.decision if decision is not None else None,
        decision_reason=decision.reason if decision is not None else None,
        diffs=diffs,
    )
