"""Held leases (server/core/claims/holding.py): what the renewal renews, and what it never does.

A claim made while `CURRENT` names a live connection is held; "time passing" is simulated by moving
`runs.lease_expires_at` or `runs.budget_ends_at` with a direct UPDATE, and the holder's liveness by a flag.
(tests/faults/test_held_leases.py runs the same with real processes.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from server.config import Settings
from server.core.claims import holding, queue, sweeper, work
from server.core.claims.holders import CURRENT, Holder
from server.core.service import Core
from server.db import tables
from server.errors import ErrorCode, JctError
from tests.core.helpers import ALICE, BOB, bare, count, enqueue

pytestmark = pytest.mark.anyio

LIVE = 30.0
ALICE_AGAIN = replace(ALICE, session="alice-reconnected")
LONG = 900


class Connection:
    """A connection whose liveness the test decides."""

    def __init__(self) -> None:
        self.alive = True
        self.holder = Holder("test", lambda: self.alive)


@contextmanager
def through(connection: Connection) -> Iterator[None]:
    token = CURRENT.set(connection.holder)
    try:
        yield
    finally:
        CURRENT.reset(token)


@pytest.fixture
async def held_core(make_settings: Callable[..., Settings]) -> AsyncIterator[Core]:
    core = Core.build(make_settings(live_lease_seconds=LIVE, lease_seconds=LONG))
    try:
        yield core
    finally:
        await core.db.dispose()


async def run_row(core: Core, run_id: str) -> dict[str, Any]:
    async with core.db.read() as conn:
        row = (await conn.execute(select(tables.runs).where(tables.runs.c.id == run_id))).mappings().one()
    return dict(row)


async def set_run(core: Core, run_id: str, **values: Any) -> None:
    async with core.db.write() as conn:
        await conn.execute(update(tables.runs).where(tables.runs.c.id == run_id).values(**values))


def seconds_left(lease: datetime) -> float:
    return (lease - datetime.now(UTC)).total_seconds()


async def claim_held(core: Core, connection: Connection) -> str:
    await enqueue(core)
    with through(connection):
        claimed = await queue.claim_next(core, ALICE)
    assert claimed.run_id is not None
    return bare(claimed.run_id)


async def test_a_claim_through_a_live_connection_gets_the_short_lease_and_is_renewed(held_core: Core) -> None:
    run_id = await claim_held(held_core, Connection())
    first = (await run_row(held_core, run_id))["lease_expires_at"]
    assert 0 < seconds_left(first) <= LIVE
    await set_run(held_core, run_id, lease_expires_at=datetime.now(UTC) + timedelta(seconds=5))
    events = await count(held_core, "run_events")
    assert await holding.renew_once(held_core) == 1
    renewed = (await run_row(held_core, run_id))["lease_expires_at"]
    assert LIVE - 5 < seconds_left(renewed) <= LIVE
    # The renewal is no sign of progress: no run event, so jct_list_stuck still sees a silent run.
    assert await count(held_core, "run_events") == events


async def test_a_claim_nothing_holds_gets_the_long_lease(held_core: Core) -> None:
    await enqueue(held_core)
    claimed = await queue.claim_next(held_core, ALICE)  # no connection named: a stateless request
    assert claimed.lease_expires_at is not None
    assert seconds_left(claimed.lease_expires_at) > LONG - 60
    assert await holding.renew_once(held_core) == 0


async def test_a_dead_connection_s_runs_are_not_renewed_and_then_forgotten(held_core: Core) -> None:
    connection = Connection()
    run_id = await claim_held(held_core, connection)
    connection.alive = False
    assert await holding.renew_once(held_core) == 0
    assert held_core.holdings.held() == []
    # Back within the lease it was last given (a GET stream reconnecting): renewed again.
    connection.alive = True
    assert await holding.renew_once(held_core) == 1
    # Gone for longer than that: forgotten, even if it comes back.
    connection.alive = False
    held_core.holdings.clock = lambda: float("inf")
    assert held_core.holdings.held() == []
    connection.alive = True
    assert held_core.holdings.held() == []
    assert run_id not in held_core.holdings.let_go()


async def test_a_lapsed_or_swept_lease_is_never_revived(held_core: Core) -> None:
    lapsed = await claim_held(held_core, Connection())
    swept = await claim_held(held_core, Connection())
    past = datetime.now(UTC) - timedelta(seconds=1)
    await set_run(held_core, lapsed, lease_expires_at=past)
    await set_run(held_core, swept, lease_expires_at=past)
    # Another process's sweeper expires one of them; the other lapsed and waits for a sweep.
    other = Core.build(held_core.settings)
    try:
        async with other.db.write() as conn:
            assert await sweeper.expire(other, conn, ALICE, swept) is not None
    finally:
        await other.db.dispose()
    assert await holding.renew_once(held_core) == 0
    assert (await run_row(held_core, lapsed))["lease_expires_at"] == past
    assert (await run_row(held_core, swept))["status"] == "expired"
    assert held_core.holdings.held() == []  # both forgotten


async def test_a_run_past_its_time_budget_is_not_renewed(held_core: Core) -> None:
    run_id = await claim_held(held_core, Connection())
    await set_run(held_core, run_id, budget_ends_at=datetime.now(UTC) - timedelta(seconds=1))
    before = (await run_row(held_core, run_id))["lease_expires_at"]
    assert await holding.renew_once(held_core) == 0
    assert (await run_row(held_core, run_id))["lease_expires_at"] == before


async def test_the_renewal_never_shortens_a_lease(held_core: Core) -> None:
    run_id = await claim_held(held_core, Connection())
    later = datetime.now(UTC) + timedelta(hours=2)
    await set_run(held_core, run_id, lease_expires_at=later)
    assert await holding.renew_once(held_core) == 1
    assert (await run_row(held_core, run_id))["lease_expires_at"] == later


async def test_a_run_requeued_and_claimed_again_is_not_renewed_for_its_first_claimant(held_core: Core) -> None:
    run_id = await claim_held(held_core, Connection())
    async with held_core.db.read() as conn:
        task_id = (await conn.execute(select(tables.runs.c.task_id).where(tables.runs.c.id == run_id))).scalar_one()
    with through(Connection()):
        await work.release_task(held_core, ALICE, task_id, "Not mine after all")
    again = await queue.claim_next(held_core, BOB)
    assert again.task_id == task_id
    assert await holding.renew_once(held_core) == 0  # BOB's run is nobody's to renew here, ALICE's has ended
    assert (await run_row(held_core, run_id))["status"] == "released"


async def test_a_fenced_call_through_a_live_connection_adopts_the_run(held_core: Core) -> None:
    """A run claimed statelessly (the long lease), then reported on by its agent through a live connection
    (another one: a new stdio process, say) naming it: that connection holds it now, with the short lease."""
    task_id = await enqueue(held_core)
    claimed = await queue.claim_next(held_core, ALICE)
    assert claimed.run_id is not None
    with through(Connection()):
        await work.report_progress(held_core, ALICE_AGAIN, task_id, message="Still here", run_id=claimed.run_id)
    lease = (await run_row(held_core, bare(claimed.run_id)))["lease_expires_at"]
    assert seconds_left(lease) <= LIVE
    assert held_core.holdings.held() == [bare(claimed.run_id)]


async def test_a_draining_process_hands_its_held_runs_the_long_lease(held_core: Core) -> None:
    run_id = await claim_held(held_core, Connection())
    assert await holding.hand_back(held_core) == 1
    assert seconds_left((await run_row(held_core, run_id))["lease_expires_at"]) > LONG - 60
    assert held_core.holdings.held() == []


async def test_live_leases_off(make_settings: Callable[..., Settings]) -> None:
    core = Core.build(make_settings(live_lease_seconds=0, lease_seconds=LONG))
    try:
        run_id = await claim_held(core, Connection())
        assert seconds_left((await run_row(core, run_id))["lease_expires_at"]) > LONG - 60
        assert core.holdings.held() == []
    finally:
        await core.db.dispose()


async def test_a_live_lease_below_a_second_is_refused(make_settings: Callable[..., Settings]) -> None:
    with pytest.raises(ValueError, match="1 second or more"):
        make_settings(live_lease_seconds=0.5)


async def test_a_late_call_after_the_lease_lapsed_is_refused(held_core: Core) -> None:
    connection = Connection()
    run_id = await claim_held(held_core, connection)
    async with held_core.db.read() as conn:
        task_id = (await conn.execute(select(tables.runs.c.task_id).where(tables.runs.c.id == run_id))).scalar_one()
    await set_run(held_core, run_id, lease_expires_at=datetime.now(UTC) - timedelta(seconds=1))
    with through(connection), pytest.raises(JctError) as refused:
        await work.report_progress(held_core, ALICE, task_id, message="late", run_id=run_id)
    assert refused.value.code is ErrorCode.LEASE_EXPIRED
