"""The review policy (JCT_REVIEW_AUTO_APPROVE, JCT_AUTO_REWORK): what a completion writes once the prover has spoken
(the evidence pack, the run, the task and its issue), and whether the policy approves the work itself
(prover.auto_approves), sends it back to its agent as a round of changes (prover.sends_back), or leaves it to a
reviewer (reviews.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement

from server.core import results
from server.core import telemetry as usage
from server.core.audit import AuditAction, audit_row, issue_moved
from server.core.briefings import versions
from server.core.integration import queue as integration
from server.core.missions import plan
from server.core.models import Actor, new_id
from server.core.review import gates, prover
from server.core.service import Core
from server.db import changes
from server.db.records import CompletingTask, EvidencePack, ReviewDecision, Run
from server.vocab import Decision, EntityKind, IssueStatus, ReviewState, RunStatus, TaskStatus

POLICY = Actor(actor_id="review-policy", actor_kind="system", name="auto-approve")
# Who sends work back to its agent (JCT_AUTO_REWORK): a needs_changes round by the system.
REWORK = Actor(actor_id="auto-rework", actor_kind="system", name="automatic rework")


def settle_completion(
    core: Core,
    actor: Actor,
    *,
    task: CompletingTask,
    run: Run,
    evidence: prover.Evidence,
    success: bool,
    summary: str,
    outputs: Any,
    error_message: str | None,
    telemetry: dict[str, Any] | None,
    ts: ColumnElement[datetime],
    files_changed: dict[str, Any] | None = None,
) -> tuple[list[changes.Write], results.Completion]:
    """Record the evidence, end the run, and apply JCT_REVIEW_AUTO_APPROVE and JCT_AUTO_REWORK: the writes, made in
    the fenced change."""
    pack_id = new_id()
    gate = gates.gate_of(task.step, core.settings.max_review_rounds)
    requires_human = run.requires_human
    auto = prover.auto_approves(
        evidence.verdict,
        success=success,
        policy=core.settings.review_auto_approve,
        verdicts=core.settings.review_auto_approve_verdicts,
        requires_human=requires_human,
        review=gate.review,
    )
    # Automatic rework (JCT_AUTO_REWORK): work the agent can put right goes back to it, as a review round.
    to_fix = prover.sends_back(
        evidence,
        success=success and not auto,
        policy=core.settings.auto_rework,
        requires_human=requires_human,
        review=gate.review,
    )
    rounds = task.review_rounds + 1
    exhausted = bool(to_fix) and gates.ends_task(rounds - 1, gate)
    # An integrable repository's work goes to the merge queue: done when merged, not when approved.
    queued = (
        integration.values(
            core,
            task_id=task.id,
            run_id=run.id,
            target_repo=task.target_repo,
            target_ref=task.target_ref,
            files_changed=files_changed,
            base_commit=run.base_commit,
            ts=ts,
        )
        if success and not to_fix
        else None
    )
    run_status: RunStatus
    issue_status: IssueStatus
    task_status: TaskStatus
    review_state: ReviewState
    if not success:
        run_status, issue_status, task_status = RunStatus.FAILED, IssueStatus.FAILED, TaskStatus.FAILED
        review_state = ReviewState.NOT_REQUIRED
    elif auto:
        run_status, issue_status, task_status = RunStatus.DONE, IssueStatus.DONE, TaskStatus.COMPLETED
        review_state = ReviewState.APPROVED
    elif exhausted:
        run_status, issue_status, task_status = RunStatus.NEEDS_CHANGES, IssueStatus.FAILED, TaskStatus.FAILED
        review_state = ReviewState.NEEDS_CHANGES
    elif to_fix:
        run_status, issue_status, task_status = RunStatus.NEEDS_CHANGES, IssueStatus.READY, TaskStatus.QUEUED
        review_state = ReviewState.NEEDS_CHANGES
    else:
        run_status, issue_status, task_status = RunStatus.UNDER_REVIEW, IssueStatus.UNDER_REVIEW, TaskStatus.COMPLETED
        review_state = ReviewState.PENDING

    failure = {"error_message": error_message} if not success and error_message else None
    spent = usage.add(run.telemetry, telemetry) if telemetry else run.telemetry
    back = _SentBack(evidence, to_fix, rounds, gate) if to_fix else None
    task_values: dict[str, Any] = {
        "status": task_status,
        "active_run_id": None,
        "completed_at": ts,
        "result": {"summary": summary, "outputs": outputs, "run_id": run.id, "verdict": evidence.verdict},
        "error": error_message if not success else None,
        # It holds its touches until merged (or sent back).
        "merge": (integration.QUEUED if auto else integration.PENDING) if queued is not None else None,
    }
    if back is not None:
        task_values |= {"review_rounds": rounds, "error": back.error if exhausted else None}
        if not exhausted:
            task_values |= {"completed_at": None, "claimed_at": None}
    writes: list[changes.Write] = [
        changes.insert_evidence_pack(
            {
                "id": pack_id,
                "run_id": run.id,
                "task_id": task.id,
                "issue_id": task.issue_id,
                "verdict": evidence.verdict,
                "verdict_reason": evidence.verdict_reason,
                "checks": [asdict(check) for check in evidence.checks],
                "criteria_results": [
                    {"criterion": c.criterion, "status": c.status, "evidence": list(c.evidence), "note": c.note}
                    for c in evidence.criteria_results
                ],
                "evidence_collected": list(evidence.evidence_collected),
                "evidence_missing": list(evidence.evidence_missing),
                "prover_id": prover.PROVER_ID,
                "unexpected_files": list(evidence.unexpected_files) or None,
                "review_state": review_state,
                "created_at": ts,
            }
        ),
        changes.update_run(
            run.id,
            {
                "status": run_status,
                "ended_at": ts,
                "summary": summary,
                "outputs": outputs,
                "telemetry": spent,
                **usage.run_columns(spent),
                "failure": failure,
                "files_changed": files_changed,
            },
            status_in=(RunStatus.RUNNING,),
        ),
        # Cancelled (or otherwise ended) while this completion waited for its row: nothing is recorded.
        changes.update_task(task.id, task_values, status_in=(TaskStatus.RUNNING,)),
    ]
    trace = task.trace_id
    if telemetry and (rows := usage.totals_rows(telemetry)):
        writes.append(changes.insert_telemetry_deltas(rows))
    if telemetry and task.mission_id:
        writes.append(changes.Spend(task.mission_id, *usage.spend(telemetry)))
    running = {"status": RunStatus.RUNNING}
    audit = [
        audit_row(
            actor,
            AuditAction.TASK_COMPLETED if success else AuditAction.TASK_FAILED,
            EntityKind.TASK,
            task.id,
            running,
            {"status": TaskStatus.COMPLETED if back is not None else task_status, "run_id": run.id},
            trace,
        ),
        audit_row(
            actor, AuditAction.run_moved(run_status), EntityKind.RUN, run.id, running, {"status": run_status}, trace
        ),
        audit_row(
            POLICY,
            AuditAction.EVIDENCE_CREATED,
            EntityKind.EVIDENCE_PACK,
            pack_id,
            None,
            {"run_id": run.id, "verdict": evidence.verdict, "review_state": review_state},
            trace,
        ),
    ]
    if task.issue_id is not None:
        writes.append(changes.update_issue(task.issue_id, {"status": issue_status, "updated_at": ts}))
        audit.append(issue_moved(actor, task.issue_id, issue_status, trace))
    review_id = None
    if auto:
        review_id = new_id()
        reason = f"auto-approved: verdict {evidence.verdict} is in JCT_REVIEW_AUTO_APPROVE_VERDICTS"
        writes.append(
            changes.insert_review_decision(
                {
                    "id": review_id,
                    "evidence_pack_id": pack_id,
                    "decision": Decision.APPROVED,
                    "reason": reason,
                    "reviewer": POLICY.executor(),
                    "created_at": ts,
                }
            )
        )
        audit.append(
            audit_row(
                POLICY,
                AuditAction.REVIEW_SUBMITTED,
                EntityKind.EVIDENCE_PACK,
                pack_id,
                None,
                {"decision": Decision.APPROVED},
                trace,
            )
        )
    if back is not None:
        review_id = new_id()
        writes.append(
            changes.insert_review_decision(
                {
                    "id": review_id,
                    "evidence_pack_id": pack_id,
                    "decision": Decision.NEEDS_CHANGES,
                    "reason": back.reason,
                    "reviewer": REWORK.executor(),
                    "created_at": ts,
                }
            )
        )
        audit.extend(back.audit(task.id, pack_id, trace, exhausted=exhausted))
        if task.issue_id is not None and not exhausted:
            writes.append(versions.feedback_write(task.issue_id, ts, back.feedback(run.id)))
    if auto and queued is not None:
        writes.append(changes.insert_integration(queued))
        audit.append(integration.queued_audit(POLICY, run.id, queued, trace))
    writes.append(changes.insert_audit(audit))
    if auto and queued is None:
        # What waits for this task may go now (its mission's dependents and next phase).
        writes.append(plan.approval(POLICY, task.id))

    if not success:
        outcome = results.ReviewOutcome(status="not_required", message="The run failed; there is nothing to review.")
    elif auto:
        merge = "; queued to be merged into its target branch" if queued is not None else ""
        outcome = results.ReviewOutcome(status="auto_approved", review_id=review_id, message=merge[2:] or None)
    elif back is not None:
        outcome = results.ReviewOutcome(status="needs_changes", review_id=review_id, message=back.told(exhausted))
    else:
        outcome = results.ReviewOutcome(
            status="awaiting_manual_review", message="Task completed but requires manual review before approval."
        )
    return writes, results.Completion(
        task_id=task.id,
        task_status=task_status,
        run_id=run.id,
        run_status=run_status,
        evidence_pack=results.EvidenceSummary(
            id=pack_id, verdict=evidence.verdict, verdict_reason=evidence.verdict_reason
        ),
        review=outcome,
    )


def outcome_of(pack: EvidencePack, decision: ReviewDecision | None) -> results.ReviewOutcome:
    state = pack.review_state
    if state == ReviewState.NOT_REQUIRED:
        return results.ReviewOutcome(status="not_required", message="The run failed; there is nothing to review.")
    if state == ReviewState.PENDING or decision is None:
        return results.ReviewOutcome(status="awaiting_manual_review", message="Awaiting a review decision.")
    if (decision.reviewer or {}).get("actor_id") == POLICY.actor_id:
        return results.ReviewOutcome(status="auto_approved", review_id=decision.id)
    return results.ReviewOutcome(status=decision.decision, review_id=decision.id, message=decision.reason)


@dataclass(frozen=True)
class _SentBack:
    """A run whose verdict is held back only by checks its agent can fix (prover.sends_back): a needs_changes round
    by REWORK, the failed checks its feedback; past the round cap the task fails (gates.EXHAUSTED)."""

    evidence: prover.Evidence
    checks: tuple[prover.Check, ...]
    rounds: int
    gate: gates.Gate

    @property
    def names(self) -> str:
        return ", ".join(check.name for check in self.checks)

    @property
    def reason(self) -> str:
        lines = [f"- {check.name}: {check.detail}" for check in self.checks]
        lines += [f"- missing: {item}" for item in self.evidence.evidence_missing]
        return (
            f"The prover sent your work back (verdict {self.evidence.verdict}): fix what these checks found, "
            "report what shows it (artifacts, criteria_results citing them), then complete again.\n" + "\n".join(lines)
        )

    @property
    def error(self) -> str:
        return gates.exhausted_error(self.rounds, self.gate, f"the prover's checks still fail: {self.names}")

    def feedback(self, run_id: str) -> dict[str, Any]:
        return versions.feedback_round(
            decision=Decision.NEEDS_CHANGES,
            reason=self.reason,
            reviewer=REWORK,
            run_id=run_id,
            verdict=self.evidence.verdict,
        )

    def audit(self, task_id: str, pack_id: str, trace: str | None, *, exhausted: bool) -> list[dict[str, Any]]:
        submitted = {"decision": Decision.NEEDS_CHANGES, "reason": self.reason}
        completed = {"status": TaskStatus.COMPLETED}
        after: dict[str, Any]
        if exhausted:
            action = AuditAction.TASK_FAILED
            after = {"status": TaskStatus.FAILED, "reason": gates.EXHAUSTED, "rounds": self.rounds}
        else:
            action = AuditAction.TASK_REQUEUED
            after = {"status": TaskStatus.QUEUED, "reason": f"sent back: {self.names}", "rounds": self.rounds}
        return [
            audit_row(REWORK, AuditAction.REVIEW_SUBMITTED, EntityKind.EVIDENCE_PACK, pack_id, None, submitted, trace),
            audit_row(REWORK, action, EntityKind.TASK, task_id, completed, after, trace),
        ]

    def told(self, exhausted: bool) -> str:
        if exhausted:
            return (
                f"The prover found what you could fix ({self.names}), but this was round {self.rounds} of "
                f"{self.gate.max_rounds}, the last: the task failed ({gates.EXHAUSTED}); a person decides now."
            )
        return (
            f"Sent back to the queue: the prover found what you can fix ({self.names}). Round {self.rounds} of "
            f"{self.gate.max_rounds}; the feedback is in the task's briefing. Claim it again (jct_claim_task) to "
            "fix it, or leave it to another agent."
        )
