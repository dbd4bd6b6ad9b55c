"""What a task's briefing reads as (its issue, briefing versions, constraints and doctrine), and an enqueued task."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from server.core.results.missions import DecisionView
from server.core.results.shape import Ok, Shape
from server.vocab import ArtifactType, IssueStatus, Operation, Priority, TaskStatus


class Constraints(Shape):
    time_budget_seconds: int
    allow_network: bool
    allow_secrets: bool
    allowed_paths: list[str] = []


class ConstraintSnapshot(Shape):
    id: str
    scope: str
    rules: Constraints


class ReviewFeedback(Shape):
    # "requeued": an operator's feedback given with jct_requeue_task.
    decision: Literal["approved", "rejected", "needs_changes", "requeued", "conflict", "check_failed"]
    reason: str
    # The reviewer's principal (actor_id). Feedback recorded before that has no reviewer_name, and there
    # `reviewer` is the name the reviewer chose.
    reviewer: str
    reviewer_name: str | None = None  # the name the reviewer chose (self-reported)
    run_id: str | None = None  # absent when a task requeued before any run carries the feedback
    verdict: str
    at: datetime


class ContextPacket(Shape):
    id: str
    version: int
    summary: str
    prior_art: list[str]
    files_of_interest: list[str]
    acceptance_criteria: list[str]
    data: dict[str, Any] = {}
    review_feedback: list[ReviewFeedback] = []


class IssueView(Shape):
    id: str
    title: str
    type: Operation
    priority: Priority
    status: IssueStatus
    acceptance_criteria: list[str]


class DoctrineRef(Shape):
    id: str
    namespace: str
    name: str
    body: str


class UpstreamArtifact(Shape):
    """An artifact of an approved task this one depends on (its workflow step, when it is one)."""

    artifact_id: str
    title: str
    type: ArtifactType
    task_id: str
    step: str | None = None


class TaskContext(Ok):
    task_id: str
    issue: IssueView | None = None
    context_packet: ContextPacket | None = None
    constraint_snapshot: ConstraintSnapshot | None = None
    doctrine_refs: list[DoctrineRef] = []
    mission_id: str | None = None
    decisions: list[DecisionView] | None = None
    step: dict[str, Any] | None = Field(None, description="The workflow step: its outputs and gate.")
    dependency_artifacts: list[UpstreamArtifact] | None = Field(
        None, description="What the tasks it depends on delivered: read them with jct_get_artifact."
    )


class Enqueued(Ok):
    task_id: str
    trace_id: str
    status: TaskStatus
    cwom_issue_id: str | None = None
    duplicate: bool = False
