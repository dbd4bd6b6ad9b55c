"""resources/list: concrete URIs, because Claude Code's @-mention menu is fed from it, not from templates.

The first page starts with jct://queue and jct://reviews/pending. Then come tasks, each with its issue
briefing, its newest run and that run's evidence pack: running tasks first (claim order), then every other
task newest first. Both walks are keyset-paginated, so a page costs the same wherever it is, and the
cursor is opaque: (walk, position of the last task shown).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mcp.server import MCPServer
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ListResourcesResult, PaginatedRequestParams
from mcp_types import Resource as MCPResource
from sqlalchemy import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from server.core.service import Core, decode_cursor, encode_cursor
from server.db import listing
from server.errors import JctError
from server.markdown import evidence_uri, headline, issue_uri, line, run_uri, task_uri, who
from server.vocab import Priority

# Tasks per page; each brings up to four resources (issue, task, newest run, evidence pack).
PAGE_TASKS = 25
MARKDOWN = "text/markdown"
NAME_CHARS = 80
RUNNING, RECENT = "running", "recent"


@dataclass(frozen=True)
class Position:
    """Where a page starts: in the running walk after `running_after`, or the recent walk after `recent_after`."""

    walk: str
    running_after: tuple[str, datetime, str] | None = None
    recent_after: tuple[datetime, str] | None = None


def _encode(position: Position | None) -> str | None:
    if position is None:
        return None
    if position.running_after is not None:
        priority, queued_at, task_id = position.running_after
        return encode_cursor(RUNNING, priority, queued_at.isoformat(), task_id)
    if position.recent_after is not None:
        queued_at, task_id = position.recent_after
        return encode_cursor(RECENT, "", queued_at.isoformat(), task_id)
    return encode_cursor(position.walk, "", "", "")


def _decode(cursor: str | None) -> Position:
    if cursor is None:
        return Position(RUNNING)
    try:
        walk, priority, queued_at, task_id = decode_cursor(cursor, "word", "word", "word", "word")
        if walk not in (RUNNING, RECENT):
            raise ValueError(cursor)
        if queued_at == "" and task_id == "":
            return Position(walk)
        moment = datetime.fromisoformat(queued_at)
        if moment.tzinfo is None:
            raise ValueError(cursor)
        if walk == RUNNING:
            return Position(RUNNING, running_after=(Priority(priority).value, moment, str(uuid.UUID(task_id))))
        return Position(RECENT, recent_after=(moment, str(uuid.UUID(task_id))))
    except (JctError, ValueError, TypeError):
        raise MCPError(
            code=INVALID_PARAMS, message="cursor is not one JCT returned; list again from the first page."
        ) from None


async def _walk(conn: AsyncConnection, position: Position, limit: int) -> tuple[list[RowMapping], Position | None]:
    """Up to `limit` tasks from `position`, and where the next page starts (None: this was the last)."""
    page: list[RowMapping] = []
    recent_after = position.recent_after
    if position.walk == RUNNING:
        rows = await listing.running_tasks(conn, position.running_after, limit + 1)
        if len(rows) > limit:
            last = rows[limit - 1]
            following = Position(RUNNING, running_after=(last["priority"], last["queued_at"], last["id"]))
            return list(rows[:limit]), following
        page, recent_after = list(rows), None
    room = limit - len(page)
    rows = await listing.recent_tasks(conn, recent_after, room + 1)
    page += rows[:room]
    if len(rows) <= room:
        return page, None
    if room == 0:  # the running walk filled this page exactly; the recent walk starts the next
        return page, Position(RECENT)
    last = rows[room - 1]
    return page, Position(RECENT, recent_after=(last["queued_at"], last["id"]))


def _resource(uri: str, name: str, description: str) -> MCPResource:
    return MCPResource(uri=uri, name=name, title=name, description=description, mime_type=MARKDOWN)


def entries(task: RowMapping, issue: RowMapping | None, run: RowMapping | None) -> list[MCPResource]:
    """One task's listed resources: its issue briefing, the task, its newest run and that run's evidence."""
    objective = headline(task["objective"], NAME_CHARS)
    repo = line(task["target_repo"], NAME_CHARS)
    where = f"{task['priority']} · {task['operation']} · {repo}"
    found: list[MCPResource] = []
    if issue is not None:
        found.append(
            _resource(
                issue_uri(issue["id"]),
                f"Issue: {headline(issue['title'], NAME_CHARS)}",
                f"Briefing (objective, criteria, context, review feedback) · {issue['status']} · {where}",
            )
        )
    found.append(_resource(task_uri(task["id"]), f"Task: {objective}", f"{task['status']} · {where}"))
    if run is not None:
        verdict = f" · verdict {run['verdict']}" if run["verdict"] is not None else ""
        found.append(
            _resource(
                run_uri(run["id"]),
                f"Run {run['number']}: {objective}",
                f"{run['status']} · by {who(run['executor'])}{verdict} · {repo}",
            )
        )
        if run["evidence_pack_id"] is not None:
            found.append(
                _resource(
                    evidence_uri(run["evidence_pack_id"]),
                    f"Evidence: {objective}",
                    f"verdict {run['verdict']} · review {run['review_state']} · run {run['number']} · {repo}",
                )
            )
    return found


async def list_page(core: Core, fixed: list[MCPResource], cursor: str | None, page_tasks: int) -> ListResourcesResult:
    position = _decode(cursor)
    async with core.db.read() as conn:
        tasks, following = await _walk(conn, position, page_tasks)
        issues = await listing.issues_by_id(conn, [task["issue_id"] for task in tasks if task["issue_id"]])
        runs = await listing.latest_runs(conn, [task["id"] for task in tasks])
    resources = list(fixed) if cursor is None else []
    for task in tasks:
        resources += entries(task, issues.get(task["issue_id"]), runs.get(task["id"]))
    return ListResourcesResult(resources=resources, next_cursor=_encode(following))


def register(server: MCPServer[Any], core: Core, *, page_tasks: int = PAGE_TASKS) -> None:
    """Replace the SDK's resources/list (which knows only registered resources) with the paginated walk."""

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams
    ) -> ListResourcesResult:
        fixed = await server.list_resources() if params.cursor is None else []
        return await list_page(core, fixed, params.cursor, page_tasks)

    server._lowlevel_server.add_request_handler("resources/list", PaginatedRequestParams, list_resources)
