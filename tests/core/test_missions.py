"""Missions (DESIGN section 11) through the real MCP client, on both databases: phases and dependencies hold,
unblocking happens in the approving transaction, decisions and blockers carry across agents, bad graphs
store nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from mcp import Client
from sqlalchemy import select

from server.core.missions import plan
from server.core.service import Core
from server.db import tables
from server.errors import ErrorCode, JctError
from tests.core.helpers import snapshot
from tests.support.agents import ADMIN
from tests.support.missions import mission, task
from tests.tools.conftest import ClientFactory, connect, error, ok

pytestmark = pytest.mark.anyio
__all__ = ["connect"]  # the tools' in-memory client fixture, used here too

PATCH = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"


@pytest.fixture
async def agent(connect: ClientFactory) -> AsyncIterator[Client]:
    async with connect("agent") as client:
        yield client


async def created(client: Client, spec: dict[str, Any]) -> dict[str, str]:
    result = await ok(client, "jct_create_mission", **spec)
    return {item["key"]: item["task_id"] for item in result["tasks"]} | {"mission": result["mission_id"]}


async def finish(client: Client, task_id: str, **extra: Any) -> dict[str, Any]:
    """Claim this task by id, report a diff, complete it (auto-approved by default)."""
    claim = await ok(client, "jct_claim_task", task_id=task_id)
    run = {"task_id": task_id, "run_id": claim["run_id"]}
    await ok(client, "jct_report_artifact", **run, title="Diff", artifact_type="code_patch", content=PATCH)
    return await ok(client, "jct_complete_task", **run, success=True, summary="done", **extra)


async def statuses(core: Core, ids: dict[str, str]) -> dict[str, str]:
    tasks = tables.tasks
    async with core.db.read() as conn:
        rows = (await conn.execute(select(tasks.c.id, tasks.c.status).where(tasks.c.id.in_(ids.values())))).all()
    by_id = {str(row[0]): str(row[1]) for row in rows}
    return {key: by_id[task_id] for key, task_id in ids.items() if key != "mission"}


async def test_a_task_waits_for_its_dependency_and_is_queued_when_that_is_approved(agent: Client, core: Core) -> None:
    ids = await created(agent, mission([task("spec"), task("code", "spec"), task("docs", "code")]))
    assert await statuses(core, ids) == {"spec": "queued", "code": "blocked", "docs": "blocked"}

    refused = await error(agent, "jct_claim_task", task_id=ids["code"])
    assert refused["code"] == "TASK_BLOCKED"
    assert ids["spec"] in refused["message"]
    nxt = await ok(agent, "jct_claim_next")
    assert nxt["task_id"] == ids["spec"]  # never a blocked task
    await ok(agent, "jct_release_task", task_id=ids["spec"], run_id=nxt["run_id"], reason="by id below")

    await finish(agent, ids["spec"])
    assert await statuses(core, ids) == {"spec": "completed", "code": "queued", "docs": "blocked"}
    trail = await ok(agent, "jct_get_audit_trail", entity_kind="Task", entity_id=ids["code"])
    assert [e["action"] for e in trail["entries"]][-1] == "task.unblocked"


async def test_a_phase_waits_for_every_task_of_the_phase_before_it(agent: Client, core: Core) -> None:
    ids = await created(agent, mission([task("a"), task("b")], [task("c")]))
    assert (await statuses(core, ids))["c"] == "blocked"
    await finish(agent, ids["a"])
    assert (await statuses(core, ids))["c"] == "blocked"
    await finish(agent, ids["b"])
    assert (await statuses(core, ids))["c"] == "queued"
    await finish(agent, ids["c"])
    view = await ok(agent, "jct_get_mission", mission_id=ids["mission"])
    assert view["mission"]["status"] == "completed"
    assert view["progress"]["percent_done"] == 100
    assert [phase["status"] for phase in view["phases"]] == ["done", "done"]


async def test_only_approval_unblocks_not_completion(connect: ClientFactory, make_settings: Any) -> None:
    core = Core.build(make_settings(review_auto_approve=False))
    async with connect("agent", core=core) as agent, connect("reviewer", core=core) as boss:
        ids = await created(agent, mission([task("a"), task("b", "a")]))
        first = await finish(agent, ids["a"])
        assert first["review"]["status"] == "awaiting_manual_review"
        assert (await statuses(core, ids))["b"] == "blocked"
        pack = first["evidence_pack"]["id"]
        await ok(boss, "jct_submit_review", evidence_pack_id=pack, decision="needs_changes", reason="Add a test")
        assert (await statuses(core, ids)) == {"a": "queued", "b": "blocked"}
        second = await finish(agent, ids["a"])
        pack = second["evidence_pack"]["id"]
        await ok(boss, "jct_submit_review", evidence_pack_id=pack, decision="approved", reason="Good")
        assert (await statuses(core, ids))["b"] == "queued"
    await core.db.dispose()


async def test_decisions_reach_the_briefings_of_later_tasks(agent: Client) -> None:
    ids = await created(agent, mission([task("design")], [task("build")]))
    claim = await ok(agent, "jct_claim_task", task_id=ids["design"])
    assert claim["decisions"] == []
    decision = {"decision": "Use PostgreSQL", "rationale": "We need SKIP LOCKED", "alternatives": ["SQLite"]}
    run = {"task_id": ids["design"], "run_id": claim["run_id"]}
    await ok(agent, "jct_report_progress", **run, message="Chose the store", kind="decision", data=decision)
    await ok(agent, "jct_report_artifact", **run, title="Diff", artifact_type="code_patch", content=PATCH)
    await ok(agent, "jct_complete_task", **run, success=True, summary="designed")

    later = await ok(agent, "jct_claim_task", task_id=ids["build"])
    assert [d["decision"] for d in later["decisions"]] == ["Use PostgreSQL"]
    assert later["decisions"][0]["rationale"] == "We need SKIP LOCKED"
    assert later["decisions"][0]["task_id"] == ids["design"]
    context = await ok(agent, "jct_get_context", task_id=ids["build"])
    assert context["decisions"][0]["alternatives"] == ["SQLite"]
    assert context["mission_id"] == ids["mission"]


async def test_a_blocker_for_a_person_is_never_approved_automatically(agent: Client, core: Core) -> None:
    ids = await created(agent, mission([task("risky"), task("after", "risky")]))
    claim = await ok(agent, "jct_claim_task", task_id=ids["risky"])
    run = {"task_id": ids["risky"], "run_id": claim["run_id"]}
    await ok(
        agent, "jct_report_progress", **run, message="Needs a prod key", kind="blocker", data={"requires_human": True}
    )
    view = await ok(agent, "jct_get_mission", mission_id=ids["mission"])
    assert [(b["task_id"], b["kind"]) for b in view["blockers"]] == [(ids["risky"], "human")]
    await ok(agent, "jct_report_artifact", **run, title="Diff", artifact_type="code_patch", content=PATCH)
    done = await ok(agent, "jct_complete_task", **run, success=True, summary="done")
    assert done["review"]["status"] == "awaiting_manual_review"  # though the verdict would auto-approve
    assert (await statuses(core, ids))["after"] == "blocked"
    bad = await error(agent, "jct_report_progress", **run, message="x", kind="progress", data={"requires_human": True})
    assert bad["code"] in ("INVALID_ARGUMENT", "TASK_NOT_CLAIMED")


async def test_a_failed_dependency_keeps_its_dependents_blocked_and_is_named(agent: Client, core: Core) -> None:
    ids = await created(agent, mission([task("a"), task("b", "a")]))
    claim = await ok(agent, "jct_claim_task", task_id=ids["a"])
    await ok(agent, "jct_complete_task", task_id=ids["a"], run_id=claim["run_id"], success=False, summary="no")
    assert await statuses(core, ids) == {"a": "failed", "b": "blocked"}
    view = await ok(agent, "jct_get_mission", mission_id=ids["mission"])
    kinds = {(b["task_id"], b["kind"]) for b in view["blockers"]}
    assert kinds == {(ids["a"], "failed"), (ids["b"], "dependency_failed")}
    assert all(b["action"] for b in view["blockers"])


GRAPHS = {
    "a cycle through three tasks": mission([task("a", "c"), task("b", "a"), task("c", "b")]),
    "an unknown key": mission([task("a", "nope")]),
    "a dependency on a later phase": mission([task("a", "b")], [task("b")]),
    "a phase with no tasks": mission([task("a")], []),
    "no phases": {"title": "t", "goal": "g", "phases": []},
    "a key used twice": mission([task("a"), task("a")]),
    "a task that depends on itself": mission([task("a", "a")]),
    "ten thousand tasks": mission([task(f"t{n}") for n in range(10_000)]),
    "a task that fails the gate": mission([task("a", time_budget_seconds=5)]),
}


@pytest.mark.parametrize("case", list(GRAPHS), ids=list(GRAPHS))
async def test_a_bad_graph_is_refused_and_creates_nothing(agent: Client, core: Core, case: str) -> None:
    before = await snapshot(core)
    refused = await error(agent, "jct_create_mission", **GRAPHS[case])
    assert refused["code"] in ("INVALID_ARGUMENT", "BUDGET_OUT_OF_RANGE")
    assert await snapshot(core) == before
    if case.startswith("a cycle"):
        assert "a -> c -> b -> a" in refused["message"] or "->" in refused["message"]


@pytest.mark.parametrize("budget", ["ten", 600.5, True], ids=["text", "fraction", "bool"])
async def test_a_plain_json_task_budget_must_be_whole_seconds(core: Core, budget: object) -> None:
    """`jct mission create FILE` passes the file's JSON to the core unchecked by any tool schema: the gate
    refuses a budget that is not a whole number of seconds, and stores nothing."""
    before = await snapshot(core)
    spec = mission([task("a", time_budget_seconds=budget)])
    with pytest.raises(JctError) as refused:
        await plan.create_mission(core, ADMIN, title=spec["title"], goal=spec["goal"], phases=spec["phases"])
    assert refused.value.code == ErrorCode.INVALID_ARGUMENT
    assert "whole number of seconds" in refused.value.message
    assert await snapshot(core) == before


async def test_tasks_join_a_running_mission_only_from_it(agent: Client, core: Core) -> None:
    ids = await created(agent, mission([task("a")]))
    other = await created(agent, mission([task("x")], title="Other"))
    refused = await error(
        agent,
        "jct_enqueue_task",
        objective="Depends across missions",
        operation="docs",
        target_repo="myorg/api",
        mission_id=ids["mission"],
        depends_on=[other["x"]],
    )
    assert refused["code"] == "INVALID_ARGUMENT"
    assert other["x"] in refused["message"]
    missing = await error(
        agent, "jct_enqueue_task", objective="o", operation="docs", target_repo="a/b", mission_id=other["x"]
    )
    assert missing["code"] == "MISSION_NOT_FOUND"

    joined = await ok(
        agent,
        "jct_enqueue_task",
        objective="Document it",
        operation="docs",
        target_repo="myorg/api",
        mission_id=ids["mission"],
        phase=1,
        depends_on=[ids["a"]],
    )
    assert joined["status"] == "blocked"
    await finish(agent, ids["a"])
    assert (await statuses(core, {"doc": joined["task_id"]}))["doc"] == "queued"
    view = await ok(agent, "jct_get_mission", mission_id=ids["mission"], include=["tasks"])
    assert [phase["name"] for phase in view["phases"]] == ["Phase 0", "Phase 2"]
    assert {t["task_id"] for t in view["tasks"]} == {ids["a"], joined["task_id"]}


async def test_cancelling_a_mission_cancels_what_is_not_done(agent: Client, core: Core) -> None:
    ids = await created(agent, mission([task("a"), task("b")], [task("c")]))
    await finish(agent, ids["a"])
    await ok(agent, "jct_claim_task", task_id=ids["b"])
    cancelled = await ok(agent, "jct_cancel_mission", mission_id=ids["mission"], reason="Scope changed")
    assert cancelled["tasks_cancelled"] == 2
    assert await statuses(core, ids) == {"a": "completed", "b": "cancelled", "c": "cancelled"}
    again = await error(agent, "jct_cancel_mission", mission_id=ids["mission"], reason="twice")
    assert again["code"] == "INVALID_ARGUMENT"
    listed = await ok(agent, "jct_list_missions", status="cancelled")
    assert [m["mission_id"] for m in listed["missions"]] == [ids["mission"]]


async def test_creating_a_mission_twice_with_one_key_makes_one(agent: Client, core: Core) -> None:
    spec = mission([task("a")], [task("b")]) | {"idempotency_key": "release-7"}
    first = await ok(agent, "jct_create_mission", **spec)
    rows = await snapshot(core)
    again = await ok(agent, "jct_create_mission", **spec)
    assert again["duplicate"] is True
    assert again["mission_id"] == first["mission_id"]
    assert await snapshot(core) == rows
    changed = spec | {"title": "Another"}
    assert (await error(agent, "jct_create_mission", **changed))["code"] == "IDEMPOTENCY_CONFLICT"


async def enqueue_into(client: Client, mission_id: str, phase: int, name: str, *depends_on: str) -> str:
    joined = await ok(
        client,
        "jct_enqueue_task",
        objective=f"Do {name}",
        operation="code_change",
        target_repo="myorg/api",
        mission_id=mission_id,
        phase=phase,
        depends_on=list(depends_on),
    )
    return str(joined["task_id"])


async def test_a_task_added_to_a_finished_phase_reopens_it(agent: Client, core: Core) -> None:
    ids = await created(agent, mission([task("a")], [task("x"), task("d", "x")]))
    await finish(agent, ids["a"])
    assert await statuses(core, ids) == {"a": "completed", "x": "queued", "d": "blocked"}

    ids["n"] = await enqueue_into(agent, ids["mission"], 0, "n")
    # Phase 0 is open again: what of phase 1 had not started waits for it once more.
    assert await statuses(core, ids) == {"a": "completed", "x": "blocked", "d": "blocked", "n": "queued"}
    assert (await error(agent, "jct_claim_task", task_id=ids["x"]))["code"] == "TASK_BLOCKED"
    assert (await ok(agent, "jct_claim_next"))["task_id"] == ids["n"]
    await ok(agent, "jct_release_task", task_id=ids["n"], reason="by id below")

    await finish(agent, ids["n"])
    # The phase is done again; d still waits for x, whatever the count of phase-0 approvals.
    assert await statuses(core, ids) == {"a": "completed", "x": "queued", "d": "blocked", "n": "completed"}
    assert (await error(agent, "jct_claim_task", task_id=ids["d"]))["code"] == "TASK_BLOCKED"
    await finish(agent, ids["x"])
    assert (await statuses(core, ids))["d"] == "queued"
    await finish(agent, ids["d"])
    view = await ok(agent, "jct_get_mission", mission_id=ids["mission"])
    assert view["mission"]["status"] == "completed"


async def test_a_reopened_phase_holds_back_every_later_phase(agent: Client, core: Core) -> None:
    ids = await created(agent, mission([task("a")], [task("b")], [task("c")]))
    await finish(agent, ids["a"])
    await finish(agent, ids["b"])
    assert (await statuses(core, ids))["c"] == "queued"
    ids["n"] = await enqueue_into(agent, ids["mission"], 0, "n")
    assert (await statuses(core, ids))["c"] == "blocked"
    await finish(agent, ids["n"])
    assert (await statuses(core, ids))["c"] == "queued"


async def test_phases_and_dependencies_hold_while_claimers_race_a_growing_mission(
    connect: ClientFactory, core: Core
) -> None:
    """Claimers drain the mission while tasks join its first phase and approvals happen. Checked from what the
    clients saw, with no false alarm: a claim that began after a task joined phase 0 and returned before that
    task's completion even began claimed a later phase early; likewise a claim of d before x's completion."""
    clock = iter(range(1_000_000))
    claimed: dict[str, tuple[int, int]] = {}  # task -> (claim began, claim returned)
    completing: dict[str, int] = {}  # task -> when its completion (the approval) began
    joined: dict[str, int] = {}  # phase-0 task -> when its enqueue returned
    async with connect("planner", core=core) as planner:
        ids = await created(planner, mission([task("a")], [task("x"), task("d", "x"), task("y")]))
        phase_of = {ids["a"]: 0, ids["x"]: 1, ids["d"]: 1, ids["y"]: 1}
        joined[ids["a"]] = next(clock)
        await finish(planner, ids["a"])
        completing[ids["a"]] = -1
        # Phase 0 is done and x is queued when the first task joins it; more join while the claimers race.
        first = await enqueue_into(planner, ids["mission"], 0, "late-0")
        phase_of[first] = 0
        joined[first] = next(clock)
        added = 1

        async def claimer(name: str) -> None:
            async with connect(name, core=core) as client:
                while True:
                    began = next(clock)
                    claim = await ok(client, "jct_claim_next")
                    if not claim.get("task_id"):
                        if added == 6 and len(completing) == len(phase_of):
                            return
                        await anyio.sleep(0.005)
                        continue
                    task_id = str(claim["task_id"])
                    claimed[task_id] = (began, next(clock))
                    run = {"task_id": task_id, "run_id": claim["run_id"]}
                    await ok(
                        client, "jct_report_artifact", **run, title="Diff", artifact_type="code_patch", content=PATCH
                    )
                    completing[task_id] = next(clock)
                    await ok(client, "jct_complete_task", **run, success=True, summary="done")

        async with anyio.create_task_group() as group:
            for n in range(8):
                group.start_soon(claimer, f"claimer-{n}")
            for n in range(1, 6):
                task_id = await enqueue_into(planner, ids["mission"], 0, f"late-{n}")
                phase_of[task_id] = 0
                joined[task_id] = next(clock)
                added += 1
                await anyio.sleep(0.01 * (n % 3))

    assert set(claimed) | {ids["a"]} == set(phase_of)
    for task_id, (began, returned) in claimed.items():
        if phase_of[task_id] == 1:
            early = [t for t, at in joined.items() if at < began and t in completing and completing[t] > returned]
            assert not early, f"{task_id} of phase 1 was claimed before {early} of phase 0 was approved"
    assert completing[ids["x"]] < claimed[ids["d"]][1], "d was claimed before x was approved"
    async with core.db.read() as conn:
        row = (await conn.execute(select(tables.missions.c.status).where(tables.missions.c.id == ids["mission"]))).one()
    assert row[0] == "completed"


async def test_get_mission_lists_milestones_and_filters_its_events_by_agent(connect: ClientFactory, core: Core) -> None:
    async with connect("ann", core=core) as ann, connect("ben", core=core) as ben:
        ids = await created(ann, mission([task("api"), task("ui")]))
        for client, key in ((ann, "api"), (ben, "ui")):
            claim = await ok(client, "jct_claim_task", task_id=ids[key])
            run = {"task_id": ids[key], "run_id": claim["run_id"]}
            await ok(client, "jct_report_progress", **run, message=f"{key} half done", kind="milestone")
            await ok(client, "jct_report_progress", **run, message="Chose", kind="decision", data={"decision": key})

        every = await ok(ann, "jct_get_mission", mission_id=ids["mission"], include=["milestones"])
        assert every["progress"]["milestones"] == 2
        assert [(m["message"], m["agent"], m["task_id"]) for m in every["milestones"]] == [
            ("ui half done", "ben", ids["ui"]),
            ("api half done", "ann", ids["api"]),
        ]
        assert [(d["decision"], d["agent"]) for d in every["decisions"]] == [("ui", "ben"), ("api", "ann")]
        assert "tasks" not in every

        bens = await ok(ann, "jct_get_mission", mission_id=ids["mission"], include=["milestones"], agent="ben")
        assert [m["message"] for m in bens["milestones"]] == ["ui half done"]
        assert [d["decision"] for d in bens["decisions"]] == ["ui"]
        nobody = await ok(ann, "jct_get_mission", mission_id=ids["mission"], agent="carl")
        assert nobody["decisions"] == []
        assert "milestones" not in nobody
        refused = await error(ann, "jct_get_mission", mission_id=ids["mission"], include=["everything"])
        assert refused["code"] == "INVALID_ARGUMENT"
