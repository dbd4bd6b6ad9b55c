"""Working the queue by hand through the real `jct` process: what enqueue, tasks, show, stats, reviews and
review print, and the one line each prints when it cannot."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from server.config import Settings
from server.core import schema
from server.core.briefings import intake
from server.core.claims import queue, work
from server.core.models import Actor
from server.core.review import completion
from server.core.service import Core
from tests.core.helpers import bare
from tests.support.command import jct, jct_process, local_env, one_error_line

pytestmark = pytest.mark.anyio

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
OPERATOR = "op-1"
AGENT = Actor(actor_id="agent-1", name="agent-1", session="agent-1")
DIFF = "--- a/src/users.py\n+++ b/src/users.py\n@@ -1 +1 @@\n-old\n+new\n"


def settings_for(url: str, tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"database_url": url, "home": tmp_path / "home", "trace_root": tmp_path / "traces"}
    return Settings(_env_file=None, **(values | overrides))


def operator_env(tmp_path: Path) -> dict[str, str]:
    """The commands as the operator OPERATOR runs them, in a terminal wide enough that no row wraps."""
    return local_env(tmp_path) | {"JCT_AGENT_ID": OPERATOR, "COLUMNS": "200"}


@pytest.fixture
async def core(tmp_path: Path) -> AsyncIterator[Core]:
    """A Core on the database the commands use (manual review), migrated."""
    built = Core.build(settings_for(f"sqlite:///{tmp_path / 'cli.db'}", tmp_path, review_auto_approve=False))
    try:
        await schema.upgrade(built)
        yield built
    finally:
        await built.db.dispose()


def row(out: str, *cells: str) -> bool:
    """Whether one line of a table holds these cells in this order."""
    pattern = r"\s*[│ ]\s*".join(re.escape(cell) for cell in cells)
    return any(re.search(pattern, line) for line in out.splitlines())


async def test_enqueue_tasks_show_stats_round_trip(tmp_path: Path) -> None:
    env = local_env(tmp_path)
    code, out, err = await jct(
        tmp_path,
        "enqueue",
        "Add input validation",
        "--operation",
        "code_change",
        "--repo",
        "myorg/api",
        "--priority",
        "P1",
        "--criterion",
        "Email is validated",
        "--criterion",
        "Tests pass",
        "--summary",
        "The endpoint accepts anything.",
        "--key",
        "k-1",
        env=env,
    )
    assert code == 0, err
    assert "enqueued task" in out
    found = UUID.search(out)
    assert found is not None, out
    task_id = found.group(0)

    code, again, err = await jct(
        tmp_path, "enqueue", "Add input validation", "--operation", "code_change", "--repo", "myorg/api",
        "--priority", "P1", "--criterion", "Email is validated", "--criterion", "Tests pass",
        "--summary", "The endpoint accepts anything.", "--key", "k-1", env=env,
    )  # fmt: skip
    assert code == 0, err
    assert task_id in again
    assert "duplicate" in again

    code, out, err = await jct(tmp_path, "tasks", env=env)
    assert code == 0, err
    assert task_id in out
    assert "P1" in out

    code, out, err = await jct(tmp_path, "show", task_id, env=env)
    assert code == 0, err
    assert task_id in out
    assert "Add input validation" in out
    assert "queued" in out

    code, out, err = await jct(tmp_path, "stats", env=env)
    assert code == 0, err
    assert re.search(r"queued\s*│\s*1\b", out), out

    code, out, err = await jct(tmp_path, "reviews", env=env)
    assert code == 0, err
    assert "0 pending review(s)" in out

    code, out, err = await jct(tmp_path, "show", "6d0c2b63-29c5-4b1b-9d38-0d4a2c1e9f00", env=env)
    assert code == 1
    assert "is not a task, run or evidence pack id" in one_error_line(err)

    code, out, err = await jct(tmp_path, "enqueue", "x", "--operation", "cooking", "--repo", "myorg/api", env=env)
    assert code == 1
    assert "INVALID_ARGUMENT" in one_error_line(err)


async def test_reviews_review_and_show_run_and_evidence(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    core = Core.build(settings_for(url, tmp_path, review_auto_approve=False))
    agent = Actor(actor_id="agent-1", name="agent-1", session="agent-1")
    try:
        code, out, err = await jct(
            tmp_path,
            "enqueue",
            "Write the runbook",
            "--operation",
            "docs",
            "--repo",
            "myorg/ops",
            env=local_env(tmp_path),
        )
        assert code == 0, err
        claim = await queue.claim_next(core, agent)
        assert claim.task_id is not None
        await work.report_artifact(
            core, agent, claim.task_id, title="Runbook", artifact_type="doc", content="# Runbook"
        )
        done = await completion.complete_task(core, agent, claim.task_id, success=True, summary="Wrote it")
    finally:
        await core.db.dispose()
    pack_id = done.evidence_pack.id

    code, out, err = await jct(tmp_path, "reviews", env=local_env(tmp_path))
    assert code == 0, err
    assert pack_id in out
    assert "Write the runbook" in out

    code, out, err = await jct(tmp_path, "show", done.run_id, env=local_env(tmp_path))
    assert code == 0, err
    assert "under_review" in out
    assert "Runbook" in out

    code, out, err = await jct(tmp_path, "show", pack_id, env=local_env(tmp_path))
    assert code == 0, err
    assert "run_succeeded" in out

    code, out, err = await jct(tmp_path, "review", pack_id, "maybe", "--reason", "hm", env=local_env(tmp_path))
    assert code == 2
    one_error_line(err)

    code, out, err = await jct(tmp_path, "review", pack_id, "approve", "--reason", "Clear.", env=local_env(tmp_path))
    assert code == 0, err
    assert "approved" in out
    assert "task completed, run done" in out

    code, out, err = await jct(tmp_path, "review", pack_id, "reject", "--reason", "No.", env=local_env(tmp_path))
    assert code == 1
    assert "ALREADY_REVIEWED" in one_error_line(err)


async def test_enqueue_prints_the_task_and_its_issue(tmp_path: Path) -> None:
    args = ("Rotate the keys", "--operation", "ops", "--repo", "myorg/infra")
    code, out, err = await jct_process(tmp_path, "enqueue", *args, env=operator_env(tmp_path))
    assert code == 0, err
    assert re.fullmatch(rf"enqueued task {UUID.pattern} status=queued issue={UUID.pattern}\n", out), out
    assert err == ""


async def test_tasks_lists_highest_priority_first_and_says_when_there_are_more(tmp_path: Path, core: Core) -> None:
    admin = Actor(actor_id=OPERATOR, actor_kind="human", admin=True)
    low = await intake.enqueue_task(core, admin, objective="Tidy the docs", operation="docs", target_repo="myorg/web")
    high = await intake.enqueue_task(
        core, admin, objective="Fix the login", operation="code_change", target_repo="myorg/api", priority="P0"
    )
    env = operator_env(tmp_path)

    code, out, err = await jct(tmp_path, "tasks", env=env)
    assert code == 0, err
    assert "2 task(s), status queued" in out
    assert row(out, "task_id", "pri", "objective", "age")
    assert row(out, high.task_id, "P0", "Fix the login")
    assert row(out, low.task_id, "P2", "Tidy the docs")
    assert out.index(high.task_id) < out.index(low.task_id)
    assert "code_change · myorg/api@main" in out

    code, out, err = await jct(tmp_path, "tasks", "--status", "all", "--limit", "1", env=env)
    assert code == 0, err
    assert "1 task(s), status all" in out
    assert row(out, high.task_id, "P0", "queued", "Fix the login")
    assert low.task_id not in out
    assert "(more than 1; pass --limit to see more)" in out

    code, out, err = await jct(tmp_path, "tasks", "--status", "bogus", env=env)
    assert code == 1
    assert one_error_line(err).startswith(
        "error: INVALID_ARGUMENT: status 'bogus' is not one of: blocked, queued, running"
    )


async def test_show_prints_a_task_a_run_and_an_evidence_pack_field_by_field(tmp_path: Path, core: Core) -> None:
    env = operator_env(tmp_path)
    code, out, err = await jct(
        tmp_path, "enqueue", "Validate emails", "--operation", "code_change", "--repo", "myorg/api",
        "--path", "src", "--criterion", "Emails are validated", env=env,
    )  # fmt: skip
    assert code == 0, err
    claim = await queue.claim_next(core, AGENT)
    assert claim.task_id is not None
    assert claim.run_id is not None
    task_id, run_id = claim.task_id, bare(claim.run_id)
    artifact = await work.report_artifact(
        core, AGENT, task_id, title="The diff", artifact_type="code_patch", content=DIFF
    )
    await work.report_progress(core, AGENT, task_id, message="Halfway there", progress=50)
    criteria = [{"criterion": 0, "status": "satisfied", "evidence": [artifact.artifact_id]}]
    done = await completion.complete_task(
        core, AGENT, task_id, success=True, summary="Validated emails", criteria_results=criteria
    )
    pack_id = done.evidence_pack.id

    code, out, err = await jct(tmp_path, "show", task_id, env=env)
    assert code == 0, err
    assert f"task {task_id}" in out
    for cells in [
        ("status", "completed"),
        ("objective", "Validate emails"),
        ("operation", "code_change"),
        ("target", "myorg/api@main src"),
        ("priority", "P2"),
        ("time budget", "3600s"),
        ("requested by", OPERATOR),
    ]:
        assert row(out, *cells), (cells, out)
    assert re.search(rf"queued\s+│ {TIME}", out), out
    assert row(out, "run_id", "status", "#", "executor", "started")
    assert row(out, run_id, "under_review", "1", "agent-1")

    code, out, err = await jct(tmp_path, "show", run_id, env=env)
    assert code == 0, err
    assert f"run {run_id}" in out
    for cells in [
        ("status", "under_review"),
        ("task", task_id),
        ("executor", "agent-1"),
        ("summary", "Validated emails"),
        ("verdict", "pass"),
        ("evidence pack", pack_id),
    ]:
        assert row(out, *cells), (cells, out)
    assert row(out, artifact.artifact_id, "code_patch", "The diff", str(len(DIFF)))
    assert re.search(rf"{TIME}\s+│ progress\s+│ 50%\s+│ Halfway there", out), out

    code, out, err = await jct(tmp_path, "show", pack_id, env=env)
    assert code == 0, err
    assert f"evidence pack {pack_id}" in out
    for cells in [("verdict", "pass"), ("review", "pending"), ("run", run_id), ("task", task_id)]:
        assert row(out, *cells), (cells, out)
    assert row(out, "run_succeeded", "yes")
    assert row(out, "required_evidence", "yes", "code_patch artifact 'The diff'")
    assert row(out, "Emails are validated", "satisfied", artifact.artifact_id)

    code, out, err = await jct(tmp_path, "show", "6d0c2b63-29c5-4b1b-9d38-0d4a2c1e9f00", env=env)
    assert code == 1
    assert one_error_line(err) == (
        "error: INVALID_ARGUMENT: 6d0c2b63-29c5-4b1b-9d38-0d4a2c1e9f00 is not a task, run or evidence pack id."
    )
    assert out == ""

    code, out, err = await jct(tmp_path, "show", "not-an-id", env=env)
    assert code == 1
    assert one_error_line(err) == "error: ID 'not-an-id' is not a UUID."


async def test_stats_reviews_and_a_needs_changes_review_read_right(tmp_path: Path, core: Core) -> None:
    env = operator_env(tmp_path)
    admin = Actor(actor_id=OPERATOR, actor_kind="human", admin=True)
    waiting = await intake.enqueue_task(core, admin, objective="Still waiting", operation="ops", target_repo="a/b")
    task = await intake.enqueue_task(core, admin, objective="Rename the flag", operation="docs", target_repo="a/b")
    claim = await queue.claim_task(core, AGENT, task.task_id)
    await work.report_artifact(core, AGENT, task.task_id, title="Notes", artifact_type="doc", content="# Flag")
    done = await completion.complete_task(core, AGENT, task.task_id, success=True, summary="Renamed")
    pack_id = done.evidence_pack.id

    code, out, err = await jct(tmp_path, "stats", env=env)
    assert code == 0, err
    for cells in [
        ("queued", "1"),
        ("running", "0"),
        ("completed", "1"),
        ("failed", "0"),
        ("cancelled", "0"),
        ("expired leases", "0"),
        ("pending reviews", "1"),
    ]:
        assert row(out, *cells), (cells, out)
    assert re.search(r"oldest queued\s+│ \d+s", out), out

    code, out, err = await jct(tmp_path, "reviews", env=env)
    assert code == 0, err
    assert "1 pending review(s)" in out
    assert row(out, pack_id, "pass", "Rename the flag")
    assert f"agent-1 · task {task.task_id}" in out
    assert waiting.task_id not in out

    code, out, err = await jct(
        tmp_path, "review", pack_id, "needs-changes", "--reason", "Mention the old name too.", env=env
    )
    assert code == 0, err
    assert re.fullmatch(
        rf"review {UUID.pattern}: needs_changes; task queued, run needs_changes, issue ready, briefing v2\n", out
    ), out

    code, out, err = await jct(tmp_path, "show", bare(claim.run_id), env=env)
    assert code == 0, err
    assert row(out, "status", "needs_changes")
    code, out, err = await jct(tmp_path, "reviews", env=env)
    assert code == 0, err
    assert "0 pending review(s)" in out
