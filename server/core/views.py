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
    return r.TaskSummary(
        task_id=task["id"],
        operation=task["operation"],
        objective=task["objective"],
        target_repo=task["target_repo"],
        target_ref=task["target_ref"],
        status=task["status"],
        priority=task["priority"],
        time_budget_seconds=task["time_budget_seconds"],
        queued_at=task["queued_at"],
        cwom_issue_id=task["issue_id"],
    )


def task_detail(task: RowMapping) -> r.TaskDetail:
    return r.TaskDetail(
        task_id=task["id"],
        operation=task["operation"],
        objective=task["objective"],
        target=target(task),
        priority=task["priority"],
        time_budget_seconds=task["time_budget_seconds"],
        status=task["status"],
        attempts=task["attempts"],
        max_attempts=task["max_attempts"],
        idempotency_key=task["idempotency_key"],
        trace_id=task["trace_id"],
        cwom_issue_id=task["issue_id"],
        requested_by=task["requested_by"],
        active_run_id=task["active_run_id"],
        queued_at=task["queued_at"],
        claimed_at=task["claimed_at"],
        completed_at=task["completed_at"],
        result=task["result"],
        error=task["error"],
    )


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
    return r.ContextPacket(
        id=packet["id"],
        version=packet["version"],
        summary=packet["summary"],
        prior_art=packet["prior_art"],
        files_of_interest=packet["files_of_interest"],
        acceptance_criteria=packet["acceptance_criteria"],
        data=packet["data"],
        review_feedback=packet["review_feedback"] or [],
    )


def issue(row: RowMapping) -> r.IssueView:
    return r.IssueView(
        id=row["id"],
        title=row["title"],
        type=row["type"],
        priority=row["priority"],
        status=row["status"],
        acceptance_criteria=row["acceptance_criteria"],
    )


def run_summary(run: RowMapping) -> r.RunSummary:
    return r.RunSummary(
        run_id=run["id"],
        status=run["status"],
        attempt=run["attempt"],
        executor=run["executor"],
        started_at=run["started_at"],
        ended_at=run["ended_at"],
        lease_expires_at=run["lease_expires_at"],
    )


def run_detail(run: RowMapping) -> r.RunDetail:
    return r.RunDetail(
        run_id=run["id"],
        task_id=run["task_id"],
        cwom_issue_id=run["issue_id"],
        mode=run["mode"],
        status=run["status"],
        attempt=run["attempt"],
        executor=run["executor"],
        started_at=run["started_at"],
        ended_at=run["ended_at"],
        lease_expires_at=run["lease_expires_at"],
        summary=run["summary"],
        outputs=run["outputs"],
        telemetry=run["telemetry"],
        failure=run["failure"],
        artifact_root_uri=run["artifact_root_uri"],
    )


def artifact(row: RowMapping) -> r.ArtifactView:
    return r.ArtifactView(
        artifact_id=row["id"],
        run_id=row["run_id"],
        task_id=row["task_id"],
        title=row["title"],
        type=row["type"],
        media_type=row["media_type"],
        uri=row["uri"],
        size_bytes=row["size_bytes"],
        sha256=row["sha256"],
        created_at=row["created_at"],
    )


def run_event(row: RowMapping) -> r.RunEventView:
    return r.RunEventView(
        id=row["id"], kind=row["kind"], message=row["message"], progress=row["progress"], created_at=row["created_at"]
    )


def evidence_summary(pack: RowMapping) -> r.EvidenceSummary:
    return r.EvidenceSummary(id=pack["id"], verdict=pack["verdict"], verdict_reason=pack["verdict_reason"])


def evidence_detail(pack: RowMapping) -> r.EvidencePackDetail:
    return r.EvidencePackDetail(
        id=pack["id"],
        run_id=pack["run_id"],
        task_id=pack["task_id"],
        verdict=pack["verdict"],
        verdict_reason=pack["verdict_reason"],
        checks=pack["checks"],
        criteria_results=pack["criteria_results"],
        evidence_collected=pack["evidence_collected"],
        evidence_missing=pack["evidence_missing"],
        prover_id=pack["prover_id"],
        review_state=pack["review_state"],
        created_at=pack["created_at"],
    )


def audit_entry(row: RowMapping) -> r.AuditEntry:
    return r.AuditEntry(
        id=row["id"],
        ts=row["ts"],
        actor_kind=row["actor_kind"],
        actor_id=row["actor_id"],
        action=row["action"],
        entity_kind=row["entity_kind"],
        entity_id=row["entity_id"],
        before=row["before"],
        after=row["after"],
        trace_id=row["trace_id"],
    )


def pending_review(row: RowMapping) -> r.PendingReview:
    return r.PendingReview(
        evidence_pack_id=row["evidence_pack_id"],
        run_id=row["run_id"],
        task_id=row["task_id"],
        cwom_issue_id=row["issue_id"],
        objective=row["objective"],
        verdict=row["verdict"],
        verdict_reason=row["verdict_reason"],
        summary=row["summary"],
        executor=row["executor"],
        created_at=row["created_at"],
    )
