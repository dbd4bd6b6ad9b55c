"""What the fleet costs (DESIGN section 17), on both databases: telemetry summed per task, agent and mission, a
mission budget the claim checks inside its own statement, and how a mission ends (seed 001 complete_mission)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import TextResourceContents
from sqlalchemy import select

from server.config import Settings
from server.core.claims import queue, work
from server.core.missions import budget, plan
from server.core.models import Actor
from server.core.review import completion
from server.core.service import Core
from server.db import tables
from server.db.records import Budgeted
from server.errors import ErrorCode, JctError
from tests.core.helpers import ALICE, BOB, race, separate_cores, snapshot
from tests.core.test_claim_wait import Waiting, served
from tests.core.test_missions import PATCH, created
from tests.support.missions import mission, task
from tests.tools.conftest import ClientFactory, connect, error, ok

pytestmark = pytest.mark.anyio
__all__ = ["connect"]  # the tools' in-memory client fixture, used here too

ADMIN = Actor(actor_id="ops", name="ops", actor_kind="human", admin=True)


async def spend(client: Client, task_id: str, **telemetry: float) -> dict[str, Any]:
    """Claim the task by id and report what it spent; the claim."""
    claim = await ok(client, "jct_claim_task", task_id=task_id)
    await ok(client, "jct_report_progress", task_id=task_id, message="working", telemetry=telemetry)
    return claim


async def finish(client: Client, task_id: str, *, summary: str = "done", **telemetry: float) -> None:
    """Complete a claimed task (auto-approved), reporting `telemetry` with it."""
    await ok(client, "jct_report_artifact", task_id=task_id, title="Diff", artifact_type="code_patch", content=PATCH)
    extra = {"telemetry": telemetry} if telemetry else {}
    await ok(client, "jct_complete_task", task_id=task_id, success=True, summary=summary, **extra)


async def page(client: Client, uri: str) -> str:
    content = (await client.read_resource(uri)).contents[0]
    assert isinstance(content, TextResourceContents)
    return content.text


@pytest.fixture
async def alice(connect: ClientFactory, core: Core) -> AsyncIterator[Client]:
    async with connect("alice", core=core) as client:
        yield client


@pytest.fixture
async def bob(connect: ClientFactory, core: Core) -> AsyncIterator[Client]:
    async with connect("bob", core=core) as client:
        yield client


# --- costs summed ---------------------------------------------------------------------------------------------


async def test_costs_are_summed_per_task_agent_and_mission(alice: Client, bob: Client) -> None:
    ids = await created(alice, mission([task("a"), task("b")]))
    other = await ok(alice, "jct_enqueue_task", objective="Elsewhere", operation="docs", target_repo="myorg/docs")

    await spend(alice, ids["a"], tokens_input=1000, tokens_output=200, cost_usd=0.25, duration_seconds=30)
    await ok(alice, "jct_report_progress", task_id=ids["a"], message="more", telemetry={"cost_usd": 0.5})
    await finish(alice, ids["a"], tokens_output=100, cost_usd=0.25, duration_seconds=10)
    await spend(bob, ids["b"], tokens_input=50, cost_usd=1.0)
    await spend(bob, other["task_id"], tokens_input=7, cost_usd=2.0)

    assert (await ok(alice, "jct_get_task", task_id=ids["a"]))["spent"] == {
        "tokens": 1300,
        "cost_usd": 1.0,
        "duration_seconds": 40,
    }
    assert (await ok(alice, "jct_get_task", task_id=ids["b"]))["spent"]["cost_usd"] == 1.0
    agents = {a["agent"]: a["spent"] for a in (await ok(alice, "jct_list_agents"))["agents"]}
    assert agents["alice"] == {"tokens": 1300, "cost_usd": 1.0, "duration_seconds": 40}
    assert agents["bob"] == {"tokens": 57, "cost_usd": 3.0, "duration_seconds": 0}

    view = await ok(alice, "jct_get_mission", mission_id=ids["mission"])
    # The task outside the mission is not the mission's.
    assert view["spent"] == {"tokens": 1350, "cost_usd": 2.0, "duration_seconds": 40}
    assert "budget_spent" not in view["mission"] or view["mission"]["budget_spent"] is False
    text = await page(alice, f"jct://missions/{ids['mission']}")
    assert "Spent $2.00, 1,350 tokens" in text
    listed = (await ok(alice, "jct_list_missions"))["missions"][0]
    assert listed["spent_cost_usd"] == 2.0


# --- the budget ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget_args", "named"),
    [
        ({"max_cost_usd": -1}, "max_cost_usd"),
        ({"max_tokens": -5}, "max_tokens"),
        ({"max_tokens": 2.5}, "max_tokens"),
    ],
    ids=["negative cost", "negative tokens", "fractional tokens"],
)
async def test_a_bad_budget_is_refused_and_stores_nothing(
    alice: Client, core: Core, budget_args: dict[str, Any], named: str
) -> None:
    before = await snapshot(core)
    refused = await error(alice, "jct_create_mission", **mission([task("a")]), **budget_args)
    assert refused["code"] == "INVALID_ARGUMENT"
    assert named in refused["message"]
    assert refused["suggestion"]
    assert await snapshot(core) == before


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "5", True], ids=["NaN", "inf", "-inf", "text", "bool"])
async def test_a_budget_that_is_not_a_finite_number_is_refused_by_the_service(core: Core, bad: Any) -> None:
    """JSON cannot carry NaN or infinity (the SDK client sends null): a caller of the service can."""
    before = await snapshot(core)
    for args in ({"max_cost_usd": bad}, {"max_tokens": bad}):
        with pytest.raises(JctError) as refused:
            await plan.create_mission(core, ALICE, **mission([task("a")]), **args)
        assert refused.value.code == ErrorCode.INVALID_ARGUMENT
        assert next(iter(args)) in refused.value.message
        assert "Send max_cost_usd" in refused.value.suggestion
    assert await snapshot(core) == before


async def test_a_spent_budget_holds_back_the_missions_tasks_until_a_person_raises_it(
    alice: Client, bob: Client, core: Core
) -> None:
    ids = await created(alice, mission([task("a"), task("b"), task("c")], max_cost_usd=1.0))
    assert (await ok(alice, "jct_get_mission", mission_id=ids["mission"]))["mission"]["max_cost_usd"] == 1.0
    elsewhere = await ok(alice, "jct_enqueue_task", objective="Elsewhere", operation="docs", target_repo="myorg/docs")
    await spend(alice, ids["a"], cost_usd=0.6)
    # Not spent yet: b can go.
    await spend(bob, ids["b"], cost_usd=0.4)

    refused = await error(bob, "jct_claim_task", task_id=ids["c"])
    assert refused["code"] == "MISSION_BUDGET_SPENT"
    assert ids["mission"] in refused["message"]
    assert "max_cost_usd $1.00" in refused["message"]
    assert "jct mission-budget" in refused["suggestion"]
    # claim_next hands out another mission's task, then names the budget.
    assert (await ok(bob, "jct_claim_next"))["task_id"] == elsewhere["task_id"]
    assert (await error(bob, "jct_claim_next"))["code"] == "MISSION_BUDGET_SPENT"

    view = await ok(alice, "jct_get_mission", mission_id=ids["mission"])
    assert view["mission"]["budget_spent"] is True
    assert view["claimable"] == []
    blocker = next(b for b in view["blockers"] if b["kind"] == "budget_spent")
    assert "1 queued task(s)" in blocker["reason"]
    assert "jct mission-budget" in blocker["action"]
    stuck = [i for i in (await ok(alice, "jct_list_stuck"))["items"] if i["kind"] == "mission_budget_spent"]
    assert [(i["mission_id"], i["task_id"]) for i in stuck] == [(ids["mission"], ids["c"])]
    text = await page(alice, f"jct://missions/{ids['mission']}")
    assert "(**spent**" in text, text

    # Work under way goes on and still counts.
    await finish(alice, ids["a"], cost_usd=0.5)
    assert (await ok(alice, "jct_get_mission", mission_id=ids["mission"]))["spent"]["cost_usd"] == 1.5

    raised = await budget.set_budget(core, ADMIN, ids["mission"], max_cost_usd=5)
    assert raised.budget_spent is False
    assert raised.max_cost_usd == 5.0
    assert (await ok(bob, "jct_claim_task", task_id=ids["c"]))["task_id"] == ids["c"]
    assert not [i for i in (await ok(alice, "jct_list_stuck"))["items"] if i["kind"] == "mission_budget_spent"]


async def test_a_token_budget_counts_input_and_output_tokens(alice: Client) -> None:
    ids = await created(alice, mission([task("a"), task("b")], max_tokens=1000))
    await spend(alice, ids["a"], tokens_input=600)
    assert (await ok(alice, "jct_get_mission", mission_id=ids["mission"]))["mission"]["budget_spent"] is False
    await ok(alice, "jct_report_progress", task_id=ids["a"], message="more", telemetry={"tokens_output": 400})
    refused = await error(alice, "jct_claim_task", task_id=ids["b"])
    assert refused["code"] == "MISSION_BUDGET_SPENT"
    assert "1000 tokens of max_tokens 1000" in refused["message"]


async def test_a_zero_budget_hands_out_nothing_and_setting_a_budget_checks_its_input(alice: Client, core: Core) -> None:
    ids = await created(alice, mission([task("a")], max_cost_usd=0))
    assert (await error(alice, "jct_claim_next"))["code"] == "MISSION_BUDGET_SPENT"
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(JctError) as refused:
            await budget.set_budget(core, ADMIN, ids["mission"], max_cost_usd=bad)
        assert refused.value.code == ErrorCode.INVALID_ARGUMENT
    with pytest.raises(JctError):
        await budget.set_budget(core, ADMIN, ids["mission"])  # nothing given
    cleared = await budget.set_budget(core, ADMIN, ids["mission"], clear=True)
    assert cleared.max_cost_usd is None
    assert not cleared.budget_spent
    assert (await ok(alice, "jct_claim_next"))["task_id"] == ids["a"]


# --- waiting claims ---------------------------------------------------------------------------------------------


async def test_a_spent_budget_never_wakes_a_waiting_claim_into_a_loop_and_raising_it_does(
    make_settings: Callable[..., Settings], connect: ClientFactory
) -> None:
    async with served(make_settings, auto_rework=False) as core, connect("alice", core=core) as alice:
        ids = await created(alice, mission([task("a"), task("b")], max_cost_usd=1.0))
        await spend(alice, ids["a"], cost_usd=1.0)
        waiter = Waiting(core, BOB, wait=60.0)
        with anyio.fail_after(45):
            await _wait_through_wakeups(core, alice, waiter, ids)
        assert waiter.result is not None
        assert waiter.result.claimed
        assert waiter.result.mission_id == ids["mission"]


async def _wait_through_wakeups(core: Core, alice: Client, waiter: Waiting, ids: dict[str, str]) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter.run)
        with anyio.fail_after(30):
            await waiter.started.wait()
        generation, tried = core.waiters.generation, core.waiters.tried
        # Changes that wake every waiter, each leaving only held-back tasks: a task joins the spent mission.
        for n in range(5):
            await ok(
                alice,
                "jct_enqueue_task",
                objective=f"More {n}",
                operation="docs",
                target_repo="myorg/api",
                mission_id=ids["mission"],
                phase=0,
            )
        with anyio.fail_after(30):
            while core.waiters.generation < generation + 1 or core.waiters.tried == tried:
                await anyio.sleep(0.05)
        woken = core.waiters.generation - generation
        # One try per wake-up at most (and one for a wake-up read just before `generation` was noted), never a
        # spin: the claim passes the spent mission's tasks over, and the try finds nothing.
        assert core.waiters.tried - tried <= woken + 1
        assert waiter.result is None
        await budget.set_budget(core, ADMIN, ids["mission"], max_cost_usd=10)


# --- concurrent claims racing a budget that gets spent -----------------------------------------------------------


async def test_no_claim_that_starts_after_the_budget_is_spent_hands_out_a_task(
    core: Core, make_settings: Callable[..., Settings], connect: ClientFactory
) -> None:
    """Eight workers drain a mission whose budget ($2.50) runs out part way; each claimed task reports $0.25. Promise
    (server/core/missions/budget.py): once a read shows the budget spent, no claim that starts after that read
    hands out a task; claims in flight before it may (on PostgreSQL, one per claimer at most)."""
    tasks = [task(f"t{n}") for n in range(40)]
    async with connect("planner", core=core) as planner:
        ids = await created(planner, mission(tasks, max_cost_usd=2.5))
    mission_id = ids["mission"]
    claims: list[tuple[float, str]] = []  # when the claim started, the task
    spent_seen: list[float] = []  # when a read that showed the budget spent answered
    refusals: list[tuple[float, ErrorCode]] = []

    async def spent_now(c: Core) -> bool:
        async with c.db.read() as conn:
            row = (await conn.execute(select(tables.missions).where(tables.missions.c.id == mission_id))).mappings()
            return budget.is_spent(Budgeted.of(row.one()))

    async def worker(c: Core, n: int) -> None:
        actor = Actor(actor_id=f"worker-{n}", session=f"worker-{n}")
        while True:
            started = anyio.current_time()
            try:
                claim = await queue.claim_next(c, actor)
            except JctError as err:
                if err.code == ErrorCode.UNAVAILABLE:  # a lock wait ran out on a busy machine: nothing was claimed
                    continue
                refusals.append((started, err.code))
                return
            if not claim.claimed:
                return
            assert claim.task_id is not None
            task_id = claim.task_id
            claims.append((started, task_id))
            spent = {"cost_usd": 0.25}
            await retried(partial(work.report_progress, c, actor, task_id, message="spent", telemetry=spent))
            if await spent_now(c):
                # Stamped when the read has answered: it showed the spending committed by then. A stamp taken before
                # it would count a claim that started in between, before another report's spend it then saw.
                spent_seen.append(anyio.current_time())
            await retried(partial(completion.complete_task, c, actor, task_id, success=True, summary="done"))

    async with separate_cores(make_settings(auto_rework=False), 8) as cores:
        await race(cores, worker, seconds=300)

    assert spent_seen
    assert [code for _, code in refusals] == [ErrorCode.MISSION_BUDGET_SPENT] * 8
    first_seen = min(spent_seen)
    late = [task_id for started, task_id in claims if started > first_seen]
    assert late == [], f"claims that started after the budget was seen spent handed out {late}"
    # Ten reports reach $2.50; besides, at most the seven other workers held a claim not yet reported.
    assert 10 <= len(claims) <= 10 + 8 - 1, claims
    assert len({task_id for _, task_id in claims}) == len(claims)


async def retried(call: Callable[[], Awaitable[object]]) -> None:
    """The call, again while it answers UNAVAILABLE (a lock wait that ran out on a busy machine: nothing recorded)."""
    while True:
        try:
            await call()
        except JctError as err:
            if err.code != ErrorCode.UNAVAILABLE:
                raise
        else:
            return


# --- how a mission ends -------------------------------------------------------------------------------------------


async def test_a_completed_mission_shows_what_each_task_achieved_its_cost_and_duration(alice: Client) -> None:
    ids = await created(alice, mission([task("a")], [task("b")]))
    assert "outcome" not in await ok(alice, "jct_get_mission", mission_id=ids["mission"])
    await spend(alice, ids["a"], cost_usd=0.5, duration_seconds=20)
    await finish(alice, ids["a"], summary="Built the limiter")
    await spend(alice, ids["b"], cost_usd=0.25)
    await finish(alice, ids["b"], summary="Documented it")

    view = await ok(alice, "jct_get_mission", mission_id=ids["mission"])
    outcome = view["outcome"]
    assert outcome["outcome"] == "completed"
    assert [(a["task_id"], a["summary"]) for a in outcome["achieved"]] == [
        (ids["a"], "Built the limiter"),
        (ids["b"], "Documented it"),
    ]
    assert outcome["limitations"] == []
    assert outcome["spent"]["cost_usd"] == 0.75
    assert outcome["duration_seconds"] >= 0
    text = await page(alice, f"jct://missions/{ids['mission']}")
    assert "## Outcome" in text
    assert "**completed**" in text
    assert "Built the limiter" in text


async def test_a_failed_task_ends_the_mission_with_failures_and_a_failed_dependency_stalls_it(
    alice: Client, core: Core
) -> None:
    ids = await created(alice, mission([task("a"), task("b")]))
    await spend(alice, ids["a"])
    await finish(alice, ids["a"], summary="a done")
    await ok(alice, "jct_claim_task", task_id=ids["b"])
    await ok(alice, "jct_complete_task", task_id=ids["b"], success=False, summary="no", error_message="tests broke")
    outcome = (await ok(alice, "jct_get_mission", mission_id=ids["mission"]))["outcome"]
    assert outcome["outcome"] == "completed_with_failures"
    assert [(x["task_id"], x["kind"]) for x in outcome["limitations"]] == [(ids["b"], "failed")]
    assert "tests broke" in outcome["limitations"][0]["reason"]

    chained = await created(alice, mission([task("x"), task("y", "x")], title="Chained"))
    await ok(alice, "jct_claim_task", task_id=chained["x"])
    await ok(alice, "jct_complete_task", task_id=chained["x"], success=False, summary="no", error_message="gone")
    outcome = (await ok(alice, "jct_get_mission", mission_id=chained["mission"]))["outcome"]
    assert outcome["outcome"] == "stalled"
    kinds = {(x["task_id"], x["kind"]) for x in outcome["limitations"]}
    assert kinds == {(chained["x"], "failed"), (chained["y"], "blocker")}

    await ok(alice, "jct_cancel_mission", mission_id=chained["mission"], reason="dropped")
    assert (await ok(alice, "jct_get_mission", mission_id=chained["mission"]))["outcome"]["outcome"] == "cancelled"


async def test_a_spent_budget_with_nothing_running_stalls_the_mission_and_the_summary_is_shown(
    alice: Client, core: Core
) -> None:
    ids = await created(alice, mission([task("a"), task("b")], max_cost_usd=1.0))
    await spend(alice, ids["a"], cost_usd=2.0)
    assert "outcome" not in await ok(alice, "jct_get_mission", mission_id=ids["mission"])  # a is running
    await finish(alice, ids["a"], summary="a done")
    view = await ok(alice, "jct_get_mission", mission_id=ids["mission"])
    assert view["outcome"]["outcome"] == "stalled"
    assert any(x["kind"] == "blocker" and "budget is spent" in x["reason"] for x in view["outcome"]["limitations"])

    await budget.set_summary(core, ADMIN, ids["mission"], "Stopped at the budget: b is left.")
    view = await ok(alice, "jct_get_mission", mission_id=ids["mission"])
    assert view["mission"]["summary"] == "Stopped at the budget: b is left."
    assert "Stopped at the budget" in await page(alice, f"jct://missions/{ids['mission']}")
    await budget.set_budget(core, ADMIN, ids["mission"], max_cost_usd=10)
    assert "outcome" not in await ok(alice, "jct_get_mission", mission_id=ids["mission"])
