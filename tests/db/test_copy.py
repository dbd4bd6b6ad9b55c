"""`jct db copy`: a lived-in SQLite database arrives whole in an empty one (PostgreSQL, or SQLite), and the
server runs on the copy: same rows and ids, readable artifacts, new rows that do not collide."""

from __future__ import annotations

import re
import shutil
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from sqlalchemy import insert, select

from server.config import Settings
from server.core import tokens
from server.core.claims import cancel, queue, work
from server.core.missions import plan
from server.core.operators import observe
from server.core.review import completion, reviews
from server.core.service import Core
from server.db import integrations, tables
from server.db.copy import CopyError, copied_tables, copy_database
from server.db.engine import Database
from server.db.migrate import head_revision, upgrade
from server.identity import FixedIdentity
from server.mcp import build_mcp
from tests.conftest import drop_postgres_database, postgres_database
from tests.core.helpers import ADMIN, ALICE, BOB, PATCH, enqueue, satisfied_by
from tests.git.repo import Work
from tests.transports.conftest import call, subprocess_env

pytestmark = pytest.mark.anyio

COPY_SECONDS = 120.0
LOG = "==== 3 passed in 0.1s ===="


@dataclass
class Lived:
    core: Core
    done_task_id: str
    patch_artifact_id: str


@pytest.fixture
async def lived(tmp_path: Path) -> AsyncIterator[Lived]:
    """A SQLite database lived in through the real services: every table has rows."""
    settings = Settings(
        _env_file=None,
        database_url=f"sqlite:///{tmp_path / 'source.db'}",
        home=tmp_path / "home",
        trace_root=tmp_path / "traces",
    )
    core = Core.build(settings)
    await upgrade(core.db)
    try:
        yield await _live_in(core, tmp_path)
    finally:
        await core.db.dispose()


@pytest.fixture
def source(lived: Lived) -> Core:
    return lived.core


async def _live_in(core: Core, home: Path) -> Lived:
    await tokens.create_token(core, "ci-agent-1", ["worker"])
    alice_secret, _ = await tokens.create_token(core, "alice", ["reviewer", "admin"])
    # A dashboard login that logged out (ended_ui_sessions), and the dashboard's form key (server_secrets).
    opened = await tokens.open_ui_session(core, alice_secret)
    assert opened is not None
    await tokens.end_ui_session(core, opened[1])
    await tokens.form_key(core)
    await tokens.revoke_token(core, "ci-agent-1")

    done = await enqueue(core, priority="P1", idempotency_key="nightly-1")
    await queue.claim_task(core, ALICE, done)
    await work.report_progress(core, ALICE, done, message="Reading the code", progress=10)
    patch = await work.report_artifact(
        core, ALICE, done, title="Code changes", artifact_type="code_patch", content=PATCH
    )
    await work.report_artifact(core, ALICE, done, title="CI", artifact_type="log", uri="https://ci.example/run/1")
    await work.report_progress(core, ALICE, done, message="Tests pass", progress=90)
    await completion.complete_task(
        core,
        ALICE,
        done,
        success=True,
        summary="Validated emails",
        outputs={"pr": "https://github.com/myorg/api/pull/7"},
        telemetry={"tokens_input": 1200, "ok": True},
        criteria_results=satisfied_by(patch.artifact_id),
    )

    core.settings.review_auto_approve = False
    reviewed = await enqueue(core, objective="Write the docs", operation="docs", acceptance_criteria=[])
    await queue.claim_task(core, BOB, reviewed)
    await work.report_artifact(core, BOB, reviewed, title="guide.md", artifact_type="doc", content="# Guide\n")
    first = await completion.complete_task(core, BOB, reviewed, success=True, summary="Wrote it")
    await reviews.submit_review(core, ADMIN, first.evidence_pack.id, "needs_changes", "Add an example")
    await queue.claim_task(core, BOB, reviewed)
    await work.report_artifact(core, BOB, reviewed, title="guide.md", artifact_type="doc", content="# Guide\nx=1\n")
    second = await completion.complete_task(core, BOB, reviewed, success=True, summary="Added one")
    await reviews.submit_review(core, ADMIN, second.evidence_pack.id, "approved", "Good")
    core.settings.review_auto_approve = True

    # Approved work of a local working tree in the merge queue, and an integrator holding its (repo, ref).
    repo = Work(home / "repo")
    merged = await enqueue(core, target_repo=str(repo.path), target_ref="main", acceptance_criteria=[])
    space = (await queue.claim_task(core, ALICE, merged)).workspace
    assert space is not None
    assert space.path is not None
    (Path(space.path) / "src" / "app.py").write_text("print('hello')\n")
    await completion.complete_task(core, ALICE, merged, success=True, summary="Greeted")
    async with core.db.write() as conn:
        now = datetime.now(UTC)
        assert await integrations.take(conn, str(repo.path), "main", "copy-test", now, now + timedelta(seconds=30))

    failed = await enqueue(core, objective="Fix the flaky test", priority="P0")
    await queue.claim_task(core, ALICE, failed)
    await completion.complete_task(core, ALICE, failed, success=False, summary="Could not", error_message="npm broke")

    released = await enqueue(core, objective="Upgrade the ORM", operation="analysis")
    await queue.claim_task(core, BOB, released)
    await work.release_task(core, BOB, released, "Out of time")
    await cancel.cancel_task(core, ADMIN, await enqueue(core, objective="Obsolete"), "No longer needed")
    await enqueue(core, objective="Still waiting", priority="P4", target_path="docs/")
    # A mission: phases, a dependency, tasks blocked behind them.
    task = {"operation": "docs", "target_repo": "myorg/api"}
    await plan.create_mission(
        core,
        ADMIN,
        title="Document the API",
        goal="Every endpoint documented",
        phases=[
            {"name": "Survey", "tasks": [{"key": "list", "objective": "List the endpoints", **task}]},
            {
                "name": "Write",
                "tasks": [
                    {"key": "ref", "objective": "Write the reference", **task},
                    {"key": "guide", "objective": "Write the guide", "depends_on": ["ref"], **task},
                ],
            },
        ],
    )

    # Doctrine is standing guidance an operator writes straight into the database; no service makes it.
    async with core.db.write() as conn:
        issue_id = (await conn.execute(select(tables.tasks.c.issue_id).where(tables.tasks.c.id == done))).scalar_one()
        doctrine_id = str(uuid.uuid4())
        await conn.execute(
            insert(tables.doctrine_refs).values(id=doctrine_id, namespace="myorg", name="style", body="Use ruff.")
        )
        await conn.execute(insert(tables.issue_doctrine).values(issue_id=issue_id, doctrine_id=doctrine_id))
    return Lived(core, done, patch.artifact_id)


# --- reading both sides -----------------------------------------------------------------------


async def dump(db: Database) -> dict[str, list[tuple[Any, ...]]]:
    """Every copied table's rows in primary-key order, with SQL NULL told apart from JSON null."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    async with db.read() as conn:
        for table in copied_tables():
            flags = [c.is_(None) for c in table.columns if c.nullable]
            query = select(*table.columns, *flags).order_by(*table.primary_key.columns)
            out[table.name] = [tuple(row) for row in (await conn.execute(query)).all()]
    return out


async def dump_url(url: str) -> dict[str, list[tuple[Any, ...]]]:
    db = Database(url)
    try:
        return await dump(db)
    finally:
        await db.dispose()


async def jct_copy(cwd: Path, env: dict[str, str], *args: str) -> tuple[int, str, str]:
    with anyio.fail_after(COPY_SECONDS):
        done = await anyio.run_process(
            [sys.executable, "-m", "server", "db", "copy", *args], env=subprocess_env(env), cwd=cwd, check=False
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def source_env(core: Core) -> dict[str, str]:
    """The settings the source was made with, as `jct` reads them: the copy's source is the configured database."""
    return {
        "JCT_DATABASE_URL": core.settings.database_url,
        "JCT_HOME": str(core.settings.home),
        "JCT_TRACE_ROOT": str(core.settings.traces),
    }


def target_settings(url: str, trace_root: Path, home: Path) -> Settings:
    return Settings(_env_file=None, database_url=url, home=home, trace_root=trace_root)


# --- the copy -----------------------------------------------------------------------------------


async def test_copy_moves_every_row_and_the_server_runs_on_the_copy(
    lived: Lived, database_url: str, tmp_path: Path
) -> None:
    source = lived.core
    before = await dump(source.db)
    empty = [name for name, rows in before.items() if not rows]
    assert not empty, f"the source fixture leaves {empty} empty: make _live_in write rows there too"

    code, out, err = await jct_copy(tmp_path, source_env(source), "--to", database_url)
    assert code == 0, err
    for name, rows in before.items():
        assert f"  {name}: {len(rows)} row(s)" in out
    assert f"target is at revision {head_revision()}" in out
    assert f"keep their content under {source.settings.traces.resolve()}" in out

    after = await dump_url(database_url)
    for name in before:
        assert after[name] == before[name], f"table {name} differs after the copy"

    target = Core.build(target_settings(database_url, source.settings.traces, tmp_path / "target-home"))
    try:
        # Derived tables are not copied; the target's triggers rebuild what they count from the copied rows.
        copied_stats, source_stats = await queue.queue_stats(target), await queue.queue_stats(source)
        assert copied_stats.counts == source_stats.counts
        assert copied_stats.pending_reviews == source_stats.pending_reviews
        await _server_runs_on_the_copy(lived, target, before)
    finally:
        await target.db.dispose()


async def _server_runs_on_the_copy(lived: Lived, target: Core, before: dict[str, list[tuple[Any, ...]]]) -> None:
    done, patch_id = lived.done_task_id, lived.patch_artifact_id
    trail = await observe.get_audit_trail(lived.core, "Task", done)
    assert [entry.action for entry in trail.entries] == ["task.enqueued", "task.claimed", "task.completed"]
    assert await observe.get_audit_trail(target, "Task", done) == trail
    max_audit = max(row[0] for row in before["audit_log"])
    max_event = max(row[0] for row in before["run_events"])

    async with Client(build_mcp(target, FixedIdentity("carol")), mode="legacy") as client:
        artifact = await call(client, "jct_get_artifact", artifact_id=patch_id)
        assert artifact["content"] == PATCH
        context = await call(client, "jct_get_context", task_id=done)
        assert [d["name"] for d in context["doctrine_refs"]] == ["style"]
        assert context["context_packet"]["acceptance_criteria"] == ["Email is validated"]
        # New rows get fresh ids: the sequences start past the copied ones.
        fresh = await call(client, "jct_enqueue_task", objective="After the move", operation="ops", target_repo="a/b")
        claimed = await call(client, "jct_claim_task", task_id=fresh["task_id"])
        assert claimed["task_id"] == fresh["task_id"]
        await call(client, "jct_report_progress", task_id=fresh["task_id"], message="on the new database")

    async with target.db.read() as conn:
        audit_ids = (await conn.execute(select(tables.audit_log.c.id).where(tables.audit_log.c.id > max_audit))).all()
        event_ids = (await conn.execute(select(tables.run_events.c.id).where(tables.run_events.c.id > max_event))).all()
    assert len(audit_ids) >= 2
    assert len(event_ids) == 1


async def test_copy_refuses_a_target_that_has_rows(source: Core, database_url: str, tmp_path: Path) -> None:
    code, _out, err = await jct_copy(tmp_path, source_env(source), "--to", database_url)
    assert code == 0, err
    copied = await dump_url(database_url)

    code, out, err = await jct_copy(tmp_path, source_env(source), "--to", database_url)
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert re.fullmatch(
        r"error: the target database \S+ is not empty \(table \w+ has rows\); copy into a new, empty database; "
        r"the target was left as it was",
        lines[0],
    )
    assert "Traceback" not in err + out
    assert await dump_url(database_url) == copied


async def test_copy_with_trace_root_moves_artifact_content(source: Core, database_url: str, tmp_path: Path) -> None:
    new_root = tmp_path / "shared" / "traces"
    code, out, err = await jct_copy(tmp_path, source_env(source), "--to", database_url, "--trace-root", str(new_root))
    assert code == 0, err
    assert f"copied 3 artifact content file(s) to {new_root.resolve()}" in out
    shutil.rmtree(source.settings.traces)  # nothing may still point at the old store

    target = Core.build(target_settings(database_url, new_root, tmp_path / "target-home"))
    try:
        async with target.db.read() as conn:
            rows = (await conn.execute(select(tables.artifacts).order_by(tables.artifacts.c.id))).mappings().all()
            runs = (await conn.execute(select(tables.runs.c.artifact_root_uri))).scalars().all()
        assert all(uri.startswith(new_root.resolve().as_uri() + "/runs/") for uri in runs)
        stored = [row for row in rows if row["stored"]]
        assert len(stored) == 3
        async with Client(build_mcp(target, FixedIdentity("carol")), mode="legacy") as client:
            for row in stored:
                assert target.store.owns(row["uri"])
                artifact = await call(client, "jct_get_artifact", artifact_id=row["id"])
                assert len(artifact["content"]) == row["size_bytes"]
        remote = [row for row in rows if not row["stored"]]
        assert [row["uri"] for row in remote] == ["https://ci.example/run/1"]
    finally:
        await target.db.dispose()


async def test_a_copy_copies_again_from_postgresql_or_sqlite(
    source: Core, database_url: str, dialect: str, tmp_path: Path, worker_id_str: str
) -> None:
    """The copy is generic: its target, PostgreSQL or SQLite, is a source like any other."""
    await copy_database(source.settings.database_url, database_url)
    if dialect == "sqlite":
        second = f"sqlite+aiosqlite:///{tmp_path / 'second.db'}"
    else:
        second = await postgres_database(worker_id_str)
    try:
        report = await copy_database(database_url, second, batch_size=2)
        expected = await dump(source.db)
        assert report.rows == {name: len(rows) for name, rows in expected.items()}
        assert await dump_url(second) == expected
    finally:
        if dialect == "postgresql":
            await drop_postgres_database(second)


# --- refusals that need no second database ----------------------------------------------------


async def test_copy_refuses_to_copy_a_database_onto_itself(source: Core) -> None:
    with pytest.raises(CopyError, match="the source and the target are the same database"):
        await copy_database(source.settings.database_url, source.settings.database_url)


async def test_copy_from_a_missing_sqlite_file_says_where_it_looked(tmp_path: Path) -> None:
    env = {"JCT_HOME": str(tmp_path / "nowhere")}
    code, _out, err = await jct_copy(tmp_path, env, "--to", f"sqlite:///{tmp_path / 'target.db'}")
    assert code != 0
    assert err.strip() == (
        f"error: there is no SQLite database at {tmp_path / 'nowhere' / 'jct.db'}; set JCT_DATABASE_URL or pass --from"
    )
    assert not (tmp_path / "nowhere").exists()


async def test_copy_with_a_url_it_cannot_use_is_one_line(tmp_path: Path) -> None:
    code, _out, err = await jct_copy(tmp_path, {"JCT_HOME": str(tmp_path)}, "--to", "mysql://x@y/z")
    assert code == 2
    assert err.strip() == "error: unsupported database 'mysql'; JCT runs on sqlite or postgresql"


async def test_copy_to_an_unreachable_database_is_one_line(source: Core, tmp_path: Path) -> None:
    code, _out, err = await jct_copy(tmp_path, source_env(source), "--to", "postgresql://postgres@127.0.0.1:1/x")
    assert code != 0
    assert err.strip().startswith(
        "error: cannot reach the target database postgresql+asyncpg://postgres@127.0.0.1:1/x: "
    )
    assert err.strip().endswith("; check --to")
    assert len(err.strip().splitlines()) == 1
