"""Automatic rework (JCT_AUTO_REWORK, DESIGN section 17): a verdict held back only by checks the agent can fix
sends the task back at once, as a needs_changes round by the system, the failed checks in its next briefing;
within the round cap. Failed runs, blockers for a person, failing tests and overrun budgets are not sent back."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from server.config import Settings
from server.core import results
from server.core.claims import queue, work
from server.core.models import Actor
from server.core.review import completion, reviews
from server.core.service import Core
from server.db import queries, tables
from tests.core.helpers import ALICE, BOB, PATCH, built_core, count, enqueue, satisfied_by

pytestmark = pytest.mark.anyio

SettingsFactory = Callable[..., Settings]
OUTSIDE = PATCH.replace("src/app.py", "docs/notes.md")
FAILING_LOG = "===== 1 failed, 3 passed in 0.20s ====="


async def finish(
    core: Core, task_id: str, *, actor: Actor = ALICE, cite: bool = False, **how: Any
) -> results.Completion:
    """Claim the task, report a patch (`patch`, default one inside src/), complete it; `cite`: the criterion is
    satisfied citing the patch (else it is left unverified)."""
    await queue.claim_task(core, actor, task_id)
    patch = await work.report_artifact(
        core, actor, task_id, title="Patch", artifact_type="code_patch", content=how.pop("patch", PATCH)
    )
    for log in how.pop("logs", ()):
        await work.report_artifact(core, actor, task_id, title="Tests", artifact_type="log", content=log)
    claims = satisfied_by(patch.artifact_id) if cite else []
    fields: dict[str, Any] = {"success": True, "summary": "done", "criteria_results": claims}
    return await completion.complete_task(core, actor, task_id, **(fields | how))


async def state(core: Core, done: results.Completion) -> dict[str, Any]:
    async with core.db.read() as conn:
        task = await queries.get_task(conn, done.task_id)
        run = await queries.get_run(conn, done.run_id)
        pack = await queries.get_evidence_pack(conn, done.evidence_pack.id)
        assert task is not None
        assert run is not None
        assert pack is not None
        assert task.issue_id is not None
        issue = await queries.get_issue(conn, task.issue_id)
        decision = await queries.review_decision_for_pack(conn, pack.id)
    assert issue is not None
    return {
        "task": task.status,
        "run": run.status,
        "issue": issue["status"],
        "pack": pack.review_state,
        "rounds": task.review_rounds,
        "error": task.error,
        "decision": None if decision is None else (decision.decision, (decision.reviewer or {})["actor_id"]),
    }


async def audit_actions(core: Core, entity_id: str) -> list[tuple[str, str]]:
    log = tables.audit_log
    query = select(log.c.action, log.c.actor_id).where(log.c.entity_id == entity_id).order_by(log.c.id)
    async with core.db.read() as conn:
        return [(row.action, row.actor_id) for row in await conn.execute(query)]


async def test_an_unverified_criterion_sends_the_task_back_with_the_checks_as_feedback(core: Core) -> None:
    task_id = await enqueue(core, target_path="src")

    done = await finish(core, task_id)

    assert (done.evidence_pack.verdict, done.task_status, done.run_status) == ("partial", "queued", "needs_changes")
    assert done.review.status == "needs_changes"
    assert done.review.review_id is not None
    assert done.review.message is not None
    assert "(criteria)" in done.review.message
    assert "Round 1 of 3" in done.review.message
    assert await state(core, done) == {
        "task": "queued",
        "run": "needs_changes",
        "issue": "ready",
        "pack": "needs_changes",
        "rounds": 1,
        "error": None,
        "decision": ("needs_changes", "auto-rework"),
    }
    assert (await reviews.list_pending_reviews(core)).count == 0
    # One transaction's audit rows: their order among themselves is not promised on PostgreSQL.
    assert sorted(await audit_actions(core, task_id)) == [
        ("task.claimed", "alice"),
        ("task.completed", "alice"),
        ("task.enqueued", "root"),
        ("task.requeued", "auto-rework"),
    ]

    again = await queue.claim_next(core, BOB)

    assert (again.task_id, again.attempt) == (task_id, 2)
    assert again.context_packet is not None
    assert again.context_packet.version == 2
    [feedback] = again.context_packet.review_feedback
    assert (feedback.decision, feedback.reviewer, feedback.run_id, feedback.verdict) == (
        "needs_changes",
        "auto-rework",
        done.run_id,
        "partial",
    )
    assert "- criteria: 1 of 1 unverified" in feedback.reason
    assert "- missing: evidence for criterion 0: Email is validated" in feedback.reason


async def test_the_reworked_task_done_right_is_approved(core: Core) -> None:
    task_id = await enqueue(core, target_path="src")
    await finish(core, task_id)

    done = await finish(core, task_id, actor=BOB, cite=True)

    assert (done.evidence_pack.verdict, done.review.status, done.task_status) == ("pass", "auto_approved", "completed")
    assert (await state(core, done))["rounds"] == 1


async def test_a_change_outside_target_path_fails_and_goes_back_naming_the_files(core: Core) -> None:
    task_id = await enqueue(core, target_path="src")

    done = await finish(core, task_id, patch=OUTSIDE, cite=True)

    assert (done.evidence_pack.verdict, done.task_status) == ("fail", "queued")
    assert done.review.message is not None
    assert "(scope)" in done.review.message
    claim = await queue.claim_task(core, ALICE, task_id)
    assert claim.context_packet is not None
    assert "- scope: 1 file outside src/: docs/notes.md" in claim.context_packet.review_feedback[-1].reason


async def test_a_retried_completion_reports_the_round_it_made(core: Core) -> None:
    task_id = await enqueue(core)
    done = await finish(core, task_id)

    again = await completion.complete_task(core, ALICE, task_id, success=True, summary="done", run_id=done.run_id)

    assert again.duplicate is True
    assert (again.review.status, again.review.review_id) == ("needs_changes", done.review.review_id)
    assert (again.task_status, again.run_status) == ("queued", "needs_changes")
    assert await count(core, "context_packets") == 2


async def test_the_last_round_fails_the_task_with_quality_gate_exhausted(make_settings: SettingsFactory) -> None:
    async with built_core(make_settings(max_review_rounds=2)) as core:
        task_id = await enqueue(core)
        first = await finish(core, task_id)
        assert first.task_status == "queued"

        last = await finish(core, task_id, actor=BOB)

        assert (last.task_status, last.run_status, last.review.status) == ("failed", "needs_changes", "needs_changes")
        assert last.review.message is not None
        assert "quality_gate_exhausted" in last.review.message
        after = await state(core, last)
        assert (after["task"], after["issue"], after["pack"], after["rounds"]) == (
            "failed",
            "failed",
            "needs_changes",
            2,
        )
        assert after["error"].startswith(
            "quality_gate_exhausted: review asked for changes 2 times, round 2 of 2: "
            "the prover's checks still fail: criteria"
        )
        assert await count(core, "context_packets") == 2  # no briefing for a task nobody will claim
        assert (await queue.claim_next(core, ALICE)).claimed is False


async def test_an_admin_may_still_approve_the_last_work_of_an_exhausted_task(make_settings: SettingsFactory) -> None:
    admin = Actor(actor_id="root", actor_kind="human", admin=True)
    async with built_core(make_settings(max_review_rounds=1)) as core:
        task_id = await enqueue(core)
        done = await finish(core, task_id)
        assert done.task_status == "failed"

        decided = await reviews.submit_review(
            core, admin, done.evidence_pack.id, "approved", "Fine as it is", override_reason="criterion checked by hand"
        )

        assert (decided.task_status, decided.run_status) == ("completed", "done")


async def test_a_blocker_for_a_person_keeps_the_work_for_a_reviewer(core: Core) -> None:
    task_id = await enqueue(core)
    await queue.claim_task(core, ALICE, task_id)
    await work.report_progress(
        core, ALICE, task_id, message="Need the production password", kind="blocker", data={"requires_human": True}
    )

    done = await completion.complete_task(core, ALICE, task_id, success=True, summary="stuck")

    assert (done.evidence_pack.verdict, done.review.status, done.task_status) == (
        "partial",
        "awaiting_manual_review",
        "completed",
    )
    assert [p.task_id for p in (await reviews.list_pending_reviews(core)).reviews] == [task_id]


async def test_a_failed_run_is_not_sent_back(core: Core) -> None:
    task_id = await enqueue(core)

    done = await finish(core, task_id, success=False, error_message="cannot build")

    assert (done.review.status, done.task_status, done.run_status) == ("not_required", "failed", "failed")
    assert await count(core, "context_packets") == 1


async def test_failing_tests_wait_for_a_reviewer(core: Core) -> None:
    """A failing test log is no reason to send work back by itself (a reproduce step's log fails by design)."""
    task_id = await enqueue(core, target_path="src")

    done = await finish(core, task_id, cite=True, logs=[FAILING_LOG])

    assert (done.evidence_pack.verdict, done.review.status, done.task_status) == (
        "fail",
        "awaiting_manual_review",
        "completed",
    )


async def test_failing_tests_beside_a_fixable_check_wait_for_a_reviewer(core: Core) -> None:
    task_id = await enqueue(core, target_path="src")

    done = await finish(core, task_id, patch=OUTSIDE, cite=True, logs=[FAILING_LOG])

    assert (done.evidence_pack.verdict, done.review.status) == ("fail", "awaiting_manual_review")


async def test_an_overrun_time_budget_waits_for_a_reviewer(core: Core) -> None:
    task_id = await enqueue(core, target_path="src", time_budget_seconds=60)
    await queue.claim_task(core, ALICE, task_id)
    patch = await work.report_artifact(core, ALICE, task_id, title="Patch", artifact_type="code_patch", content=PATCH)
    async with core.db.write() as conn:
        runs = tables.runs
        started = (await conn.execute(select(runs.c.started_at).where(runs.c.task_id == task_id))).scalar_one()
        await conn.execute(
            update(runs).where(runs.c.task_id == task_id).values(started_at=started - timedelta(minutes=5))
        )

    done = await completion.complete_task(
        core, ALICE, task_id, success=True, summary="slow", criteria_results=satisfied_by(patch.artifact_id)
    )

    assert (done.evidence_pack.verdict, done.review.status) == ("partial", "awaiting_manual_review")


async def test_with_the_setting_off_a_partial_verdict_waits_for_a_reviewer(make_settings: SettingsFactory) -> None:
    async with built_core(make_settings(auto_rework=False)) as core:
        task_id = await enqueue(core)

        done = await finish(core, task_id)

        assert (done.evidence_pack.verdict, done.review.status, done.task_status) == (
            "partial",
            "awaiting_manual_review",
            "completed",
        )
        assert await count(core, "review_decisions") == 0


async def test_a_verdict_the_policy_approves_is_not_sent_back(make_settings: SettingsFactory) -> None:
    async with built_core(make_settings(review_auto_approve_verdicts=["pass", "partial"])) as core:
        done = await finish(core, await enqueue(core))

        assert (done.evidence_pack.verdict, done.review.status) == ("partial", "auto_approved")
