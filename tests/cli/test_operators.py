"""The operator's commands through the real `jct` process: cancel, requeue (with feedback), priority, agents,
stuck and audit print what changed or what is there, and one line when they cannot."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from server.core.briefings import intake
from server.core.claims import queue
from server.core.models import Actor
from server.core.operators import observe
from server.core.review import completion
from server.core.service import Core
from tests.cli.test_queue import OPERATOR, operator_env, row, settings_for
from tests.support.command import jct, jct_process, one_error_line

pytestmark = pytest.mark.anyio

AGENT = Actor(actor_id="agent-1", name="agent-1", session="agent-1")
ADMIN = Actor(actor_id=OPERATOR, actor_kind="human", admin=True)


@pytest.fixture
async def core(tmp_path: Path) -> AsyncIterator[Core]:
    from server.core import schema

    built = Core.build(settings_for(f"sqlite:///{tmp_path / 'cli.db'}", tmp_path))
    try:
        await schema.upgrade(built)
        yield built
    finally:
        await built.db.dispose()


async def test_cancel_requeue_with_feedback_and_priority(tmp_path: Path, core: Core) -> None:
    env = operator_env(tmp_path)
    task = await intake.enqueue_task(core, ADMIN, objective="Fix the login", operation="code_change", target_repo="a/b")

    code, out, err = await jct(tmp_path, "priority", task.task_id, "p0", env=env)
    assert code == 0, err
    assert out.strip() == f"task {task.task_id}: priority P2 -> P0"

    code, out, err = await jct(tmp_path, "cancel", task.task_id, "--reason", "wrong repo", env=env)
    assert code == 0, err
    assert out.strip() == f"cancelled task {task.task_id}"

    code, out, err = await jct(tmp_path, "cancel", task.task_id, "--reason", "again", env=env)
    assert code == 1
    assert "INVALID_ARGUMENT" in one_error_line(err)

    code, out, err = await jct(tmp_path, "priority", task.task_id, "P1", env=env)
    assert code == 1
    assert "cancelled" in one_error_line(err)

    args = ("requeue", task.task_id, "--reason", "right repo", "--feedback", "Touch only src/login.py.")
    code, out, err = await jct(tmp_path, *args, env=env)
    assert code == 0, err
    assert out.strip() == f"requeued task {task.task_id}: queued, briefing v2"
    context = await observe.get_context(core, task.task_id)
    assert context.context_packet is not None
    assert [f.reason for f in context.context_packet.review_feedback] == ["Touch only src/login.py."]

    code, out, err = await jct(tmp_path, "requeue", task.task_id, "--reason", "again", env=env)
    assert code == 1
    assert "only failed, cancelled or rejected" in one_error_line(err)


async def test_agents_stuck_and_audit(tmp_path: Path, core: Core) -> None:
    env = operator_env(tmp_path)
    held = await intake.enqueue_task(core, ADMIN, objective="Held work", operation="docs", target_repo="a/b")
    failed = await intake.enqueue_task(
        core, ADMIN, objective="[bold]Failed[/bold]", operation="docs", target_repo="a/b"
    )
    claim = await queue.claim_task(core, AGENT, held.task_id)
    other = await queue.claim_task(core, AGENT, failed.task_id)
    await completion.complete_task(core, AGENT, failed.task_id, run_id=other.run_id, success=False, summary="no")

    code, out, err = await jct_process(tmp_path, "agents", env=env)
    assert code == 0, err
    assert "1 agent(s)" in out
    assert row(out, "agent-1", "agent-1", held.task_id, "Held work")
    assert claim.lease_expires_at is not None

    code, out, err = await jct_process(tmp_path, "stuck", env=env)
    assert code == 0, err
    assert "0 stuck item(s)" in out

    code, out, err = await jct_process(tmp_path, "audit", "--actor", OPERATOR, "--action", "task.enqueued", env=env)
    assert code == 0, err
    assert "2 audit row(s), newest first" in out
    assert out.index(failed.task_id) < out.index(held.task_id)

    code, out, err = await jct_process(tmp_path, "audit", "--kind", "Task", "--limit", "1", env=env)
    assert code == 0, err
    assert "1 audit row(s)" in out
    cursor = out.split("next page: --cursor ")[1].split()[0]
    code, second, err = await jct_process(
        tmp_path, "audit", "--kind", "Task", "--limit", "1", "--cursor", cursor, env=env
    )
    assert code == 0, err
    assert "1 audit row(s)" in second
    assert second != out

    code, out, err = await jct_process(tmp_path, "audit", "--since", "last week", env=env)
    assert code == 1
    assert "ISO 8601" in one_error_line(err)
