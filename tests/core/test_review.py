"""Review: manual decisions and what each does to the run, issue and task; the auto-approve policy;
separation of duties when tokens are on."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from server.config import Settings
from server.core import results
from server.core.claims import queue, work
from server.core.models import Actor
from server.core.review import completion, reviews
from server.core.service import Core
from server.db import queries
from server.errors import ErrorCode, JctError
from tests.core.helpers import ALICE, BOB, PATCH, built_core, count, enqueue, satisfied_by, snapshot

pytestmark = pytest.mark.anyio

SettingsFactory = Callable[..., Settings]


@pytest.fixture
async def manual(make_settings: SettingsFactory) -> AsyncIterator[Core]:
    """A Core whose completions always wait for a reviewer."""
    async with built_core(make_settings(review_auto_approve=False)) as built:
        yield built


async def complete(core: Core, *, verdict: str = "pass", actor: Actor = ALICE) -> results.Completion:
    """Enqueue, claim and complete one task so that the prover gives `verdict` ("pass" or "partial")."""
    task_id = await enqueue(core)
    await queue.claim_task(core, actor, task_id)
    patch = await work.report_artifact(core, actor, task_id, title="Patch", artifact_type="code_patch", content=PATCH)
    claims = satisfied_by(patch.artifact_id) if verdict == "pass" else []
    done = await completion.complete_task(core, actor, task_id, success=True, summary="done", criteria_results=claims)
    assert done.evidence_pack.verdict == verdict
    return done


async def statuses(core: Core, done: results.Completion) -> tuple[str, str, str]:
    """(run, issue, task) status, read back from the database."""
    async with core.db.read() as conn:
        task = await queries.get_task(conn, done.task_id)
        run = await queries.get_run(conn, done.run_id)
        assert task is not None
        assert run is not None
        assert task.issue_id is not None
        issue = await queries.get_issue(conn, task.issue_id)
        assert issue is not None
    return run.status, issue["status"], task.status


# --- manual decisions --------------------------------------------------------------------


async def test_without_auto_approve_a_passing_run_waits_for_review(manual: Core) -> None:
    done = await complete(manual)

    assert done.review.status == "awaiting_manual_review"
    assert await statuses(manual, done) == ("under_review", "under_review", "completed")
    pending = await reviews.list_pending_reviews(manual)
    assert [p.evidence_pack_id for p in pending.reviews] == [done.evidence_pack.id]


async def test_approving_finishes_the_run_the_issue_and_the_task(manual: Core) -> None:
    done = await complete(manual)

    decided = await reviews.submit_review(manual, BOB, done.evidence_pack.id, "approved", "Looks right")

    assert (decided.run_status, decided.issue_status, decided.task_status) == ("done", "done", "completed")
    assert await statuses(manual, done) == ("done", "done", "completed")
    assert (await reviews.list_pending_reviews(manual)).count == 0
    assert await count(manual, "review_decisions", evidence_pack_id=done.evidence_pack.id, decision="approved") == 1


async def test_rejecting_fails_the_run_the_issue_and_the_task(manual: Core) -> None:
    done = await complete(manual)

    decided = await reviews.submit_review(manual, BOB, done.evidence_pack.id, "rejected", "Wrong approach")

    assert (decided.run_status, decided.issue_status, decided.task_status) == ("failed", "failed", "failed")
    assert await statuses(manual, done) == ("failed", "failed", "failed")
    assert await count(manual, "audit_log", entity_id=done.task_id, action="task.rejected") == 1
    assert (await queue.claim_next(manual, BOB)).claimed is False


async def test_needs_changes_requeues_the_task_with_a_second_briefing_carrying_the_feedback(manual: Core) -> None:
    done = await complete(manual)

    decided = await reviews.submit_review(manual, BOB, done.evidence_pack.id, "needs_changes", "Add tests")

    assert (decided.run_status, decided.issue_status, decided.task_status) == ("needs_changes", "ready", "queued")
    assert decided.context_packet_version == 2
    assert await statuses(manual, done) == ("needs_changes", "ready", "queued")
    again = await queue.claim_next(manual, ALICE)
    assert (again.task_id, again.attempt) == (done.task_id, 2)  # the second run of the task
    assert again.context_packet is not None
    assert again.context_packet.version == 2
    assert again.context_packet.acceptance_criteria == ["Email is validated"]
    [feedback] = again.context_packet.review_feedback
    assert (feedback.decision, feedback.reason, feedback.run_id) == ("needs_changes", "Add tests", done.run_id)
    assert feedback.verdict == "pass"
    assert (feedback.reviewer, feedback.reviewer_name) == ("bob", "claude-code")  # the principal, then what it said


async def test_a_pack_can_be_decided_only_once(manual: Core) -> None:
    done = await complete(manual)
    await reviews.submit_review(manual, BOB, done.evidence_pack.id, "approved", "Fine")
    rows = await snapshot(manual)

    with pytest.raises(JctError) as err:
        await reviews.submit_review(manual, BOB, done.evidence_pack.id, "rejected", "Changed my mind")

    assert err.value.code is ErrorCode.ALREADY_REVIEWED
    assert await snapshot(manual) == rows
    assert await statuses(manual, done) == ("done", "done", "completed")


async def test_an_auto_approved_pack_cannot_be_reviewed_again(core: Core) -> None:
    done = await complete(core)
    assert done.review.status == "auto_approved"

    with pytest.raises(JctError) as err:
        await reviews.submit_review(core, BOB, done.evidence_pack.id, "rejected", "No")

    assert err.value.code is ErrorCode.ALREADY_REVIEWED


async def test_reviewing_a_missing_pack_is_evidence_pack_not_found(manual: Core) -> None:
    await complete(manual)
    rows = await snapshot(manual)

    with pytest.raises(JctError) as err:
        await reviews.submit_review(manual, BOB, str(uuid.uuid4()), "approved", "Fine")

    assert err.value.code is ErrorCode.EVIDENCE_PACK_NOT_FOUND
    assert await snapshot(manual) == rows


@pytest.mark.parametrize(
    ("pack_id", "decision", "reason"),
    [
        (None, "approve", "Fine"),
        (None, "APPROVED", "Fine"),
        (None, "", "Fine"),
        (None, "approved", ""),
        (None, "approved", "x" * 4_001),
        ("not-a-uuid", "approved", "Fine"),
    ],
    ids=["approve", "uppercase", "empty decision", "empty reason", "oversized reason", "non-uuid pack"],
)
async def test_a_malformed_review_is_invalid_argument_and_changes_nothing(
    manual: Core, pack_id: str | None, decision: str, reason: str
) -> None:
    done = await complete(manual)
    rows = await snapshot(manual)

    with pytest.raises(JctError) as err:
        await reviews.submit_review(manual, BOB, pack_id or done.evidence_pack.id, decision, reason)

    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    assert await snapshot(manual) == rows
    assert await statuses(manual, done) == ("under_review", "under_review", "completed")


# --- the auto-approve policy -------------------------------------------------------------


async def test_without_auto_rework_a_partial_verdict_waits_for_review(core: Core) -> None:
    core.settings.auto_rework = False
    done = await complete(core, verdict="partial")

    assert done.review.status == "awaiting_manual_review"
    assert await statuses(core, done) == ("under_review", "under_review", "completed")


async def test_auto_approve_verdicts_can_include_partial(make_settings: SettingsFactory) -> None:
    core = Core.build(make_settings(review_auto_approve_verdicts=["pass", "partial"]))
    try:
        done = await complete(core, verdict="partial")

        assert done.review.status == "auto_approved"
        assert await statuses(core, done) == ("done", "done", "completed")
        assert (await reviews.list_pending_reviews(core)).count == 0
    finally:
        await core.db.dispose()


async def test_a_failed_run_is_never_auto_approved(make_settings: SettingsFactory) -> None:
    core = Core.build(make_settings(review_auto_approve_verdicts=["pass", "partial", "fail"]))
    try:
        task_id = await enqueue(core)
        await queue.claim_task(core, ALICE, task_id)
        done = await completion.complete_task(
            core, ALICE, task_id, success=False, summary="broke", error_message="boom"
        )

        assert done.review.status == "not_required"
        assert await statuses(core, done) == ("failed", "failed", "failed")
        assert await count(core, "review_decisions") == 0
    finally:
        await core.db.dispose()


# --- separation of duties ----------------------------------------------------------------


@pytest.fixture
async def with_tokens(make_settings: SettingsFactory) -> AsyncIterator[Core]:
    async with built_core(make_settings(auth="token", review_auto_approve=False)) as built:
        yield built


async def test_with_tokens_an_executor_may_not_review_its_own_run(with_tokens: Core) -> None:
    done = await complete(with_tokens, actor=ALICE)
    rows = await snapshot(with_tokens)

    with pytest.raises(JctError) as err:
        await reviews.submit_review(with_tokens, ALICE, done.evidence_pack.id, "approved", "My own work is great")

    assert err.value.code is ErrorCode.REVIEW_NOT_ALLOWED
    assert await snapshot(with_tokens) == rows


async def test_with_tokens_an_admin_may_review_its_own_run(with_tokens: Core) -> None:
    alice_admin = Actor(actor_id="alice", name="alice", admin=True, session="alice-admin")
    done = await complete(with_tokens, actor=alice_admin)

    decided = await reviews.submit_review(with_tokens, alice_admin, done.evidence_pack.id, "approved", "Checked")

    assert decided.run_status == "done"


async def test_with_tokens_another_reviewer_may_review(with_tokens: Core) -> None:
    done = await complete(with_tokens, actor=ALICE)
    decided = await reviews.submit_review(with_tokens, BOB, done.evidence_pack.id, "approved", "Checked")
    assert decided.run_status == "done"


async def test_without_tokens_there_is_no_separation_of_duties(manual: Core) -> None:
    done = await complete(manual, actor=ALICE)
    decided = await reviews.submit_review(manual, ALICE, done.evidence_pack.id, "approved", "Local user")
    assert decided.run_status == "done"
