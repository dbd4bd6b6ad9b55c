"""What review returns: the outcome of a review (the policy's at completion, or a reviewer's decision), a completion
and its evidence pack, the pending reviews."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from server.core.results.shape import Ok, Shape, column
from server.vocab import Decision, IssueStatus, ReviewState, RunStatus, TaskStatus


class ReviewOutcome(Shape):
    status: Literal["auto_approved", "awaiting_manual_review", "not_required", "approved", "rejected", "needs_changes"]
    review_id: str | None = None
    message: str | None = None


class ReviewSubmitted(Ok):
    review_id: str
    decision: Decision
    issue_status: IssueStatus | None = None
    run_status: RunStatus
    task_status: TaskStatus
    context_packet_version: int | None = Field(None, description="The new briefing version, after needs_changes.")


class EvidenceSummary(Shape):
    id: str
    verdict: str
    verdict_reason: str


class Completion(Ok):
    task_id: str
    task_status: TaskStatus
    run_id: str
    run_status: RunStatus
    evidence_pack: EvidenceSummary
    review: ReviewOutcome
    duplicate: bool = Field(False, description="True when this repeats an earlier completion; nothing changed.")


class Check(Shape):
    name: str
    passed: bool | None
    detail: str


class CriterionResult(Shape):
    criterion: str
    status: str
    evidence: list[str]
    note: str | None = None


class EvidencePackDetail(Shape):
    id: str
    run_id: str
    task_id: str
    verdict: str
    verdict_reason: str
    checks: list[Check]
    criteria_results: list[CriterionResult]
    evidence_collected: list[dict[str, str]]
    evidence_missing: list[str]
    prover_id: str
    review_state: ReviewState
    created_at: datetime
    unexpected_files: list[str] | None = None
    files_changed: dict[str, Any] | None = None


class EvidenceView(Ok):
    evidence_pack: EvidencePackDetail


class PendingReview(Shape):
    evidence_pack_id: str
    run_id: str
    task_id: str
    cwom_issue_id: str | None = column("cwom_issue_id", "issue_id")
    objective: str
    verdict: str
    verdict_reason: str
    summary: str | None
    executor: dict[str, str]
    created_at: datetime


class PendingReviews(Ok):
    reviews: list[PendingReview]
    count: int
    next_cursor: str | None = None
