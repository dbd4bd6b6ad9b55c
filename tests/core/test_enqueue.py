"""Enqueue: idempotency keys, the policy gate, and tasks without CWOM objects."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from server.config import Settings
from server.core import results
from server.core.briefings import intake
from server.core.claims import queue
from server.core.service import Core
from server.errors import ErrorCode, JctError
from tests.core.helpers import ADMIN, ALICE, count, enqueue, race, separate_cores, snapshot

pytestmark = pytest.mark.anyio

SettingsFactory = Callable[..., Settings]

VALID: dict[str, Any] = {
    "objective": "Add input validation",
    "operation": "code_change",
    "target_repo": "myorg/api",
    "acceptance_criteria": ["Email is validated"],
    "context_summary": "The endpoint accepts anything.",
}


# --- idempotency -------------------------------------------------------------------------


async def test_same_key_and_payload_returns_the_same_task_as_a_duplicate(core: Core) -> None:
    first = await intake.enqueue_task(core, ADMIN, **VALID, idempotency_key="deploy-42")
    rows = await snapshot(core)

    again = await intake.enqueue_task(core, ADMIN, **VALID, idempotency_key="deploy-42")

    assert first.duplicate is False
    assert again.duplicate is True
    assert (again.task_id, again.trace_id, again.cwom_issue_id) == (first.task_id, first.trace_id, first.cwom_issue_id)
    assert await snapshot(core) == rows
    assert await count(core, "tasks") == 1


async def test_a_duplicate_reports_where_the_task_stands_now(core: Core) -> None:
    first = await intake.enqueue_task(core, ADMIN, **VALID, idempotency_key="k")
    await queue.claim_task(core, ALICE, first.task_id)

    again = await intake.enqueue_task(core, ADMIN, **VALID, idempotency_key="k")

    assert (again.task_id, again.status, again.duplicate) == (first.task_id, "running", True)


async def test_same_key_with_a_different_payload_is_an_idempotency_conflict(core: Core) -> None:
    await intake.enqueue_task(core, ADMIN, **VALID, idempotency_key="deploy-42")
    rows = await snapshot(core)

    with pytest.raises(JctError) as err:
        await intake.enqueue_task(core, ADMIN, **{**VALID, "priority": "P0"}, idempotency_key="deploy-42")

    assert err.value.code is ErrorCode.IDEMPOTENCY_CONFLICT
    assert await snapshot(core) == rows


async def test_different_keys_make_different_tasks(core: Core) -> None:
    a = await intake.enqueue_task(core, ADMIN, **VALID, idempotency_key="a")
    b = await intake.enqueue_task(core, ADMIN, **VALID, idempotency_key="b")
    assert a.task_id != b.task_id
    assert await count(core, "tasks") == 2


async def test_ten_concurrent_enqueues_with_one_key_make_one_task(core: Core, make_settings: SettingsFactory) -> None:
    outcomes: list[results.Enqueued] = []

    async def enqueuer(c: Core, _n: int) -> None:
        outcomes.append(await intake.enqueue_task(c, ADMIN, **VALID, idempotency_key="once"))

    async with separate_cores(make_settings(), 10) as cores:
        await race(cores, enqueuer)

    assert len({o.task_id for o in outcomes}) == 1
    assert sorted(o.duplicate for o in outcomes) == [False] + [True] * 9
    assert await count(core, "tasks") == 1
    assert await count(core, "issues") == 1
    assert await count(core, "context_packets") == 1
    assert await count(core, "constraint_snapshots") == 1
    assert await count(core, "audit_log", action="task.enqueued") == 1


# --- the policy gate ---------------------------------------------------------------------

REJECTIONS = [
    ("unknown operation", {"operation": "deploy"}, ErrorCode.INVALID_ARGUMENT),
    ("unknown priority", {"priority": "P9"}, ErrorCode.INVALID_ARGUMENT),
    ("budget too small", {"time_budget_seconds": 29}, ErrorCode.BUDGET_OUT_OF_RANGE),
    ("budget too large", {"time_budget_seconds": 86_401}, ErrorCode.BUDGET_OUT_OF_RANGE),
    ("repo outside the allowed prefixes", {"target_repo": "evilcorp/api"}, ErrorCode.REPO_NOT_ALLOWED),
    ("repo that only shares a stem", {"target_repo": "myorg-evil/api"}, ErrorCode.REPO_NOT_ALLOWED),
    ("oversized objective", {"objective": "x" * 4_001}, ErrorCode.INVALID_ARGUMENT),
    ("empty objective", {"objective": "   "}, ErrorCode.INVALID_ARGUMENT),
    ("NUL in the objective", {"objective": "fix\x00it"}, ErrorCode.INVALID_ARGUMENT),
    ("escape in the objective", {"objective": "fix \x1b[31mit"}, ErrorCode.INVALID_ARGUMENT),
    ("newline in the repo", {"target_repo": "myorg/api\nmyorg/other"}, ErrorCode.INVALID_ARGUMENT),
    ("control character in a criterion", {"acceptance_criteria": ["ok", "bad\x07"]}, ErrorCode.INVALID_ARGUMENT),
    ("target_path climbing out", {"target_path": "../secrets"}, ErrorCode.INVALID_ARGUMENT),
    ("target_path climbing out midway", {"target_path": "src/../../etc"}, ErrorCode.INVALID_ARGUMENT),
    ("absolute target_path", {"target_path": "/etc/passwd"}, ErrorCode.INVALID_ARGUMENT),
    ("windows absolute target_path", {"target_path": "C:\\Windows"}, ErrorCode.INVALID_ARGUMENT),
    ("too many criteria", {"acceptance_criteria": [f"c{n}" for n in range(51)]}, ErrorCode.INVALID_ARGUMENT),
    ("oversized criterion", {"acceptance_criteria": ["x" * 1_001]}, ErrorCode.INVALID_ARGUMENT),
    ("ref with spaces", {"target_ref": "main; rm -rf /"}, ErrorCode.INVALID_ARGUMENT),
    # An option-like ref would be stored and turn verification off at claim (issue 25): refused at enqueue.
    ("option-like ref", {"target_ref": "--output=/x"}, ErrorCode.INVALID_ARGUMENT),
    ("short option ref", {"target_ref": "-b"}, ErrorCode.INVALID_ARGUMENT),
    ("ref range", {"target_ref": "main..evil"}, ErrorCode.INVALID_ARGUMENT),
    ("reflog ref", {"target_ref": "main@{1}"}, ErrorCode.INVALID_ARGUMENT),
    ("ref with a path", {"target_ref": "main:secrets.txt"}, ErrorCode.INVALID_ARGUMENT),
    ("oversized idempotency key", {"idempotency_key": "k" * 257}, ErrorCode.INVALID_ARGUMENT),
]


@pytest.mark.parametrize(("overrides", "code"), [r[1:] for r in REJECTIONS], ids=[r[0] for r in REJECTIONS])
async def test_the_policy_gate_rejects_bad_tasks_and_changes_nothing(
    make_settings: SettingsFactory, overrides: dict[str, Any], code: ErrorCode
) -> None:
    core = Core.build(make_settings(allowed_repo_prefixes=["myorg/"]))
    try:
        await intake.enqueue_task(core, ADMIN, **VALID)  # so "unchanged" is about a database with rows in it
        rows = await snapshot(core)

        with pytest.raises(JctError) as err:
            await intake.enqueue_task(core, ADMIN, **{**VALID, **overrides})

        assert err.value.code is code
        assert err.value.suggestion
        assert await snapshot(core) == rows
    finally:
        await core.db.dispose()


@pytest.mark.parametrize("budget", [30, 86_400])
async def test_the_budget_bounds_are_inclusive(core: Core, budget: int) -> None:
    task_id = await enqueue(core, time_budget_seconds=budget)
    assert await count(core, "tasks", id=task_id, time_budget_seconds=budget) == 1


async def test_the_gate_accepts_repos_under_an_allowed_prefix(make_settings: SettingsFactory) -> None:
    core = Core.build(make_settings(allowed_repo_prefixes=["myorg/", "partner/"]))
    try:
        await intake.enqueue_task(core, ADMIN, **{**VALID, "target_repo": "partner/sdk"})
        assert await count(core, "tasks", target_repo="partner/sdk") == 1
    finally:
        await core.db.dispose()


# --- without CWOM objects ----------------------------------------------------------------


async def test_create_cwom_false_stores_only_the_task(core: Core) -> None:
    enqueued = await intake.enqueue_task(core, ADMIN, **VALID, create_cwom=False)

    assert enqueued.cwom_issue_id is None
    assert await count(core, "tasks") == 1
    assert await count(core, "issues") == 0
    assert await count(core, "context_packets") == 0
    assert await count(core, "constraint_snapshots") == 0
    assert await count(core, "audit_log", action="issue.created") == 0
    claim = await queue.claim_task(core, ALICE, enqueued.task_id)
    assert claim.context_packet is None
    assert claim.constraints.time_budget_seconds == 3600
