"""Touches (DESIGN section 16): declared at enqueue (default the target_path), shown with the task, and the claim
never hands out a task whose touches overlap those of a task holding its own on the same repository.

A task holds its touches while it runs and while its work waits for review or to be merged (`merge` pending,
queued or merging; the merge queue sets it, the tests here set it by hand). Every test runs on SQLite and, with
JCT_TEST_POSTGRES_URL, on PostgreSQL; the concurrent ones give each claimer its own engine and connection.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from server.config import Settings
from server.core.claims import queue
from server.core.missions import plan
from server.core.models import Actor
from server.core.operators import observe
from server.core.review import completion
from server.core.service import Core
from server.core.workflows import start
from server.core.workflows.definitions import read
from server.db import claims, tables
from server.errors import ErrorCode, JctError
from server.touches import overlaps
from tests.core.helpers import ADMIN, ALICE, BOB, built_core, count, enqueue, race, separate_cores, snapshot
from tests.support.flows import flows_with

pytestmark = pytest.mark.anyio

SettingsFactory = Callable[..., Settings]


async def touches_of(core: Core, task_id: str) -> list[str] | None:
    view = await observe.get_task(core, task_id)
    return view.task.target.touches


async def set_merge(core: Core, task_id: str, merge: str | None, status: str = "completed") -> None:
    """What the merge queue does to a task whose work waits (or was merged): the claim only reads it."""
    async with core.db.write() as conn:
        query = update(tables.tasks).where(tables.tasks.c.id == task_id)
        await conn.execute(query.values(merge=merge, status=status, active_run_id=None))


async def claim_next_id(core: Core, actor: Actor = ALICE, **filters: Any) -> str | None:
    claim = await queue.claim_next(core, actor, **filters)
    return claim.task_id if claim.claimed else None


# --- enqueue --------------------------------------------------------------------------------


async def test_touches_default_to_the_target_path_and_are_stored_normalised(core: Core) -> None:
    by_path = await enqueue(core, target_path="./src/api/")
    declared = await enqueue(core, target_path="src", touches=["./src/api/", "docs//*.md", "src/api", "src/**/"])
    nothing = await enqueue(core)
    opted_out = await enqueue(core, target_path="src", touches=[])

    assert await touches_of(core, by_path) == ["src/api"]
    assert await touches_of(core, declared) == ["src/api", "docs/*.md", "src/**"]
    assert await touches_of(core, nothing) is None
    assert await touches_of(core, opted_out) is None
    async with core.db.read() as conn:
        stored = dict((await conn.execute(select(tables.tasks.c.id, tables.tasks.c.touches))).all())
    # SQL NULL, not JSON null: what the claim looks for.
    assert stored[nothing] is None
    assert stored[opted_out] is None


async def test_the_task_list_and_the_claim_show_the_touches(core: Core) -> None:
    task_id = await enqueue(core, touches=["src/api/**"])
    listed = await queue.list_tasks(core)
    assert [(t.task_id, t.touches) for t in listed.tasks] == [(task_id, ["src/api/**"])]
    claim = await queue.claim_next(core, ALICE)
    assert claim.target is not None
    assert claim.target.touches == ["src/api/**"]
    assert "touches" not in (await queue.claim_next(core, BOB)).model_dump()  # nothing claimed, nothing shown


@pytest.mark.parametrize(
    ("touches", "named"),
    [
        ("src/api", "touches must be a list"),
        (["/etc/passwd"], "touches[0] '/etc/passwd' is absolute"),
        (["src", "C:\\work"], "touches[1] 'C:\\\\work' is absolute"),
        (["src/../../secrets"], "touches[0] 'src/../../secrets' contains '..'"),
        (["src", ".."], "touches[1] '..' contains '..'"),
        (["src/a\x1b[31m"], "touches[0] contains control characters"),
        (["src/a\nb"], "touches[0] contains control characters"),
        (["src", 7], "touches[1] must be a string"),
        ([""], "touches[0] must not be empty"),
        (["./"], "touches[0] './' names no path"),
        (["x" * 1025], "touches[0] is 1025 characters; the limit is 1024"),
        ([f"src/f{n}.py" for n in range(51)], "touches has 51 entries; the limit is 50"),
    ],
)
async def test_bad_touches_are_refused_naming_the_entry_and_nothing_is_written(
    core: Core, touches: Any, named: str
) -> None:
    before = await snapshot(core)
    with pytest.raises(JctError) as refused:
        await enqueue(core, touches=touches)
    assert refused.value.code == ErrorCode.INVALID_ARGUMENT
    assert named in refused.value.message
    assert refused.value.suggestion
    assert await snapshot(core) == before


async def test_an_idempotent_enqueue_counts_the_touches_in_its_payload(core: Core) -> None:
    first = await enqueue(core, idempotency_key="k", touches=["src/api"])
    assert await enqueue(core, idempotency_key="k", touches=["src/api"]) == first
    with pytest.raises(JctError) as refused:
        await enqueue(core, idempotency_key="k", touches=["src/web"])
    assert refused.value.code == ErrorCode.IDEMPOTENCY_CONFLICT
    # A key used without touches still matches its payload without them (hashes from before touches hold).
    plain = await enqueue(core, idempotency_key="plain", target_path="src")
    assert await enqueue(core, idempotency_key="plain", target_path="src") == plain


async def test_a_missions_tasks_declare_touches_or_take_their_target_path(core: Core) -> None:
    task = {"objective": "Change it", "operation": "code_change", "target_repo": "myorg/api"}
    made = await plan.create_mission(
        core,
        ADMIN,
        title="Touching",
        goal="Both kinds",
        phases=[
            {
                "name": "Only",
                "tasks": [
                    {**task, "key": "declared", "touches": ["src/api/**"]},
                    {**task, "key": "by-path", "target_path": "docs/"},
                ],
            }
        ],
    )
    ids = {t.key: t.task_id for t in made.tasks}
    assert await touches_of(core, ids["declared"]) == ["src/api/**"]
    assert await touches_of(core, ids["by-path"]) == ["docs"]

    with pytest.raises(JctError) as refused:
        await plan.create_mission(
            core,
            ADMIN,
            title="Bad",
            goal="Bad",
            phases=[{"name": "P", "tasks": [{**task, "key": "k", "touches": ["/x"]}]}],
        )
    assert refused.value.code == ErrorCode.INVALID_ARGUMENT
    assert "touches[0] '/x' is absolute" in refused.value.message


TOUCHING_FLOW = """\
name: touching
summary: Two steps, one declaring touches
steps:
  - id: declared
    operation: code_change
    objective: Change the API
    touches: ["./src/api/", "docs/api.md"]
  - id: by-path
    operation: docs
    objective: Document it
    target_path: docs
"""


async def test_a_workflows_steps_declare_touches_or_take_their_target_path(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    flows = flows_with(tmp_path, touching=TOUCHING_FLOW)
    async with built_core(make_settings(workflows_dir=flows)) as core:
        started = await start.start_workflow(core, ADMIN, "touching", {}, target_repo="myorg/api", target_path="src")
        ids = {t.key: t.task_id for t in started.tasks}
        assert await touches_of(core, ids["declared"]) == ["src/api", "docs/api.md"]
        assert await touches_of(core, ids["by-path"]) == ["docs"]

    (flows / "touching.yaml").write_text(TOUCHING_FLOW.replace("./src/api/", "../src"))
    problems = read(flows / "touching.yaml")
    assert isinstance(problems, list)
    assert [(p.line, p.reason) for p in problems] == [(7, "step 'declared': touches[0] '../src' contains '..'.")]


# --- the claim --------------------------------------------------------------------------------


async def test_claim_next_passes_over_a_task_that_overlaps_a_running_one(core: Core) -> None:
    running = await enqueue(core, priority="P0", touches=["src/api/**"])
    assert await claim_next_id(core) == running
    overlapping = await enqueue(core, priority="P0", touches=["src/api/users.py"])
    other_repo = await enqueue(core, priority="P1", touches=["src/api/users.py"], target_repo="myorg/web")
    disjoint = await enqueue(core, priority="P2", touches=["src/web", "docs/*.md"])

    assert await claim_next_id(core) == other_repo  # the same paths of another repository: no conflict
    assert await claim_next_id(core) == disjoint
    assert await claim_next_id(core) is None
    assert await count(core, "tasks", id=overlapping, status="queued") == 1


async def test_a_task_without_touches_is_never_held_back_and_holds_nothing(core: Core) -> None:
    everything = await enqueue(core, priority="P0", touches=["**"])
    assert await claim_next_id(core) == everything
    free = await enqueue(core, priority="P3")
    assert await claim_next_id(core) == free  # everything is held, and it declares nothing

    held_by_nobody = await enqueue(core, priority="P4", touches=["src/api"], target_repo="myorg/web")
    await enqueue(core, priority="P0", target_repo="myorg/web")  # running without touches: holds nothing
    assert await claim_next_id(core, repo_prefix="myorg/web") is not None
    assert await claim_next_id(core, repo_prefix="myorg/web") == held_by_nobody


async def test_claim_by_id_of_an_overlapping_task_answers_task_conflicts_naming_the_holder(core: Core) -> None:
    holder = await enqueue(core, touches=["src/api/**", "README.md"])
    await queue.claim_task(core, ALICE, holder)
    waiting = await enqueue(core, touches=["docs", "src/api/users.py", "README.md"])

    before = await snapshot(core)
    with pytest.raises(JctError) as refused:
        await queue.claim_task(core, BOB, waiting)
    assert refused.value.code == ErrorCode.TASK_CONFLICTS
    assert f"task {holder}" in refused.value.message
    assert "src/api/users.py overlaps src/api/**" in refused.value.message
    assert "README.md overlaps README.md" in refused.value.message
    assert "docs" not in refused.value.message
    assert "jct_claim_next" in refused.value.suggestion
    assert await snapshot(core) == before  # nothing claimed

    await completion.complete_task(core, ALICE, holder, success=True, summary="Done.")
    claimed = await queue.claim_task(core, BOB, waiting)  # the holder ended: its touches are free
    assert claimed.task_id == waiting


@pytest.mark.parametrize("merge", ["pending", "queued", "merging"])
async def test_work_waiting_for_review_or_merge_holds_its_touches(core: Core, merge: str) -> None:
    holder = await enqueue(core, touches=["src/api"])
    await queue.claim_task(core, ALICE, holder)
    await set_merge(core, holder, merge)
    waiting = await enqueue(core, touches=["src/api/users.py"])

    assert await claim_next_id(core, BOB) is None
    with pytest.raises(JctError) as refused:
        await queue.claim_task(core, BOB, waiting)
    assert refused.value.code == ErrorCode.TASK_CONFLICTS

    await set_merge(core, holder, "merged")
    assert await claim_next_id(core, BOB) == waiting


async def test_a_task_back_in_the_queue_with_a_merge_state_does_not_wait_for_itself(core: Core) -> None:
    task_id = await enqueue(core, touches=["src/api"])
    await set_merge(core, task_id, "queued", status="queued")
    assert await claim_next_id(core) == task_id


async def test_claim_next_walks_past_many_held_back_tasks_in_claim_order(core: Core) -> None:
    """More held-back tasks than the walk reads at a time, then the ones that fit, taken in priority order."""
    holder = await enqueue(core, priority="P0", touches=["src/shared.py"])
    assert await claim_next_id(core) == holder
    for n in range(claims.WALK_BATCH + 6):
        await enqueue(core, priority="P1", touches=[f"src/x{n}.py", "src/shared.py"], objective=f"held {n}")
    late = await enqueue(core, priority="P3", touches=["src/late.py"])
    early = await enqueue(core, priority="P2", touches=["src/early.py"])
    analysis = await enqueue(core, priority="P4", touches=["src/shared.py"], operation="analysis")

    assert await claim_next_id(core) == early
    assert await claim_next_id(core) == late
    assert await claim_next_id(core, operation="analysis") is None  # the operation filter holds on the walk
    assert await claim_next_id(core) is None
    await completion.complete_task(core, ALICE, holder, success=True, summary="Done.")
    assert await claim_next_id(core, operation="analysis") == analysis


# --- under contention -----------------------------------------------------------------------

# Each shared pattern overlaps every other (a directory, a file in it, globs reaching into it); each pkg
# pattern overlaps none.
SHARED = ["src/shared", "src/shared/util.py", "src/shared/**/*.py", "src/sha*"]
DISJOINT = [f"src/pkg{n}/**" for n in range(12)]


async def test_concurrent_claimers_never_run_two_overlapping_tasks_and_claim_every_disjoint_one(
    core: Core, make_settings: SettingsFactory
) -> None:
    touches: dict[str, list[str]] = {}
    for n, pattern in enumerate(SHARED * 2 + DISJOINT):
        touches[await enqueue(core, priority=f"P{n % 3}", touches=[pattern], objective=f"task {n}")] = [pattern]
    untouched = {await enqueue(core, priority="P1", objective=f"free {n}") for n in range(4)}
    left = len(SHARED) * 2 - 1  # nothing ends here: one shared task runs, the others wait
    claimed: list[str] = []

    async def claimer(c: Core, n: int) -> None:
        actor = Actor(actor_id=f"agent-{n}", session=f"agent-{n}")
        while True:
            claim = await queue.claim_next(c, actor)
            if claim.claimed:
                assert claim.task_id is not None
                claimed.append(claim.task_id)
            # Nothing for this claimer just now: on PostgreSQL a repository's lock held by another claimer
            # skips its tasks for this call, so it asks again until only the waiting ones are left.
            elif await count(c, "tasks", status="queued") <= left:
                return

    async with separate_cores(make_settings(), 16) as cores:
        await race(cores, claimer)

    assert len(claimed) == len(set(claimed))
    assert untouched <= set(claimed)
    held = [task_id for task_id in claimed if task_id in touches]
    for a, b in itertools.combinations(held, 2):
        assert not any(overlaps(x, y) for x in touches[a] for y in touches[b]), (touches[a], touches[b])
    assert {touches[t][0] for t in held} >= set(DISJOINT)
    assert len(held) == len(DISJOINT) + 1
    assert await count(core, "tasks", status="queued") == left


async def test_claim_by_id_races_answer_one_winner_and_the_rest_conflict_or_lose(
    core: Core, make_settings: SettingsFactory
) -> None:
    """Twenty claimers each claim by id one of twenty tasks that all touch one file: one runs."""
    ids = [await enqueue(core, touches=["src/app.py"], objective=f"app {n}") for n in range(20)]
    outcomes: list[str] = []

    async def claimer(c: Core, n: int) -> None:
        actor = Actor(actor_id=f"agent-{n}", session=f"agent-{n}")
        try:
            await queue.claim_task(c, actor, ids[n])
        except JctError as err:
            outcomes.append(err.code)
        else:
            outcomes.append("claimed")

    async with separate_cores(make_settings(), 20) as cores:
        await race(cores, claimer)

    assert Counter(outcomes) == {"claimed": 1, ErrorCode.TASK_CONFLICTS: 19}
    assert await count(core, "tasks", status="running") == 1
    assert await count(core, "runs") == 1
