"""Rows to the response models: one function per shape."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from server.core import results as r

# Rows from SQLAlchemy (RowMapping) or assembled by hand (the flat claim row): any mapping will do.
RowMapping = Mapping[Any, Any]


def target(task: RowMapping) -> r.Target:
    return r.Target(repo=task["target_repo"], ref=task["target_ref"], path=task["target_path"])


def task_summary(task: RowMapping) -> r.TaskSummary:
    return r.TaskSummary.model_validate(dict(task))


def task_detail(task: RowMapping) -> r.TaskDetail:
    return r.TaskDetail.model_validate(dict(task))


def constraints(snapshot: RowMapping | None, task: RowMapping) -> r.Constraints:
    if snapshot is None:
        return r.Constraints(time_budget_seconds=task["time_budget_seconds"], allow_network=False, allow_secrets=False)
    return r.Constraints(
        time_budget_seconds=snapshot["time_budget_seconds"],
        allow_network=snapshot["allow_network"],
        allow_secrets=snapshot["allow_secrets"],
        allowed_paths=snapshot["allowed_paths"],
    )


def constraint_snapshot(snapshot: RowMapping | None, task: RowMapping) -> r.ConstraintSnapshot | None:
    if snapshot is None:
        return None
    return r.ConstraintSnapshot(id=snapshot["id"], scope=snapshot["scope"], rules=constraints(snapshot, task))


def context_packet(packet: RowMapping | None) -> r.ContextPacket | None:
    if packet is None:
        return None
    return r.ContextPacket.model_validate({**packet, "review_feedback": packet["review_feedback"] or []})


def issue(row: RowMapping) -> r.IssueView:
    return r.IssueView.model_validate(dict(row))


def run_summary(run: RowMapping) -> r.RunSummary:
    return r.RunSummary.model_validate(dict(run))


def run_detail(run: RowMapping) -> r.RunDetail:
    return r.RunDetail.model_validate(dict(run))


def artifact(row: RowMapping) -> r.ArtifactView:
    return r.ArtifactView.model_validate(dict(row))


def run_event(row: RowMapping) -> r.RunEventView:
    return r.RunEventView.model_validate(dict(row))


def evidence_summary(pack: RowMapping) -> r.EvidenceSummary:
    return r.EvidenceSummary.model_validate(dict(pack))


def evidence_detail(pack: RowMapping) -> r.EvidencePackDetail:
    return r.EvidencePackDetail.model_validate(dict(pack))


def audit_entry(row: RowMapping) -> r.AuditEntry:
    return r.AuditEntry.model_validate(dict(row))


def pending_review(row: RowMapping) -> r.PendingReview:
    return r.PendingReview.model_validate(dict(row))
