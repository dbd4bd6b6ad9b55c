"""Queue statistics come from trigger-kept count deltas (migration 0004): they must equal a GROUP BY over
the tables after any mix of concurrent claims, completions, releases, cancels, reviews, sweeps and folds."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from alembic import command
from sqlalchemy import func, insert, select, update
from sqlalchemy.engine import Connection

from server.core.claims import cancel, queue, sweeper, work
from server.core.models import Actor
from server.core.review import completion
from server.core.review import reviews as review
from server.core.service import Core
from server.db import tables
from server.db.engine import Database
from server.db.migrate import alembic_config, current_revision, head_revision, upgrade
from server.errors import JctError
from server.vocab import TaskStatus
from tests.core.helpers import ADMIN, PATCH, enqueue

pytestmark = pytest.mark.anyio


async def true_counts(core: Core) -> tuple[dict[str, int], int]:
    """What the counts must be: tasks by status, and pending evidence packs, counted the slow way."""
    tasks, packs = tables.tasks, tables.evidence_packs
    async with core.db.read() as conn:
        rows = (await conn.execute(select(tasks.c.status, func.count()).group_by(tasks.c.status))).all()
        pending = (
            await conn.execute(select(func.count()).select_from(packs).where(packs.c.review_state == "pending"))
        ).scalar_one()
    by_status = {status.value: 0 for status in TaskStatus}
    by_status.update({str(status): int(n) for status, n in rows})
    return by_status, int(pending)


async def assert_exact(core: Core) -> None:
    stats = await queue.queue_stats(core)
    assert (stats.counts, stats.pending_reviews) == await true_counts(core)


async def delta_rows(core: Core) -> int:
    async with core.db.read() as conn:
        return int((await conn.execute(select(func.count()).select_from(tables.count_deltas))).scalar_one())


async def expire_all_leases(core: Core) -> None:
    async with core.db.write() as conn:
        await conn.execute(
            update(tables.runs)
            .where(tables.runs.c.status == "running")
            .values(lease_expires_at=datetime.now(UTC) - timedelta(hours=1))
        )


async def test_counts_stay_exact_under_concurrent_claims_completions_cancels_and_sweeps(core: Core) -> None:
    for n in range(30):
        await enqueue(core, objective=f"Task {n}", priority=f"P{n % 4}")
    await assert_exact(core)
    working = True

    async def agent(index: int) -> None:
        rng = random.Random(index)
        actor = Actor(actor_id=f"agent-{index}", name=f"agent-{index}", session=f"agent-{index}")
        for _ in range(12):
            claim = await queue.claim_next(core, actor)
            if not claim.claimed:
                await anyio.sleep(0.01)
                continue
            assert claim.task_id is not None
            choice = rng.choice(["complete", "fail", "release", "cancel", "abandon"])
            try:
                if choice == "complete":
                    done = await completion.complete_task(
                        core, actor, claim.task_id, success=True, summary="Done.", outputs={"patch": PATCH}
                    )
                    if done.review.status == "awaiting_manual_review" and rng.random() < 0.7:
                        decision = rng.choice(["approved", "rejected", "needs_changes"])
                        await review.submit_review(core, ADMIN, done.evidence_pack.id, decision, "Checked.")
                elif choice == "fail":
                    await completion.complete_task(
                        core, actor, claim.task_id, success=False, summary="Broke.", error_message="boom"
                    )
                elif choice == "release":
                    await work.release_task(core, actor, claim.task_id, "Not mine.")
                elif choice == "cancel":
                    await cancel.cancel_task(core, ADMIN, claim.task_id, "Not needed.")
            except JctError:
                pass  # lost a race with the sweeper or a cancel: the counts must still be exact

    async def sweeping() -> None:
        while working:
            await expire_all_leases(core)
            await sweeper.sweep_expired_leases(core)
            await anyio.sleep(0.02)

    async def folding() -> None:
        while working:
            await queue.fold_counts(core)
            stats = await queue.queue_stats(core)
            assert sum(stats.counts.values()) == 30  # a reader never sees a half-folded table
            await anyio.sleep(0.005)

    async with anyio.create_task_group() as background:
        background.start_soon(sweeping)
        background.start_soon(folding)
        async with anyio.create_task_group() as agents:
            for index in range(6):
                agents.start_soon(agent, index)
        working = False
    await assert_exact(core)

    # Whatever is still running expires; everything is counted where it ended up.
    await expire_all_leases(core)
    await sweeper.sweep_expired_leases(core)
    await assert_exact(core)
    counts, _pending = await true_counts(core)
    assert counts["running"] == 0
    assert counts["completed"] + counts["failed"] + counts["cancelled"] > 0


async def test_folding_leaves_one_row_per_count_and_the_same_sums(core: Core) -> None:
    ids = [await enqueue(core, objective=f"Task {n}") for n in range(6)]
    for task_id in ids[:3]:
        await cancel.cancel_task(core, ADMIN, task_id, "Not needed.")
    claimed = await queue.claim_next(core, ADMIN)
    assert claimed.claimed
    before = await queue.queue_stats(core)
    assert before.counts["cancelled"] == 3
    assert before.counts["running"] == 1
    assert before.counts["queued"] == 2
    assert await delta_rows(core) > 3

    await queue.fold_counts(core)
    await queue.fold_counts(core)  # folding folded rows changes nothing

    assert await delta_rows(core) == 3  # queued, running, cancelled; statuses summing to 0 leave no row
    after = await queue.queue_stats(core)
    assert after.counts == before.counts
    await assert_exact(core)


async def test_concurrent_enqueues_during_folds_are_all_counted(core: Core) -> None:
    async def enqueuer(index: int) -> None:
        for n in range(8):
            await enqueue(core, objective=f"Task {index}-{n}")

    async def folder() -> None:
        for _ in range(20):
            await queue.fold_counts(core)
            await anyio.sleep(0.002)

    async with anyio.create_task_group() as tg:
        for index in range(5):
            tg.start_soon(enqueuer, index)
        tg.start_soon(folder)
        tg.start_soon(folder)
    assert (await queue.queue_stats(core)).counts["queued"] == 40
    await assert_exact(core)


async def test_queue_stats_folds_when_nobody_has_for_a_while(core: Core) -> None:
    await enqueue(core)
    async with core.db.write() as conn:
        rows = [{"entity": "task", "status": "queued", "delta": 0}] * (queue.FOLD_AFTER_ROWS + 1)
        await conn.execute(insert(tables.count_deltas), rows)

    stats = await queue.queue_stats(core)

    assert stats.counts["queued"] == 1
    assert await delta_rows(core) == 1
    await assert_exact(core)


def _migrate(connection: Connection, verb: str, revision: str) -> None:
    getattr(command, verb)(alembic_config(connection), revision)


async def test_the_migration_backfills_the_counts_from_existing_rows(core: Core) -> None:
    """A database at 0003 with tasks and evidence in it gets exact counts from the migration that adds them."""
    core.settings.auto_rework = False  # the partial completions stay completed
    for n in range(5):
        await enqueue(core, objective=f"Task {n}")
    for _ in range(3):
        claim = await queue.claim_next(core, ADMIN)
        assert claim.task_id is not None
        await completion.complete_task(
            core, ADMIN, claim.task_id, success=True, summary="Done.", outputs={"patch": PATCH}
        )
    await queue.claim_next(core, ADMIN)
    expected = await true_counts(core)
    assert expected[0]["completed"] == 3
    assert expected[0]["running"] == 1
    assert expected[1] > 0

    db: Database = core.db
    async with db.schema_change() as conn:
        await conn.run_sync(_migrate, "downgrade", "0003")
    async with db.write() as conn:
        # Rows written while at 0003 (no triggers) must be counted too.
        # added by the migrations after 0004
        later = {"idempotency_scope", "mission_id", "phase", "blockers", "approved_at", "step", "review_rounds"}
        later |= {"waits_for_phase", "touches", "merge"}
        at_0003 = [column for column in tables.tasks.c if column.name not in later]
        extra: dict[str, Any] = {**(await conn.execute(select(*at_0003).limit(1))).mappings().one()}
        extra.update(id="00000000-0000-4000-8000-000000000001", idempotency_key=None, status="failed")
        await conn.execute(insert(tables.tasks).values(extra))
    expected[0]["failed"] += 1

    await upgrade(db)

    assert await current_revision(db) == head_revision()
    assert await true_counts(core) == expected
    await assert_exact(core)
