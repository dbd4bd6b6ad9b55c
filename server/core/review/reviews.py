"""Reviews by agents or people: the pending reviews, and a reviewer's decision on a completed run's work.

Who may decide, and how many rounds of changes a task gets: gates.py. A decision the review policy makes
itself, at completion: policy.py."""

from __future__ import annotations

from datetime import datetime
from typing import Any, assert_never

from sqlalchemy import ColumnElement
from sqlalchemy.ext.asyncio import AsyncConnection

from server.core import results, views
from server.core.audit import AuditAction, audit_row, issue_moved
from server.core.briefings import versions
from server.core.integration import queue as integration
from server.core.models import Actor, Limits, check_text, new_id, parse_enum, parse_id
from server.core.review import gates
from server.core.service import Core, check_limit, encode_cursor, time_id_after
from server.db import queries
from server.db.records import EvidencePack, Run, Task
from server.errors import ErrorCode, JctError, not_found
from server.vocab import Decision, EntityKind, IssueStatus, ReviewState, RunStatus, TaskStatus


async def list_pending_reviews(core: Core, *, limit: int = 10, cursor: str | None = None) -> results.PendingReviews:
    check_limit(limit)
    after = time_id_after(cursor)
    async with core.db.read() as conn:
        rows = await queries.pending_reviews(conn, after, limit + 1)
    page = rows[:limit]
    next_cursor = None
    if len(rows) > limit:
        next_cursor = encode_cursor(page[-1]["created_at"].isoformat(), page[-1]["evidence_pack_id"])
    return results.PendingReviews(
        reviews=[views.pending_review(row) for row in page], count=len(page), next_cursor=next_cursor
    )


async def submit_review(
    core: Core,
    actor: Actor,
    evidence_pack_id: str,
    decision: str,
    reason: str,
    reviewer_name: str = "claude-code",
    override_reason: str | None = None,
) -> results.ReviewSubmitted:
    pack_id = parse_id(evidence_pack_id, "evidence_pack_id")
    choice = parse_enum(Decision, decision, "decision")
    check_text(reason, "reason", Limits.REASON)
    check_text(reviewer_name, "reviewer_name", Limits.NAME, single_line=True)
    if override_reason is not None:
        check_text(override_reason, "override_reason", Limits.REASON)
    gates.check_override(actor, choice.value, override_reason)
    ts = core.now()
    async with core.db.write() as conn:
        pack = await queries.get_evidence_pack(conn, pack_id)
        if pack is None:
            raise not_found(
                ErrorCode.EVIDENCE_PACK_NOT_FOUND,
                "Evidence pack",
                pack_id,
                "Use jct_list_pending_reviews to find packs awaiting a decision.",
            )
        run = await queries.get_run(conn, pack.run_id)
        task = await queries.get_task(conn, pack.task_id)
        assert run is not None  # foreign keys
        assert task is not None
        if core.separation_of_duties and run.actor_id == actor.actor_id and not actor.admin:
            raise JctError(
                ErrorCode.REVIEW_NOT_ALLOWED,
                "You executed this run, so you may not review it.",
                "Ask another reviewer (or an admin) to review it.",
            )
        gate = gates.gate_of(task.step, core.settings.max_review_rounds)
        last_run = (task.result or {}).get("run_id")
        overridable = pack.review_state == ReviewState.NEEDS_CHANGES and last_run == pack.run_id
        if override_reason is not None and overridable and gates.exhausted(task.error):
            return await _override_exhausted(
                core, conn, actor, pack, run, task, reason, reviewer_name, override_reason, ts
            )
        gates.check_reviewer(gate, actor, run.actor_id, override_reason)
        if not await queries.decide_evidence_pack(conn, pack_id, choice.value):
            raise JctError(
                ErrorCode.ALREADY_REVIEWED,
                f"Evidence pack {pack_id} is not awaiting review (state: {pack.review_state}).",
                "Nothing to do; use jct_list_pending_reviews for packs that still need a decision.",
            )
        review_id = new_id()
        reviewer = {"actor_kind": actor.actor_kind, "actor_id": actor.actor_id, "name": reviewer_name}
        await queries.insert_review_decision(
            conn,
            {
                "id": review_id,
                "evidence_pack_id": pack_id,
                "decision": choice.value,
                "reason": reason,
                "reviewer": reviewer,
                "created_at": ts,
            },
        )
        trace = task.trace_id
        submitted = {"decision": choice.value, "reason": reason}
        if override_reason is not None:
            submitted["override_reason"] = override_reason
        audit = [
            audit_row(actor, AuditAction.REVIEW_SUBMITTED, EntityKind.EVIDENCE_PACK, pack_id, None, submitted, trace)
        ]
        version = None
        completed = {"status": TaskStatus.COMPLETED}
        run_status: RunStatus
        issue_status: IssueStatus
        task_status: TaskStatus
        match choice:
            case Decision.APPROVED:
                run_status, issue_status, task_status = RunStatus.DONE, IssueStatus.DONE, TaskStatus(task.status)
                await integration.approve(core, conn, actor, task, run)
            case Decision.REJECTED:
                run_status, issue_status, task_status = RunStatus.FAILED, IssueStatus.FAILED, TaskStatus.FAILED
                await queries.update_task(
                    conn,
                    task.id,
                    {"status": TaskStatus.FAILED, "error": f"rejected in review: {reason}", "merge": None},
                    status_in=(TaskStatus.COMPLETED,),
                )
                after: dict[str, Any] = {"status": TaskStatus.FAILED, "reason": reason}
                audit.append(
                    audit_row(actor, AuditAction.TASK_REJECTED, EntityKind.TASK, task.id, completed, after, trace)
                )
            case Decision.NEEDS_CHANGES if gates.ends_task(task.review_rounds, gate):
                # The rounds ran out: the task fails, and what depends on it stays blocked (a mission blocker).
                run_status, issue_status = RunStatus.NEEDS_CHANGES, IssueStatus.FAILED
                task_status, values = gates.another_round(task.review_rounds, gate, reason)
                rounds = int(values["review_rounds"])
                await queries.update_task(conn, task.id, values, status_in=(TaskStatus.COMPLETED,))
                after = {"status": TaskStatus.FAILED, "reason": gates.EXHAUSTED, "rounds": rounds}
                audit.append(
                    audit_row(actor, AuditAction.TASK_FAILED, EntityKind.TASK, task.id, completed, after, trace)
                )
            case Decision.NEEDS_CHANGES:
                run_status, issue_status = RunStatus.NEEDS_CHANGES, IssueStatus.READY
                task_status, values = gates.another_round(task.review_rounds, gate, reason)
                rounds = int(values["review_rounds"])
                await queries.update_task(conn, task.id, values, status_in=(TaskStatus.COMPLETED,))
                after = {"status": TaskStatus.QUEUED, "reason": "review asked for changes", "rounds": rounds}
                audit.append(
                    audit_row(actor, AuditAction.TASK_REQUEUED, EntityKind.TASK, task.id, completed, after, trace)
                )
                if task.issue_id is not None:
                    entry = versions.feedback_round(
                        decision=choice.value,
                        reason=reason,
                        reviewer=actor,
                        name=reviewer_name,
                        run_id=run.id,
                        verdict=pack.verdict,
                    )
                    version = await versions.new_version(conn, task.issue_id, ts, feedback=entry)
            case _:
                assert_never(choice)
        await queries.update_run(conn, run.id, {"status": run_status}, status_in=(RunStatus.UNDER_REVIEW,))
        audit.append(
            audit_row(
                actor,
                AuditAction.run_moved(run_status),
                EntityKind.RUN,
                run.id,
                {"status": RunStatus.UNDER_REVIEW},
                {"status": run_status},
                trace,
            )
        )
        if task.issue_id is not None:
            await queries.update_issue(conn, task.issue_id, {"status": issue_status, "updated_at": ts})
            audit.append(issue_moved(actor, task.issue_id, issue_status, trace))
        await queries.insert_audit(conn, audit)
    return results.ReviewSubmitted(
        review_id=review_id,
        decision=choice.value,
        issue_status=issue_status if task.issue_id is not None else None,
        run_status=run_status,
        task_status=task_status,
        context_packet_version=version,
    )


async def _override_exhausted(
    core: Core,
    conn: AsyncConnection,
    actor: Actor,
    pack: EvidencePack,
    run: Run,
    task: Task,
    reason: str,
    reviewer_name: str,
    override_reason: str,
    ts: ColumnElement[datetime],
) -> results.ReviewSubmitted:
    """An admin approves the last work of a task whose rounds of changes ran out: the needs_changes decision
    becomes an approval (the audit log keeps both, and why), the task completes, and what waits for it may go."""
    if not await queries.override_evidence_pack(conn, pack.id):
        raise JctError(
            ErrorCode.ALREADY_REVIEWED,
            f"Evidence pack {pack.id} was decided again meanwhile.",
            "Read it with jct_get_evidence before deciding again.",
        )
    reviewer = {"actor_kind": actor.actor_kind, "actor_id": actor.actor_id, "name": reviewer_name}
    decision = {"decision": Decision.APPROVED, "reason": reason, "reviewer": reviewer, "created_at": ts}
    review_id = await queries.replace_review_decision(conn, pack.id, decision)
    failed = {"status": TaskStatus.FAILED}
    await queries.update_task(
        conn, task.id, {"status": TaskStatus.COMPLETED, "error": None}, status_in=(TaskStatus.FAILED,)
    )
    await queries.update_run(conn, run.id, {"status": RunStatus.DONE}, status_in=(RunStatus.NEEDS_CHANGES,))
    trace = task.trace_id
    overridden = {"decision": Decision.APPROVED, "reason": reason, "override_reason": override_reason}
    audit = [
        audit_row(actor, AuditAction.REVIEW_OVERRIDDEN, EntityKind.EVIDENCE_PACK, pack.id, None, overridden, trace),
        audit_row(
            actor,
            AuditAction.TASK_COMPLETED,
            EntityKind.TASK,
            task.id,
            failed,
            {"status": TaskStatus.COMPLETED, "override_reason": override_reason},
            trace,
        ),
        audit_row(
            actor,
            AuditAction.run_moved(RunStatus.DONE),
            EntityKind.RUN,
            run.id,
            {"status": RunStatus.NEEDS_CHANGES},
            {"status": RunStatus.DONE},
            trace,
        ),
    ]
    if task.issue_id is not None:
        await queries.update_issue(conn, task.issue_id, {"status": IssueStatus.DONE, "updated_at": ts})
        audit.append(issue_moved(actor, task.issue_id, IssueStatus.DONE, trace))
    await queries.insert_audit(conn, audit)
    await integration.approve(core, conn, actor, task, run)
    return results.ReviewSubmitted(
        review_id=review_id,
        decision=Decision.APPROVED,
        issue_status=IssueStatus.DONE if task.issue_id is not None else None,
        run_status=RunStatus.DONE,
        task_status=TaskStatus.COMPLETED,
    )
