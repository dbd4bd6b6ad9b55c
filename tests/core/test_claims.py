"""Claims: exactly one winner under contention, claim-next order and filters, and claim-by-id errors.

The concurrent tests give every claimer its own `Database` (its own engine and connection), so the
database arbitrates between them, not a lock inside this process.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select, update

from server.config import Settings
from server.core.claims import queue
from server.core.models import Actor
from server.core.review import completion
from server.core.service import Core
from server.db import tables
from server.errors import ErrorCode, JctError
from tests.core.helpers import ALICE, BOB, bare, count, enqueue, race, separate_cores

pytestmark = pytest.mark.anyio

SettingsFactory = Callable[..., Settings]


async def runs_per_task(core: Core) -> dict[str, int]:
    query = select(tables.runs.c.task_id, func.count()).group_by(tables.runs.c.task_id)
    async with core.db.read() as conn:
        return {str(task_id): int(n) for task_id, n in (await conn.execute(query)).all()}


async def audit_actions_per_task(core: Core, action: str) -> dict[str, int]:
    log = tables.audit_log
    query = (
        select(log.c.entity_id, func.count())
        .where(log.c.entity_kind == "Task", log.c.action == action)
        .group_by(log.c.entity_id)
    )
    async with core.db.read() as conn:
        return {str(entity_id): int(n) for entity_id, n in (await conn.execute(query)).all()}


async def set_queued_at(core: Core, task_id: str, when: datetime) -> None:
    async with core.db.write() as conn:
        await conn.execute(update(tables.tasks).where(tables.tasks.c.id == task_id).values(queued_at=when))


# --- contention --------------------------------------------------------------------------


async def test_fifty_claimers_on_separate_connections_produce_exactly_one_winner(
    core: Core, make_settings: SettingsFactory
) -> None:
    task_id = await enqueue(core)
    winners: list[str] = []
    losers: list[ErrorCode] = []

    async def claimer(c: Core, n: int) -> None:
        actor = Actor(actor_id=f"agent-{n}", session=f"agent-{n}")
        try:
            claim = await queue.claim_task(c, actor, task_id)
        except JctError as err:
            losers.append(err.code)
        else:
            winners.append(bare(claim.run_id))

    async with separate_cores(make_settings(), 50) as cores:
        await race(cores, claimer)

    assert len(winners) == 1
    assert losers == [ErrorCode.TASK_ALREADY_CLAIMED] * 49
    assert await runs_per_task(core) == {task_id: 1}
    assert await count(core, "tasks", id=task_id, status="running", active_run_id=winners[0]) == 1
    assert await audit_actions_per_task(core, "task.claimed") == {task_id: 1}


async def test_twenty_workers_drain_five_hundred_tasks_each_claimed_and_completed_once(
    core: Core, make_settings: SettingsFactory
) -> None:
    task_ids = {await enqueue(core, objective=f"task {n}") for n in range(500)}
    done_by: dict[str, list[str]] = {}

    async def worker(c: Core, n: int) -> None:
        actor = Actor(actor_id=f"worker-{n}", session=f"worker-{n}")
        while True:
            claim = await queue.claim_next(c, actor)
            if not claim.claimed:
                return
            assert claim.task_id is not None
            done_by.setdefault(claim.task_id, []).append(actor.actor_id)
            await completion.complete_task(c, actor, claim.task_id, success=True, summary="done")

    # Each completion is partial (no criteria cited): it stays completed, not sent back (JCT_AUTO_REWORK).
    async with separate_cores(make_settings(auto_rework=False), 20) as cores:
        await race(cores, worker, seconds=300)

    assert set(done_by) == task_ids
    assert all(len(actors) == 1 for actors in done_by.values())
    assert await runs_per_task(core) == dict.fromkeys(task_ids, 1)
    assert await count(core, "tasks", status="completed") == 500
    assert await audit_actions_per_task(core, "task.claimed") == dict.fromkeys(task_ids, 1)
    assert await audit_actions_per_task(core, "task.completed") == dict.fromkeys(task_ids, 1)
    assert len({actor for actors in done_by.values() for actor in actors}) > 1  # the work was actually shared


# --- claim-next order and filters --------------------------------------------------------


async def test_claim_next_takes_higher_priority_first_then_older_tasks(core: Core) -> None:
    now = datetime.now(UTC)
    newer_p2 = await enqueue(core, objective="newer P2", priority="P2")
    older_p2 = await enqueue(core, objective="older P2", priority="P2")
    newest_p0 = await enqueue(core, objective="newest P0", priority="P0")
    p4 = await enqueue(core, objective="P4", priority="P4")
    # Enqueue order is deliberately not age order: the queue must follow queued_at, not insertion.
    await set_queued_at(core, p4, now - timedelta(hours=3))
    await set_queued_at(core, older_p2, now - timedelta(hours=2))
    await set_queued_at(core, newer_p2, now - timedelta(hours=1))
    await set_queued_at(core, newest_p0, now)

    order = [(await queue.claim_next(core, ALICE)).task_id for _ in range(4)]

    assert order == [newest_p0, older_p2, newer_p2, p4]
    assert (await queue.claim_next(core, ALICE)).claimed is False


async def test_claim_next_on_an_empty_queue_claims_nothing(core: Core) -> None:
    result = await queue.claim_next(core, ALICE)
    assert result.claimed is False
    assert result.task_id is None
    assert await count(core, "runs") == 0


async def test_claim_next_only_takes_the_requested_operation(core: Core) -> None:
    await enqueue(core, operation="code_change", priority="P0")
    docs = await enqueue(core, operation="docs", priority="P4")

    claim = await queue.claim_next(core, ALICE, operation="docs")

    assert (claim.claimed, claim.task_id, claim.operation) == (True, docs, "docs")
    assert (await queue.claim_next(core, ALICE, operation="docs")).claimed is False
    assert (await queue.claim_next(core, ALICE, operation="analysis")).claimed is False
    assert await count(core, "tasks", status="queued") == 1


async def test_claim_next_rejects_an_unknown_operation_filter(core: Core) -> None:
    await enqueue(core)
    with pytest.raises(JctError) as err:
        await queue.claim_next(core, ALICE, operation="deploy")
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    assert await count(core, "runs") == 0


async def test_claim_next_only_takes_repositories_under_the_prefix(core: Core) -> None:
    await enqueue(core, target_repo="other/api", priority="P0")
    mine = await enqueue(core, target_repo="myorg/api", priority="P4")

    claim = await queue.claim_next(core, ALICE, repo_prefix="myorg/")

    assert claim.task_id == mine
    assert (await queue.claim_next(core, ALICE, repo_prefix="myorg/")).claimed is False


@pytest.mark.parametrize(
    ("prefix", "matching_repo", "lookalike_repo"),
    [
        ("my%org/", "my%org/api", "my-big-org/api"),
        ("my_org/", "my_org/api", "myXorg/api"),
        ("my\\org/", "my\\org/api", "myorg/api"),
    ],
)
async def test_a_repo_prefix_with_like_wildcards_matches_them_literally(
    core: Core, prefix: str, matching_repo: str, lookalike_repo: str
) -> None:
    await enqueue(core, target_repo=lookalike_repo, priority="P0")
    literal = await enqueue(core, target_repo=matching_repo, priority="P4")

    claim = await queue.claim_next(core, ALICE, repo_prefix=prefix)

    assert claim.task_id == literal
    assert (await queue.claim_next(core, ALICE, repo_prefix=prefix)).claimed is False
    assert await count(core, "tasks", target_repo=lookalike_repo, status="queued") == 1


async def test_a_repo_prefix_is_case_sensitive_on_every_dialect(core: Core) -> None:
    # SQLite's LIKE ignores ASCII case; PostgreSQL's does not. The claim must behave the same on both.
    await enqueue(core, target_repo="MyOrg/api")
    assert (await queue.claim_next(core, ALICE, repo_prefix="myorg/")).claimed is False
    assert (await queue.claim_next(core, ALICE, repo_prefix="MyOrg/")).claimed is True


# --- claim by id -------------------------------------------------------------------------


async def test_claiming_a_missing_task_reports_task_not_found(core: Core) -> None:
    with pytest.raises(JctError) as err:
        await queue.claim_task(core, ALICE, str(uuid.uuid4()))
    assert err.value.code is ErrorCode.TASK_NOT_FOUND
    assert await count(core, "runs") == 0


async def test_claiming_a_running_task_reports_already_claimed_and_leaves_the_claim_alone(core: Core) -> None:
    task_id = await enqueue(core)
    first = await queue.claim_task(core, ALICE, task_id)

    with pytest.raises(JctError) as err:
        await queue.claim_task(core, BOB, task_id)

    assert err.value.code is ErrorCode.TASK_ALREADY_CLAIMED
    assert await count(core, "runs") == 1
    assert await count(core, "tasks", id=task_id, active_run_id=bare(first.run_id)) == 1


async def test_claiming_a_completed_task_reports_already_claimed(core: Core) -> None:
    core.settings.auto_rework = False  # the partial verdict leaves it completed, awaiting review
    task_id = await enqueue(core)
    await queue.claim_task(core, ALICE, task_id)
    await completion.complete_task(core, ALICE, task_id, success=True, summary="done")

    with pytest.raises(JctError) as err:
        await queue.claim_task(core, BOB, task_id)

    assert err.value.code is ErrorCode.TASK_ALREADY_CLAIMED
    assert await count(core, "runs") == 1


@pytest.mark.parametrize("bad_id", ["42", "not-a-uuid", "", "' OR 1=1 --", "x" * 10_000])
async def test_claiming_by_a_non_uuid_id_is_invalid_argument(core: Core, bad_id: str) -> None:
    await enqueue(core)
    with pytest.raises(JctError) as err:
        await queue.claim_task(core, ALICE, bad_id)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    assert await count(core, "runs") == 0


async def test_with_tokens_on_an_agent_holds_at_most_its_claim_cap(make_settings: Callable[..., Settings]) -> None:
    capped = Core.build(make_settings(auth="token", max_claims_per_agent=2))
    try:
        for _ in range(3):
            await enqueue(capped)
        await queue.claim_next(capped, ALICE)
        await queue.claim_next(capped, ALICE)
        with pytest.raises(JctError) as err:
            await queue.claim_next(capped, ALICE)
        assert err.value.code is ErrorCode.PERMISSION_DENIED
        # Another principal is not held back by Alice's claims.
        assert (await queue.claim_next(capped, BOB)).claimed is True
    finally:
        await capped.db.dispose()
