"""The closed vocabularies every layer shares: what a status, a kind or a decision may be.

The values are what the database stores; SQL in server/db/ and the domain in server/core/ both speak them from
here, so a status is never a loose string.
"""

from __future__ import annotations

from enum import StrEnum


class Operation(StrEnum):
    CODE_CHANGE = "code_change"
    DOCS = "docs"
    ANALYSIS = "analysis"
    OPS = "ops"


class Priority(StrEnum):
    P0 = "P0"
    P1 = "P1"
    P2 = "P2"
    P3 = "P3"
    P4 = "P4"


class TaskStatus(StrEnum):
    BLOCKED = "blocked"  # waits for its dependencies (or its phase) to be approved: not claimable
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


# Ended without approval (a review rejection leaves a task failed): such a task can be requeued, and one that
# depends on it cannot start until it is.
TASK_ENDED_UNAPPROVED = (TaskStatus.FAILED, TaskStatus.CANCELLED)
# Not ended yet: such a task can be cancelled, and its priority still matters.
TASK_OPEN = (TaskStatus.QUEUED, TaskStatus.BLOCKED, TaskStatus.RUNNING)


class RunStatus(StrEnum):
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    UNDER_REVIEW = "under_review"
    NEEDS_CHANGES = "needs_changes"
    EXPIRED = "expired"
    RELEASED = "released"
    CANCELLED = "cancelled"


class IssueStatus(StrEnum):
    READY = "ready"
    RUNNING = "running"
    UNDER_REVIEW = "under_review"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class ReviewState(StrEnum):
    """Where an evidence pack stands with review (failed runs need none)."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    NEEDS_CHANGES = "needs_changes"
    NOT_REQUIRED = "not_required"


class ArtifactType(StrEnum):
    CODE_PATCH = "code_patch"
    COMMIT = "commit"
    DOC = "doc"
    REPORT = "report"
    LOG = "log"
    TRACE = "trace"


class EventKind(StrEnum):
    PROGRESS = "progress"
    MILESTONE = "milestone"
    DECISION = "decision"
    BLOCKER = "blocker"


class Decision(StrEnum):
    APPROVED = "approved"
    REJECTED = "rejected"
    NEEDS_CHANGES = "needs_changes"


class EntityKind(StrEnum):
    TASK = "Task"
    ISSUE = "Issue"
    RUN = "Run"
    ARTIFACT = "Artifact"
    EVIDENCE_PACK = "EvidencePack"
    MISSION = "Mission"
    DOCTRINE = "Doctrine"


class MissionStatus(StrEnum):
    ACTIVE = "active"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


class PhaseStatus(StrEnum):
    PENDING = "pending"
    ACTIVE = "active"
    DONE = "done"
