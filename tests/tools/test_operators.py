"""The operator tools (DESIGN section 14) through the real MCP client, on both databases: requeue with feedback,
priority, agents and their claims, stuck work with reasons and actions, audit search with keyset pages."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from alembic import command
from mcp import Client
from sqlalchemy import select, update
from sqlalchemy.engine import Connection

from server.core.service import Core
from server.db import tables
from server.db.migrate import alembic_config, upgrade
from tests.core.helpers import bare, snapshot
from tests.support import missions
from tests.tools.conftest import ClientFactory, connect, error, ok

pytestmark = pytest.mark.anyio
__all__ = ["connect"]

PATCH = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"


@pytest.fixture
async def agent(connect: ClientFactory) -> AsyncIterator[Client]:
    async with connect("agent-7") as client:
        yield client


async def enqueue(client: Client, objective: str = "Fix the bug", **extra: Any) -> str:
    result = await ok(
        client, "jct_enqueue_task", objective=objective, operation="code_change", target_repo="myorg/api", **extra
    )
    return str(result["task_id"])


async def failed_task(client: Client, objective: str = "Fix the bug") -> tuple[str, str]:
    task_id = await enqueue(client, objective)
    claim = await ok(client, "jct_claim_task", task_id=task_id)
    await ok(
        client,
        "jct_complete_task",
        task_id=task_id,
        run_id=claim["run_id"],
        success=False,
        summary="could not",
        error_message="tests fail",
    )
    return task_id, bare(claim["run_id"])


async def age_run(core: Core, run_id: str, **moved: timedelta) -> None:
    """Move a run's clock fields into the past (what hours of silence would leave behind); a run started
    earlier has its budget end earlier by as much."""
    now, run_id = datetime.now(UTC), bare(run_id)
    runs = tables.runs.c
    async with core.db.write() as conn:
        started, budget_end = (
            await conn.execute(select(runs.started_at, runs.budget_ends_at).where(runs.id == run_id))
        ).one()
        values = {k: now - v for k, v in moved.items()}
        if "started_at" in values:
            values["budget_ends_at"] = budget_end - (started - values["started_at"])
        await conn.execute(update(tables.runs).where(runs.id == run_id).values(**values))


async def test_requeue_puts_a_failed_task_back_with_feedback_in_a_new_briefing(agent: Client) -> None:
    task_id, run_id = await failed_task(agent)
    before = await ok(agent, "jct_get_context", task_id=task_id)
    assert before["context_packet"]["version"] == 1

    result = await ok(
        agent, "jct_requeue_task", task_id=task_id, reason="flaky CI", feedback="Run the tests with -p no:randomly."
    )
    assert result == {"success": True, "task_id": task_id, "task_status": "queued", "context_packet_version": 2}
    task = (await ok(agent, "jct_get_task", task_id=task_id))["task"]
    assert (task["status"], task["attempts"]) == ("queued", 0)
    packet = (await ok(agent, "jct_get_context", task_id=task_id))["context_packet"]
    assert packet["version"] == 2
    (feedback,) = packet["review_feedback"]
    assert (feedback["decision"], feedback["reason"], feedback["run_id"]) == (
        "requeued",
        "Run the tests with -p no:randomly.",
        run_id,
    )
    # The next agent claims it again and reads the feedback in its briefing.
    claim = await ok(agent, "jct_claim_task", task_id=task_id)
    assert claim["context_packet"]["review_feedback"][0]["reason"] == "Run the tests with -p no:randomly."
    audit = await ok(agent, "jct_search_audit", action="task.requeued")
    assert [(e["entity_id"], e["after"]["reason"]) for e in audit["entries"]] == [(task_id, "flaky CI")]


async def test_requeue_without_feedback_keeps_the_briefing_and_a_cancelled_task_can_come_back(agent: Client) -> None:
    task_id = await enqueue(agent)
    await ok(agent, "jct_cancel_task", task_id=task_id, reason="wrong repo")
    result = await ok(agent, "jct_requeue_task", task_id=task_id, reason="right repo after all")
    assert result["task_status"] == "queued"
    assert "context_packet_version" not in result
    assert (await ok(agent, "jct_get_context", task_id=task_id))["context_packet"]["version"] == 1
    assert (await ok(agent, "jct_claim_next"))["task_id"] == task_id


async def test_requeue_refuses_open_work_and_unknown_tasks_and_changes_nothing(agent: Client, core: Core) -> None:
    queued = await enqueue(agent)
    before = await snapshot(core)
    refused = await error(agent, "jct_requeue_task", task_id=queued, reason="again")
    assert refused["code"] == "INVALID_ARGUMENT"
    assert "queued" in refused["message"]
    missing = await error(agent, "jct_requeue_task", task_id="00000000-0000-4000-8000-000000000000", reason="x")
    assert missing["code"] == "TASK_NOT_FOUND"
    assert (await error(agent, "jct_requeue_task", task_id=queued, reason=""))["code"] == "INVALID_ARGUMENT"
    assert await snapshot(core) == before


async def test_requeued_dependency_lets_its_blocked_dependent_wait_again(agent: Client) -> None:
    steps = [missions.task("spec", objective="Spec", operation="docs"), missions.task("code", "spec", objective="Code")]
    mission = await ok(agent, "jct_create_mission", **missions.mission(steps, title="Ship", goal="Spec then code"))
    ids = {item["key"]: item["task_id"] for item in mission["tasks"]}
    claim = await ok(agent, "jct_claim_task", task_id=ids["spec"])
    await ok(agent, "jct_complete_task", task_id=ids["spec"], run_id=claim["run_id"], success=False, summary="no")
    stuck = (await ok(agent, "jct_list_stuck"))["items"]
    assert [(item["kind"], item["task_id"]) for item in stuck] == [("failed_dependency", ids["code"])]
    assert ids["spec"] in stuck[0]["reason"]
    assert "jct_requeue_task" in stuck[0]["action"]

    assert (await ok(agent, "jct_requeue_task", task_id=ids["spec"], reason="retry"))["task_status"] == "queued"
    assert (await ok(agent, "jct_list_stuck"))["items"] == []
    # Requeueing the blocked dependent's dependency never frees the dependent itself.
    assert (await error(agent, "jct_claim_task", task_id=ids["code"]))["code"] == "TASK_BLOCKED"


async def test_set_priority_moves_a_task_to_the_front_of_claim_next(agent: Client, core: Core) -> None:
    first = await enqueue(agent, "first", priority="P2")
    later = await enqueue(agent, "later", priority="P3")
    result = await ok(agent, "jct_set_priority", task_id=later, priority="P0")
    assert result == {"success": True, "task_id": later, "priority": "P0", "previous": "P3"}
    assert (await ok(agent, "jct_claim_next"))["task_id"] == later
    # A running task's priority can change too; an ended one's cannot.
    assert (await ok(agent, "jct_set_priority", task_id=later, priority="P4"))["previous"] == "P0"
    await ok(agent, "jct_cancel_task", task_id=first, reason="not needed")
    before = await snapshot(core)
    refused = await error(agent, "jct_set_priority", task_id=first, priority="P1")
    assert refused["code"] == "INVALID_ARGUMENT"
    assert "cancelled" in refused["message"]
    assert await snapshot(core) == before
    audit = await ok(agent, "jct_search_audit", action="task.priority_set")
    assert [e["after"]["priority"] for e in audit["entries"]] == ["P4", "P0"]


async def test_list_agents_shows_claims_held_with_lease_ends_and_counts(connect: ClientFactory) -> None:
    async with connect("agent-a") as a, connect("agent-b") as b:
        held = await enqueue(a, "held by a")
        claim = await ok(a, "jct_claim_task", task_id=held)
        await failed_task(b, "failed by b")
        agents = {agent["agent"]: agent for agent in (await ok(a, "jct_list_agents"))["agents"]}
    assert set(agents) == {"agent-a", "agent-b"}
    assert agents["agent-a"]["claims_held"] == 1
    (claimed,) = agents["agent-a"]["claims"]
    assert (claimed["task_id"], claimed["run_id"], claimed["objective"]) == (held, bare(claim["run_id"]), "held by a")
    assert claimed["lease_expires_at"] == claim["lease_expires_at"]
    assert (agents["agent-a"]["done"], agents["agent-a"]["failed"]) == (0, 0)
    assert (agents["agent-b"]["claims"], agents["agent-b"]["done"], agents["agent-b"]["failed"]) == ([], 0, 1)
    assert agents["agent-b"]["last_seen"] is not None


async def test_list_agents_window_is_bounded(agent: Client) -> None:
    refused = await agent.call_tool("jct_list_agents", {"active_within_seconds": 0})
    assert refused.is_error


async def test_list_stuck_names_each_kind_with_its_reason_and_action(connect: ClientFactory, core: Core) -> None:
    async with connect("agent-s", stuck_after_seconds=600) as agent:
        over = await enqueue(agent, "over budget", time_budget_seconds=60)
        silent = await enqueue(agent, "silent")
        overdue = await enqueue(agent, "lease overdue")
        human = await enqueue(agent, "needs a person")
        fine = await enqueue(agent, "busy and fine")
        runs = {
            task: (await ok(agent, "jct_claim_task", task_id=task))["run_id"]
            for task in (over, silent, overdue, human, fine)
        }
        await age_run(core, runs[over], started_at=timedelta(minutes=5))
        await ok(agent, "jct_report_progress", task_id=over, run_id=runs[over], message="still going")
        await age_run(core, runs[silent], started_at=timedelta(minutes=20))
        await age_run(core, runs[overdue], lease_expires_at=timedelta(seconds=30))
        await ok(
            agent,
            "jct_report_progress",
            task_id=human,
            run_id=runs[human],
            message="Need the production password",
            kind="blocker",
            data={"requires_human": True},
        )
        items = (await ok(agent, "jct_list_stuck"))["items"]
    by_task = {item["task_id"]: item for item in items}
    assert fine not in by_task
    assert {task: by_task[task]["kind"] for task in (over, silent, overdue, human)} == {
        over: "over_budget",
        silent: "no_progress",
        overdue: "lease_overdue",
        human: "human_blocker",
    }
    assert [item["kind"] for item in items] == ["lease_overdue", "human_blocker", "over_budget", "no_progress"]
    for item in items:
        assert item["reason"]
        assert item["action"]
        assert item["run_id"] == bare(runs[item["task_id"]])
        assert item["agent"] == "agent-s"
    assert "60s" in by_task[over]["reason"]
    assert "No progress" in by_task[silent]["reason"]


async def test_search_audit_filters_and_pages_newest_first(connect: ClientFactory) -> None:
    async with connect("alice") as alice, connect("bob") as bob:
        for n in range(5):
            await enqueue(alice, f"alice {n}")
        await enqueue(bob, "bob 0")
        seen: list[int] = []
        cursor = None
        while True:
            page = await ok(
                alice,
                "jct_search_audit",
                actor_id="alice",
                action="task.enqueued",
                limit=2,
                **({"cursor": cursor} if cursor else {}),
            )
            seen += [entry["id"] for entry in page["entries"]]
            assert all(entry["actor_id"] == "alice" for entry in page["entries"])
            cursor = page.get("next_cursor")
            if cursor is None:
                break
        assert len(seen) == 5
        assert seen == sorted(seen, reverse=True)
        by_kind = await ok(bob, "jct_search_audit", entity_kind="Issue", limit=200)
        assert by_kind["count"] == 6
        assert {e["entity_kind"] for e in by_kind["entries"]} == {"Issue"}
        future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
        assert (await ok(bob, "jct_search_audit", since=future))["entries"] == []
        assert (await ok(bob, "jct_search_audit", since="2000-01-01"))["count"] == 12
        assert (await ok(bob, "jct_search_audit", until="2000-01-01"))["entries"] == []
        assert (await ok(bob, "jct_search_audit", until=future))["count"] == 12
        bad_filters = (
            {"action": "task.exploded"},
            {"entity_kind": "Planet"},
            {"since": "yesterday"},
            {"until": "soon"},
        )
        for bad in (*bad_filters, {"cursor": "xyz"}):
            refused = await error(bob, "jct_search_audit", **bad)
            assert refused["code"] == "INVALID_ARGUMENT", bad


async def test_throughput_counts_what_ended_in_the_last_hour(agent: Client, core: Core) -> None:
    from server.core.operators import actions as operators

    await failed_task(agent, "one")
    for objective in ("two", "three"):
        task_id = await enqueue(agent, objective)
        claim = await ok(agent, "jct_claim_task", task_id=task_id)
        run = {"task_id": task_id, "run_id": claim["run_id"]}
        await ok(agent, "jct_report_artifact", **run, title="Diff", artifact_type="code_patch", content=PATCH)
        await ok(agent, "jct_complete_task", **run, success=True, summary="done")
    flow = await operators.throughput(core)
    assert (len(flow.completed), flow.bucket_seconds) == (12, 300)
    assert (sum(flow.completed), sum(flow.failed)) == (2, 1)
    assert flow.completed[-1] == 2  # the newest interval, on the right


async def test_a_claim_sets_its_budget_end_and_the_migration_fills_it_in_for_running_runs(
    agent: Client, core: Core
) -> None:
    task = await enqueue(agent, "timed", time_budget_seconds=90)
    run_id = (await ok(agent, "jct_claim_task", task_id=task))["run_id"]
    runs = tables.runs.c
    query = select(runs.started_at, runs.budget_ends_at).where(runs.id == bare(run_id))
    async with core.db.read() as conn:
        started, budget_end = (await conn.execute(query)).one()
    assert budget_end - started == timedelta(seconds=90)

    def migrate(connection: Connection, verb: str, revision: str) -> None:
        getattr(command, verb)(alembic_config(connection), revision)

    # A database from before the column: its running runs get their budget end from their task.
    async with core.db.schema_change() as conn:
        await conn.run_sync(migrate, "downgrade", "0011")
    await upgrade(core.db)
    async with core.db.read() as conn:
        assert (await conn.execute(query)).one() == (started, budget_end)


async def test_list_stuck_takes_its_silence_threshold_per_call(connect: ClientFactory, core: Core) -> None:
    async with connect("agent-q", core=core) as agent:
        task = await enqueue(agent, "quiet for twenty minutes")
        run = (await ok(agent, "jct_claim_task", task_id=task))["run_id"]
        await age_run(core, run, started_at=timedelta(minutes=20))
        listed = (await ok(agent, "jct_list_stuck"))["items"]  # the setting: ten minutes of silence
        assert [(item["kind"], item["task_id"]) for item in listed] == [("no_progress", task)]
        assert (await ok(agent, "jct_list_stuck", stuck_after_seconds=3600))["items"] == []
        listed = (await ok(agent, "jct_list_stuck", stuck_after_seconds=900))["items"]
        assert [item["task_id"] for item in listed] == [task]
        refused = await agent.call_tool("jct_list_stuck", {"stuck_after_seconds": 0})
        assert refused.is_error


async def test_list_agents_filters_by_working_waiting_and_idle(connect: ClientFactory, core: Core) -> None:
    async with connect("worker", core=core) as a, connect("failer", core=core) as b, connect("waiter", core=core) as c:
        await ok(a, "jct_claim_task", task_id=await enqueue(a, "held"))
        await failed_task(b, "failed by b")

        async def states() -> dict[str, str]:
            listed = (await ok(a, "jct_list_agents"))["agents"]
            return {agent["agent"]: agent["state"] for agent in listed}

        async def wait_for_work() -> None:
            assert (await ok(c, "jct_claim_next", wait_seconds=30))["claimed"] is True

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_for_work)
            with anyio.fail_after(10):
                while (await states()).get("waiter") != "waiting":
                    await anyio.sleep(0.05)
            assert await states() == {"worker": "working", "failer": "idle", "waiter": "waiting"}
            for state, names in (("working", ["worker"]), ("waiting", ["waiter"]), ("idle", ["failer"])):
                listed = (await ok(a, "jct_list_agents", state=state))["agents"]
                assert [agent["agent"] for agent in listed] == names, state
            await enqueue(a, "for the waiter")
            core.waiters.wake()  # what the change feed does on seeing the enqueue: the waiting claim takes it
        assert (await states())["waiter"] == "working"
        refused = await a.call_tool("jct_list_agents", {"state": "asleep"})
        assert refused.is_error
