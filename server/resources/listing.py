"""resources/list: concrete URIs, because Claude Code's @-mention menu is fed from it, not from templates.

The first page starts with jct://queue and jct://reviews/pending, the active missions and the workflows
(jct://workflows/{name}). Then come tasks, each with its issue
briefing, its newest run and that run's evidence pack: running tasks first (claim order), then every other
task newest first. Both walks are keyset-paginated, so a page costs the same wherever it is, and the
cursor is opaque: (walk, position of the last task shown).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from mcp.server import MCPServer
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ListResourcesResult, PaginatedRequestParams
from mcp_types import Resource as MCPResource

from server import sdk, uris
from server.core.briefings import doctrine
from server.core.missions import status as mission_status
from server.core.operators.catalog import RECENT, RUNNING, Listed, Position, listed_tasks
from server.core.service import Core, decode_cursor, encode_cursor
from server.errors import JctError
from server.markdown import evidence_uri, headline, issue_uri, line, run_uri, task_uri, who
from server.vocab import Priority

# Tasks per page; each brings up to four resources (issue, task, newest run, evidence pack).
PAGE_TASKS = 25
# Active missions on the first page.
MISSIONS_LISTED = 20
# Doctrine entries on the first page, by name.
DOCTRINE_LISTED = 20
MARKDOWN = "text/markdown"
NAME_CHARS = 80


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
        moment = moment.astimezone(UTC)  # OverflowError when its zone takes it past year 9999 or before year 1
        if walk == RUNNING:
            return Position(RUNNING, running_after=(Priority(priority).value, moment, str(uuid.UUID(task_id))))
        return Position(RECENT, recent_after=(moment, str(uuid.UUID(task_id))))
    except (JctError, ValueError, TypeError, OverflowError):
        raise MCPError(
            code=INVALID_PARAMS, message="cursor is not one JCT returned; list again from the first page."
        ) from None


def _resource(uri: str, name: str, description: str) -> MCPResource:
    return MCPResource(uri=uri, name=name, title=name, description=description, mime_type=MARKDOWN)


def entries(listed: Listed) -> list[MCPResource]:
    """One task's listed resources: its issue briefing, the task, its newest run and that run's evidence."""
    task, issue, run = listed.task, listed.issue, listed.run
    objective = headline(task.objective, NAME_CHARS)
    repo = line(task.target_repo, NAME_CHARS)
    where = f"{task.priority} · {task.operation} · {repo}"
    found: list[MCPResource] = []
    if issue is not None:
        found.append(
            _resource(
                issue_uri(issue.id),
                f"Issue: {headline(issue.title, NAME_CHARS)}",
                f"Briefing (objective, criteria, context, review feedback) · {issue.status} · {where}",
            )
        )
    found.append(_resource(task_uri(task.task_id), f"Task: {objective}", f"{task.status} · {where}"))
    if run is not None:
        verdict = f" · verdict {run.verdict}" if run.verdict is not None else ""
        found.append(
            _resource(
                run_uri(run.run_id),
                f"Run {run.number}: {objective}",
                f"{run.status} · by {who(run.executor)}{verdict} · {repo}",
            )
        )
        if run.evidence_pack_id is not None:
            found.append(
                _resource(
                    evidence_uri(run.evidence_pack_id),
                    f"Evidence: {objective}",
                    f"verdict {run.verdict} · review {run.review_state} · run {run.number} · {repo}",
                )
            )
    return found


async def list_page(core: Core, fixed: list[MCPResource], cursor: str | None, page_tasks: int) -> ListResourcesResult:
    tasks, following = await listed_tasks(core, _decode(cursor), page_tasks)
    resources = list(fixed) if cursor is None else []
    if cursor is None:  # the first page: active missions first, newest first
        active = await mission_status.list_missions(core, status="active", limit=MISSIONS_LISTED)
        resources += [
            _resource(
                uris.mission(m.mission_id),
                f"Mission: {headline(m.title, NAME_CHARS)}",
                f"{m.status} · {m.approved}/{m.total} tasks approved · phases, blockers, decisions",
            )
            for m in active.missions
        ]
        resources += [
            _resource(
                uris.workflow(w.name),
                f"Workflow: {w.name}",
                f"{headline(w.summary, NAME_CHARS)} · steps {' → '.join(st.id for st in w.steps)} · v{w.version}",
            )
            for w in core.workflows.catalog().workflows.values()
        ]
        shelf = await doctrine.list_doctrine(core, limit=DOCTRINE_LISTED)
        resources += [
            _resource(
                d.uri,
                f"Doctrine: {line(d.ref, NAME_CHARS)}",
                "Standing guidance"
                + (f" for every task of {line(d.repo_prefix, NAME_CHARS)}" if d.repo_prefix else " named at enqueue"),
            )
            for d in shelf.doctrine
        ]
    for listed in tasks:
        resources += entries(listed)
    return ListResourcesResult(resources=resources, next_cursor=_encode(following))


def register(server: MCPServer[Any], core: Core, *, page_tasks: int = PAGE_TASKS) -> None:
    """Replace the SDK's resources/list (which knows only registered resources) with the paginated walk."""

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams
    ) -> ListResourcesResult:
        fixed = await server.list_resources() if params.cursor is None else []
        return await list_page(core, fixed, params.cursor, page_tasks)

    sdk.add_request_handler(server, "resources/list", PaginatedRequestParams, list_resources)
