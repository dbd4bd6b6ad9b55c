"""The whole lifecycle through the service layer: enqueue, claim, report, complete, reviews."""

from __future__ import annotations

import pytest

from server.core.claims import queue, work
from server.core.operators import observe
from server.core.review import completion, reviews
from server.core.service import Core
from server.errors import ErrorCode, JctError
from tests.core.helpers import ALICE, BOB, PATCH, count, enqueue, satisfied_by

pytestmark = pytest.mark.anyio


async def test_happy_path_ends_auto_approved_with_a_passing_evidence_pack(core: Core) -> None:
    task_id = await enqueue(core)
    claim = await queue.claim_task(core, ALICE, task_id)
    assert claim.context_packet is not None
    assert claim.context_packet.acceptance_criteria == ["Email is validated"]
    patch = await work.report_artifact(
        core, ALICE, task_id, title="Code changes", artifact_type="code_patch", content=PATCH
    )
    await work.report_artifact(
        core, ALICE, task_id, title="Tests", artifact_type="log", content="==== 3 passed in 0.1s ===="
    )
    done = await completion.complete_task(
        core, ALICE, task_id, success=True, summary="Validated emails", criteria_results=satisfied_by(patch.artifact_id)
    )
    assert (done.task_status, done.run_status, done.evidence_pack.verdict) == ("completed", "done", "pass")
    assert done.review.status == "auto_approved"
    task = await observe.get_task(core, task_id)
    assert task.task.status == "completed"
    trail = await observe.get_audit_trail(core, "Task", task_id)
    assert [e.action for e in trail.entries] == ["task.enqueued", "task.claimed", "task.completed"]


async def test_failure_path_ends_failed_with_a_failing_verdict(core: Core) -> None:
    task_id = await enqueue(core)
    await queue.claim_task(core, ALICE, task_id)
    done = await completion.complete_task(
        core, ALICE, task_id, success=False, summary="Could not", error_message="npm broke"
    )
    assert (done.task_status, done.run_status, done.evidence_pack.verdict) == ("failed", "failed", "fail")
    assert done.review.status == "not_required"


async def test_retried_complete_returns_the_recorded_outcome_and_proves_once(core: Core) -> None:
    task_id = await enqueue(core)
    await queue.claim_task(core, ALICE, task_id)
    first = await completion.complete_task(core, ALICE, task_id, success=True, summary="done")
    again = await completion.complete_task(core, ALICE, task_id, success=True, summary="done")
    assert again.duplicate is True
    assert again.evidence_pack.id == first.evidence_pack.id
    assert await count(core, "evidence_packs") == 1


async def test_someone_elses_claim_cannot_be_completed(core: Core) -> None:
    task_id = await enqueue(core)
    await queue.claim_task(core, ALICE, task_id)
    with pytest.raises(JctError) as err:
        await completion.complete_task(core, BOB, task_id, success=True, summary="mine now")
    assert err.value.code is ErrorCode.NOT_CLAIMANT


async def test_needs_changes_requeues_with_a_new_briefing_carrying_the_feedback(core: Core) -> None:
    core.settings.review_auto_approve = False
    core.settings.auto_rework = False
    task_id = await enqueue(core)
    await queue.claim_task(core, ALICE, task_id)
    done = await completion.complete_task(core, ALICE, task_id, success=True, summary="done")
    assert done.review.status == "awaiting_manual_review"
    pending = await reviews.list_pending_reviews(core)
    assert [p.task_id for p in pending.reviews] == [task_id]
    decided = await reviews.submit_review(core, BOB, done.evidence_pack.id, "needs_changes", "Add tests")
    assert (decided.task_status, decided.run_status, decided.context_packet_version) == ("queued", "needs_changes", 2)
    again = await queue.claim_next(core, BOB)
    assert again.task_id == task_id
    assert again.context_packet is not None
    assert again.context_packet.version == 2
    assert [f.reason for f in again.context_packet.review_feedback] == ["Add tests"]
