"""Input hardening at the edges the fuzzer reaches only by luck: each limit, through the real client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from mcp import Client

from server.config import Settings
from server.core.models import check_text, parse_enum, parse_id
from server.core.service import Core, encode_cursor
from server.errors import ErrorCode, JctError
from server.identity import FixedIdentity
from server.mcp import build_mcp
from server.vocab import Priority
from tests.core.helpers import snapshot
from tests.security.test_fuzz import _seed

pytestmark = pytest.mark.anyio

UUID = "6f8dc5fc-b239-45c9-a79e-d7f107855007"


@dataclass
class World:
    core: Core
    client: Client
    claimed: str  # a task the client holds
    pack: str  # an evidence pack awaiting review


@pytest.fixture
async def world(make_settings: Callable[..., Settings]) -> AsyncIterator[World]:
    core = Core.build(make_settings(review_auto_approve=False))
    try:
        async with Client(build_mcp(core, FixedIdentity("agent")), mode="legacy") as client:
            ids = await _seed(client)
            yield World(core, client, claimed=ids[2], pack=ids[-1])
    finally:
        await core.db.dispose()


@pytest.mark.parametrize("value", [None, 12, 1.5, ["a"], {"a": 1}, b"x"])
def test_ids_enums_and_texts_of_the_wrong_type_are_invalid_arguments(value: Any) -> None:
    with pytest.raises(JctError, match="task_id must be a UUID string") as refused:
        parse_id(value, "task_id")
    assert refused.value.code == ErrorCode.INVALID_ARGUMENT
    with pytest.raises(JctError, match="priority must be one of: P0, P1, P2, P3, P4, not"):
        parse_enum(Priority, value, "priority")
    with pytest.raises(JctError, match="summary must be a string"):
        check_text(value, "summary", 10)


def complete(world: World, **criterion: Any) -> tuple[str, dict[str, Any]]:
    report = {"criterion": 0, "status": "satisfied"} | criterion
    return "jct_complete_task", {
        "task_id": world.claimed,
        "success": True,
        "summary": "Done.",
        "criteria_results": [report],
    }


CASES: dict[str, tuple[Callable[[World], tuple[str, dict[str, Any]]], str]] = {
    "criterion note too long": (lambda w: complete(w, note="n" * 4_001), "note is 4001 characters"),
    "criterion note with control characters": (lambda w: complete(w, note="bell\x07"), "control characters"),
    "criterion text too long": (lambda w: complete(w, criterion="c" * 1_001), "criterion is 1001 characters"),
    "evidence that is not an id": (lambda w: complete(w, evidence=["../etc/passwd"]), "is not a UUID"),
    "too much evidence": (lambda w: complete(w, evidence=[UUID] * 51), "the limit is 50"),
    "outputs that are not JSON": (
        lambda w: ("jct_complete_task", {"task_id": w.claimed, "success": True, "summary": "s", "outputs": "{x"}),
        "not valid JSON",
    ),
    "a file:// uri": (
        lambda w: (
            "jct_report_artifact",
            {"task_id": w.claimed, "title": "Log", "artifact_type": "log", "uri": "file:///etc/passwd"},
        ),
        "file:// and bare paths are refused",
    ),
    "a bare path as uri": (
        lambda w: (
            "jct_report_artifact",
            {"task_id": w.claimed, "title": "Log", "artifact_type": "log", "uri": "/var/log/syslog"},
        ),
        "not a remote URI",
    ),
    "a title that is a path": (
        lambda w: (
            "jct_report_artifact",
            {"task_id": w.claimed, "title": "../../x", "artifact_type": "log", "content": "x"},
        ),
        "looks like a path",
    ),
    "a huge cursor": (lambda w: ("jct_list_tasks", {"cursor": "A" * 100_000}), "cursor is not one JCT returned"),
    "a huge audit cursor": (
        lambda w: ("jct_get_audit_trail", {"entity_kind": "Task", "entity_id": w.claimed, "cursor": "A" * 600}),
        "cursor is not one JCT returned",
    ),
    "a forged review cursor": (
        lambda w: ("jct_list_pending_reviews", {"cursor": "WyJ4Il0"}),
        "cursor is not one JCT returned",
    ),
    # Issue 25: NUL in a name answered as a lookup miss, and a cursor time out of datetime's range as INTERNAL_ERROR.
    "NUL in a git tool's repo": (lambda w: ("jct_git_log", {"repo": "myorg/api\x00"}), "repo contains control"),
    "NUL in a diff's repo": (
        lambda w: ("jct_git_diff", {"repo": "myorg/\x00api", "base": "main", "head": "main"}),
        "repo contains control",
    ),
    "NUL in a workflow name": (
        lambda w: ("jct_start_workflow", {"name": "fix-bug\x00", "inputs": {}, "target_repo": "myorg/api"}),
        "name contains control",
    ),
    "a queue cursor past year 9999": (
        lambda w: ("jct_list_tasks", {"cursor": encode_cursor("P2", "9999-12-31T23:00:00-05:00", UUID)}),
        "cursor is not one JCT returned",
    ),
    "a review cursor before year 1": (
        lambda w: ("jct_list_pending_reviews", {"cursor": encode_cursor("0001-01-01T00:00:00+05:00", UUID)}),
        "cursor is not one JCT returned",
    ),
    "a long reviewer_name": (
        lambda w: (
            "jct_submit_review",
            {"evidence_pack_id": w.pack, "decision": "approved", "reason": "ok", "reviewer_name": "r" * 129},
        ),
        "reviewer_name is 129 characters",
    ),
    "a reviewer_name on two lines": (
        lambda w: (
            "jct_submit_review",
            {"evidence_pack_id": w.pack, "decision": "approved", "reason": "ok", "reviewer_name": "a\nb"},
        ),
        "control characters",
    ),
    # A mission's `since` echoed whole into its error (the fuzzer found a 120 kB answer).
    "a huge mission since": (
        lambda w: ("jct_get_mission", {"mission_id": UUID, "since": "\u00e9" * 20_000}),
        "since is 20000 characters",
    ),
    "a mission since that is not a time": (
        lambda w: ("jct_get_mission", {"mission_id": UUID, "since": "yesterday"}),
        "is not an ISO 8601 time",
    ),
    "a long repo_prefix": (lambda w: ("jct_claim_next", {"repo_prefix": "r" * 513}), "repo_prefix is 513"),
    "an unknown decision": (
        lambda w: ("jct_submit_review", {"evidence_pack_id": w.pack, "decision": "maybe", "reason": "ok"}),
        "decision",
    ),
    "a null id": (lambda w: ("jct_get_task", {"task_id": None}), "task_id"),
    "a numeric id": (lambda w: ("jct_get_run", {"run_id": 7}), "run_id"),
    "an id that is not a UUID": (lambda w: ("jct_get_artifact", {"artifact_id": "1 OR 1=1"}), "is not a UUID"),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_each_limit_is_an_invalid_argument_that_changes_nothing(world: World, case: str) -> None:
    build, expected = CASES[case]
    tool, arguments = build(world)
    before = await snapshot(world.core)
    result = await world.client.call_tool(tool, arguments)
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    error = json.loads(text)["error"]
    assert error["code"] == "INVALID_ARGUMENT", error
    assert expected in error["message"], error
    assert len(text) < 2_000
    assert await snapshot(world.core) == before
