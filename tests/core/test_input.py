"""Bad input on the worker calls: a clear error, and nothing changed (rows, the task, the trace store)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from server.config import Settings
from server.core.claims import queue, work
from server.core.operators import observe
from server.core.review import completion
from server.core.service import Core
from server.db import tables
from server.errors import ErrorCode, JctError
from tests.core.helpers import ALICE, PATCH, built_core, enqueue, snapshot

pytestmark = pytest.mark.anyio

SettingsFactory = Callable[..., Settings]
MAX_BYTES = 1024  # the smallest JCT_MAX_ARTIFACT_BYTES allowed


@pytest.fixture
async def small(make_settings: SettingsFactory) -> AsyncIterator[Core]:
    async with built_core(make_settings(max_artifact_bytes=MAX_BYTES)) as built:
        yield built


@pytest.fixture
async def claimed(small: Core) -> str:
    """A task ALICE holds, with one artifact already reported (so the database is not empty)."""
    task_id = await enqueue(small)
    await queue.claim_task(small, ALICE, task_id)
    await work.report_artifact(small, ALICE, task_id, title="Patch", artifact_type="code_patch", content=PATCH)
    return task_id


async def state(core: Core, task_id: str) -> tuple[dict[str, int], dict[str, Any], list[dict[str, Any]], list[Path]]:
    """Everything a rejected call must leave alone: row counts, the task and its runs, the files stored."""
    async with core.db.read() as conn:
        task = (await conn.execute(select(tables.tasks).where(tables.tasks.c.id == task_id))).mappings().one()
        runs = (await conn.execute(select(tables.runs).where(tables.runs.c.task_id == task_id))).mappings().all()
    root = core.settings.traces
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []
    return await snapshot(core), dict(task), [dict(run) for run in runs], files


Call = Callable[[Core, str], Awaitable[object]]


def artifact(**kwargs: Any) -> Call:
    fields: dict[str, Any] = {"title": "Notes", "artifact_type": "report", "content": "hello"}
    fields.update(kwargs)

    def call(core: Core, task_id: str) -> Awaitable[object]:
        return work.report_artifact(core, ALICE, task_id, **fields)

    return call


def progress(**kwargs: Any) -> Call:
    fields: dict[str, Any] = {"message": "working", "progress": 50, "kind": "progress"}
    fields.update(kwargs)

    def call(core: Core, task_id: str) -> Awaitable[object]:
        return work.report_progress(core, ALICE, task_id, **fields)

    return call


def complete(**kwargs: Any) -> Call:
    fields: dict[str, Any] = {"success": True, "summary": "done"}
    fields.update(kwargs)

    def call(core: Core, task_id: str) -> Awaitable[object]:
        return completion.complete_task(core, ALICE, task_id, **fields)

    return call


REJECTED: list[tuple[str, Call, ErrorCode]] = [
    ("oversized content", artifact(content="x" * (MAX_BYTES + 1)), ErrorCode.PAYLOAD_TOO_LARGE),
    ("oversized multibyte content", artifact(content="é" * (MAX_BYTES // 2 + 1)), ErrorCode.PAYLOAD_TOO_LARGE),
    ("title climbing out", artifact(title="../../etc/passwd"), ErrorCode.INVALID_ARGUMENT),
    ("absolute title", artifact(title="/abs"), ErrorCode.INVALID_ARGUMENT),
    ("home-relative title", artifact(title="~/.ssh/id_rsa"), ErrorCode.INVALID_ARGUMENT),
    ("title with a newline", artifact(title="Notes\nInjected"), ErrorCode.INVALID_ARGUMENT),
    ("empty title", artifact(title=" "), ErrorCode.INVALID_ARGUMENT),
    ("oversized title", artifact(title="t" * 201), ErrorCode.INVALID_ARGUMENT),
    ("file uri", artifact(content=None, uri="file:///etc/passwd"), ErrorCode.INVALID_ARGUMENT),
    ("bare path uri", artifact(content=None, uri="/etc/passwd"), ErrorCode.INVALID_ARGUMENT),
    ("unknown artifact type", artifact(artifact_type="binary"), ErrorCode.INVALID_ARGUMENT),
    ("both content and uri", artifact(uri="https://example.com/log.txt"), ErrorCode.INVALID_ARGUMENT),
    ("neither content nor uri", artifact(content=None), ErrorCode.INVALID_ARGUMENT),
    ("bad media type", artifact(media_type="text"), ErrorCode.INVALID_ARGUMENT),
    ("progress over 100", progress(progress=101), ErrorCode.INVALID_ARGUMENT),
    ("negative progress", progress(progress=-1), ErrorCode.INVALID_ARGUMENT),
    ("unknown progress kind", progress(kind="gossip"), ErrorCode.INVALID_ARGUMENT),
    ("empty progress message", progress(message=""), ErrorCode.INVALID_ARGUMENT),
    ("control characters in a message", progress(message="bell\x07"), ErrorCode.INVALID_ARGUMENT),
    ("outputs that are not JSON", complete(outputs="{not json"), ErrorCode.INVALID_ARGUMENT),
    ("oversized outputs", complete(outputs={"blob": "x" * 64_000}), ErrorCode.INVALID_ARGUMENT),
    ("criteria_results not a list", complete(criteria_results={"criterion": 0}), ErrorCode.INVALID_ARGUMENT),
    ("criteria_results item not an object", complete(criteria_results=["done"]), ErrorCode.INVALID_ARGUMENT),
    (
        "criterion index out of range",
        complete(criteria_results=[{"criterion": 7, "status": "satisfied"}]),
        ErrorCode.INVALID_ARGUMENT,
    ),
    (
        "unknown criterion status",
        complete(criteria_results=[{"criterion": 0, "status": "mostly"}]),
        ErrorCode.INVALID_ARGUMENT,
    ),
    (
        "unknown criteria_results field",
        complete(criteria_results=[{"criterion": 0, "status": "satisfied", "score": 10}]),
        ErrorCode.INVALID_ARGUMENT,
    ),
    ("negative telemetry", complete(telemetry={"cost_usd": -0.5}), ErrorCode.INVALID_ARGUMENT),
    ("telemetry that is not a number", complete(telemetry={"tokens_input": "many"}), ErrorCode.INVALID_ARGUMENT),
    ("boolean telemetry", complete(telemetry={"duration_seconds": True}), ErrorCode.INVALID_ARGUMENT),
    ("empty summary", complete(summary=""), ErrorCode.INVALID_ARGUMENT),
    (
        "non-uuid task id",
        lambda core, _task_id: completion.complete_task(core, ALICE, "42", success=True, summary="x"),
        ErrorCode.INVALID_ARGUMENT,
    ),
]


@pytest.mark.parametrize(("call", "code"), [r[1:] for r in REJECTED], ids=[r[0] for r in REJECTED])
async def test_rejected_input_changes_nothing(small: Core, claimed: str, call: Call, code: ErrorCode) -> None:
    before = await state(small, claimed)

    with pytest.raises(JctError) as err:
        await call(small, claimed)

    assert err.value.code is code
    assert err.value.message
    assert err.value.suggestion
    assert await state(small, claimed) == before


async def test_content_at_the_limit_is_accepted(small: Core, claimed: str) -> None:
    reported = await artifact(content="x" * MAX_BYTES)(small, claimed)
    assert getattr(reported, "size_bytes", None) == MAX_BYTES


async def test_a_remote_uri_is_recorded_without_storing_anything(small: Core, claimed: str) -> None:
    _, _, _, files = await state(small, claimed)
    reported = await artifact(content=None, uri="https://ci.example.com/build/12/log")(small, claimed)
    assert getattr(reported, "uri", None) == "https://ci.example.com/build/12/log"
    assert (await state(small, claimed))[3] == files


# --- reading artifacts -------------------------------------------------------------------


async def _stored_artifact(core: Core, content: str) -> str:
    task_id = await enqueue(core)
    await queue.claim_task(core, ALICE, task_id)
    reported = await work.report_artifact(core, ALICE, task_id, title="Log", artifact_type="log", content=content)
    return reported.artifact_id


async def test_get_artifact_pages_through_long_content_with_a_truncation_marker(core: Core) -> None:
    content = "".join(chr(ord("a") + n % 26) for n in range(100))
    artifact_id = await _stored_artifact(core, content)

    first = await observe.get_artifact(core, artifact_id, max_chars=30)

    assert first.truncated is True
    assert first.total_chars == 100
    assert first.next_offset == 30
    assert first.content is not None
    assert first.content.startswith(content[:30] + "\n[... truncated: 70 more characters")
    assert "offset=30" in first.content

    middle = await observe.get_artifact(core, artifact_id, offset=first.next_offset, max_chars=30)
    assert middle.content is not None
    assert middle.content.startswith(content[30:60] + "\n[... truncated: 40 more characters")
    assert middle.next_offset == 60

    last = await observe.get_artifact(core, artifact_id, offset=90, max_chars=30)
    assert (last.content, last.truncated, last.next_offset) == (content[90:], False, None)


async def test_get_artifact_returns_short_content_whole(core: Core) -> None:
    artifact_id = await _stored_artifact(core, "3 passed in 0.1s")
    whole = await observe.get_artifact(core, artifact_id)
    assert (whole.content, whole.truncated, whole.next_offset, whole.total_chars) == (
        "3 passed in 0.1s",
        False,
        None,
        16,
    )


@pytest.mark.parametrize(
    ("offset", "max_chars"), [(-1, 100), (0, 0), (0, -5), (0, 100_001)], ids=["negative offset", "zero", "neg", "huge"]
)
async def test_get_artifact_rejects_bad_offsets(core: Core, offset: int, max_chars: int) -> None:
    artifact_id = await _stored_artifact(core, "some log")
    rows = await snapshot(core)

    with pytest.raises(JctError) as err:
        await observe.get_artifact(core, artifact_id, offset=offset, max_chars=max_chars)

    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    assert await snapshot(core) == rows


async def test_get_artifact_of_a_missing_id_is_artifact_not_found(core: Core) -> None:
    with pytest.raises(JctError) as err:
        await observe.get_artifact(core, str(uuid.uuid4()))
    assert err.value.code is ErrorCode.ARTIFACT_NOT_FOUND
