"""The audit log's vocabulary, in one table: every action JCT records, and the one way a row is made.

Each state change writes its row in the same transaction as the change (STYLE rule 8); the change feed
(server/notify/changes.py) reads the same names back.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from server.core.models import Actor
from server.vocab import EntityKind, IssueStatus, RunStatus


class AuditAction(StrEnum):
    TASK_ENQUEUED = "task.enqueued"
    TASK_CLAIMED = "task.claimed"
    TASK_COMPLETED = "task.completed"
    TASK_FAILED = "task.failed"
    TASK_REQUEUED = "task.requeued"
    TASK_RELEASED = "task.released"
    TASK_CANCELLED = "task.cancelled"
    TASK_REJECTED = "task.rejected"
    TASK_PRIORITY_SET = "task.priority_set"
    # Its last dependency (or the phase before its own) was approved: claimable now.
    TASK_UNBLOCKED = "task.unblocked"
    # A task joined a phase before its own that was done: it waits for that phase again.
    TASK_BLOCKED = "task.blocked"
    RUN_PROGRESS = "run.progress"
    RUN_LEASE_EXPIRED = "run.lease_expired"
    RUN_DONE = "run.done"
    RUN_FAILED = "run.failed"
    RUN_UNDER_REVIEW = "run.under_review"
    RUN_NEEDS_CHANGES = "run.needs_changes"
    RUN_RELEASED = "run.released"
    RUN_CANCELLED = "run.cancelled"
    ISSUE_CREATED = "issue.created"
    ISSUE_READY = "issue.ready"
    ISSUE_RUNNING = "issue.running"
    ISSUE_UNDER_REVIEW = "issue.under_review"
    ISSUE_DONE = "issue.done"
    ISSUE_FAILED = "issue.failed"
    ISSUE_CANCELLED = "issue.cancelled"
    ARTIFACT_REPORTED = "artifact.reported"
    EVIDENCE_CREATED = "evidence.created"
    REVIEW_SUBMITTED = "review.submitted"
    # An admin approved, with an override_reason, work whose quality gate had run out of rounds.
    REVIEW_OVERRIDDEN = "review.overridden"
    MISSION_CREATED = "mission.created"
    MISSION_COMPLETED = "mission.completed"
    MISSION_CANCELLED = "mission.cancelled"
    MISSION_BUDGET_SET = "mission.budget_set"
    MISSION_SUMMARIZED = "mission.summarized"
    # A new briefing version made by hand (server/core/briefings/revise.py), not by a review round.
    BRIEFING_REVISED = "issue.briefing_revised"
    DOCTRINE_ADDED = "doctrine.added"
    DOCTRINE_UPDATED = "doctrine.updated"
    DOCTRINE_REMOVED = "doctrine.removed"
    # The merge queue (DESIGN section 16): the run's work entered it, waits, landed, or went back to an agent.
    INTEGRATION_QUEUED = "integration.queued"
    INTEGRATION_WAITING = "integration.waiting"
    INTEGRATION_MERGED = "integration.merged"
    INTEGRATION_CONFLICT = "integration.conflict"
    INTEGRATION_CHECK_FAILED = "integration.check_failed"

    @classmethod
    def run_moved(cls, status: RunStatus) -> AuditAction:
        """A run's move to `status` (`run.done`, ...)."""
        return cls(f"run.{status.value}")

    @classmethod
    def issue_moved(cls, status: IssueStatus) -> AuditAction:
        """An issue's move to `status` (`issue.ready`, ...)."""
        return cls(f"issue.{status.value}")


# What adds something resources/list shows (tasks, issues, runs, evidence packs).
LISTED = frozenset(
    {
        AuditAction.TASK_ENQUEUED,
        AuditAction.ISSUE_CREATED,
        AuditAction.TASK_CLAIMED,
        AuditAction.EVIDENCE_CREATED,
        AuditAction.MISSION_CREATED,
    }
)


# What can make a queued task claimable, or free the touches one waits for: the change feed wakes the claims
# waiting for work when it reads one of these (server/core/claims/waiting.py).
CLAIMABLE = frozenset(
    {
        AuditAction.TASK_ENQUEUED,
        AuditAction.MISSION_CREATED,
        AuditAction.TASK_UNBLOCKED,
        # A budget raised (or removed): the tasks a spent budget held back may go.
        AuditAction.MISSION_BUDGET_SET,
        AuditAction.TASK_REQUEUED,
        AuditAction.TASK_RELEASED,
        AuditAction.RUN_LEASE_EXPIRED,
        # A task that held touches ends, or its work is merged or sent back: tasks waiting on them may go.
        AuditAction.TASK_COMPLETED,
        AuditAction.TASK_FAILED,
        AuditAction.TASK_CANCELLED,
        AuditAction.TASK_REJECTED,
        AuditAction.RUN_NEEDS_CHANGES,
        AuditAction.REVIEW_SUBMITTED,
        AuditAction.REVIEW_OVERRIDDEN,
        AuditAction.INTEGRATION_MERGED,
        AuditAction.INTEGRATION_CONFLICT,
        AuditAction.INTEGRATION_CHECK_FAILED,
    }
)


def audit_row(
    actor: Actor,
    action: AuditAction,
    entity_kind: EntityKind,
    entity_id: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    trace_id: str | None,
) -> dict[str, Any]:
    """One audit row. Its `ts` is stamped at insert (server/db/queries.py); the id orders the log."""
    return {
        "actor_kind": actor.actor_kind,
        "actor_id": actor.actor_id,
        "action": action.value,
        "entity_kind": entity_kind.value,
        "entity_id": entity_id,
        "before": before,
        "after": after,
        "trace_id": trace_id,
    }


def issue_moved(actor: Actor, issue_id: str, status: IssueStatus, trace_id: str | None) -> dict[str, Any]:
    """The audit row of an issue following its task (a completion, a review)."""
    moved = AuditAction.issue_moved(status)
    return audit_row(actor, moved, EntityKind.ISSUE, issue_id, None, {"status": status}, trace_id)
