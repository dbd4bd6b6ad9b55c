"""The dashboard's pages that read: the overview, the queue, a task and its artifacts, reviews, missions,
agents, stuck tasks, the audit trail; and the page for an address that is none of them."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import Any
from urllib.parse import urlencode

import anyio
from starlette.requests import Request
from starlette.responses import Response

from server.core.claims import queue
from server.core.integration import queue as integration
from server.core.missions import status as mission_status
from server.core.operators import actions, observe
from server.core.review import reviews as review
from server.ui.access import Viewer
from server.ui.dashboard import Dashboard

FLOW_CACHE_SECONDS = 5.0
PAGE = 25
STATUSES = ("queued", "blocked", "running", "completed", "failed", "cancelled", "all")
OPERATIONS = ("code_change", "docs", "analysis", "ops")
PRIORITIES = ("P0", "P1", "P2", "P3", "P4")


async def recent_throughput(ui: Dashboard) -> Any:
    """The throughput chart counts five-minute intervals: every page of this process shares a reading for a few
    seconds rather than walking the last hour's audit rows on each live refresh."""
    if ui.flow is not None and time.monotonic() - ui.flow[0] < FLOW_CACHE_SECONDS:
        return ui.flow[1]
    flow = await actions.throughput(ui.core)
    ui.flow = (time.monotonic(), flow)
    return flow


async def overview(ui: Dashboard, request: Request, viewer: Viewer) -> Response:
    core = ui.core
    # Independent reads, each its own short transaction: run side by side.
    parts: dict[str, Any] = {}

    async def fetch(name: str, read: Awaitable[Any]) -> None:
        parts[name] = await read

    async with anyio.create_task_group() as tg:
        tg.start_soon(fetch, "stats", queue.queue_stats(core))
        tg.start_soon(fetch, "stuck", actions.list_stuck(core, limit=10))
        tg.start_soon(fetch, "agents", actions.list_agents(core))
        tg.start_soon(fetch, "missions", mission_status.list_missions(core, limit=10))
        tg.start_soon(fetch, "reviews", review.list_pending_reviews(core, limit=5))
        tg.start_soon(fetch, "oldest", queue.list_tasks(core, status="queued", limit=1))
        tg.start_soon(fetch, "flow", recent_throughput(ui))
    stats, stuck, agents, missions, reviews, oldest, flow = (
        parts[name] for name in ("stats", "stuck", "agents", "missions", "reviews", "oldest", "flow")
    )
    return ui.render(
        request,
        viewer,
        "overview.html",
        stats=stats,
        stuck=stuck,
        agents=agents,
        missions=missions,
        reviews=reviews,
        oldest=oldest.tasks[0] if oldest.tasks else None,
        flow=flow,
        peak=max([done + failed for done, failed in zip(flow.completed, flow.failed, strict=True)] + [1]),
    )


async def queue_page(ui: Dashboard, request: Request, viewer: Viewer) -> Response:
    params = request.query_params
    filters = {key: params.get(key) or None for key in ("status", "operation", "repo", "mission")}
    status = filters["status"] or "queued"
    listing = await queue.list_tasks(
        ui.core,
        status=status,
        operation=filters["operation"],
        repo=filters["repo"],
        mission_id=filters["mission"],
        limit=PAGE,
        cursor=params.get("cursor") or None,
    )
    more = _more(filters, listing.next_cursor)
    return ui.render(
        request,
        viewer,
        "queue.html",
        listing=listing,
        status=status,
        filters=filters,
        statuses=STATUSES,
        operations=OPERATIONS,
        more=more,
    )


async def task_page(ui: Dashboard, request: Request, viewer: Viewer) -> Response:
    core = ui.core
    task_id = request.path_params["task_id"]
    view = await observe.get_task(core, task_id)
    context = await observe.get_context(core, task_id)
    runs = [await observe.get_run(core, run.run_id) for run in view.runs[:5]]
    evidence = {}
    for run in runs:
        if run.evidence_pack is not None:
            evidence[run.run.run_id] = (await observe.get_evidence(core, run.run.run_id)).evidence_pack
    audit = await observe.get_audit_trail(core, "Task", view.task.task_id, limit=100)
    return ui.render(
        request,
        viewer,
        "task.html",
        view=view,
        task=view.task,
        context=context,
        runs=runs,
        evidence=evidence,
        audit=audit,
        priorities=PRIORITIES,
        message=request.query_params.get("done", ""),
    )


async def artifact_page(ui: Dashboard, request: Request, viewer: Viewer) -> Response:
    content = await observe.get_artifact(ui.core, request.path_params["artifact_id"], max_chars=100_000)
    lines = (content.content or "").splitlines()
    return ui.render(request, viewer, "artifact.html", content=content, lines=lines)


async def reviews_page(ui: Dashboard, request: Request, viewer: Viewer) -> Response:
    cursor = request.query_params.get("cursor") or None
    pending = await review.list_pending_reviews(ui.core, limit=PAGE, cursor=cursor)
    return ui.render(request, viewer, "reviews.html", pending=pending, message=request.query_params.get("done", ""))


async def missions_page(ui: Dashboard, request: Request, viewer: Viewer) -> Response:
    status = request.query_params.get("status") or "active"
    cursor = request.query_params.get("cursor") or None
    listing = await mission_status.list_missions(ui.core, status=status, limit=PAGE, cursor=cursor)
    more = "?" + urlencode({"status": status, "cursor": listing.next_cursor}) if listing.next_cursor else None
    return ui.render(request, viewer, "missions.html", listing=listing, status=status, more=more)


async def mission_page(ui: Dashboard, request: Request, viewer: Viewer) -> Response:
    view = await mission_status.get_mission(ui.core, request.path_params["mission_id"], include=["tasks"])
    return ui.render(request, viewer, "mission.html", view=view)


async def agents_page(ui: Dashboard, request: Request, viewer: Viewer) -> Response:
    agents = await actions.list_agents(ui.core)
    return ui.render(request, viewer, "agents.html", agents=agents)


async def merges_page(ui: Dashboard, request: Request, viewer: Viewer) -> Response:
    merges = await integration.merge_queue(ui.core, limit=200)
    return ui.render(request, viewer, "merges.html", merges=merges)


async def stuck_page(ui: Dashboard, request: Request, viewer: Viewer) -> Response:
    stuck = await actions.list_stuck(ui.core, limit=200)
    return ui.render(request, viewer, "stuck.html", stuck=stuck, message=request.query_params.get("done", ""))


async def audit_page(ui: Dashboard, request: Request, viewer: Viewer) -> Response:
    params = request.query_params
    filters = {key: params.get(key) or None for key in ("actor_id", "action", "entity_kind", "since", "until")}
    page_ = await actions.search_audit(ui.core, **filters, limit=50, cursor=params.get("cursor") or None)
    more = _more(filters, page_.next_cursor)
    return ui.render(request, viewer, "audit.html", page=page_, filters=filters, more=more)


async def not_found(ui: Dashboard, request: Request, viewer: Viewer) -> Response:
    return ui.problem(request, viewer, 404, "Not found", f"There is no dashboard page at {request.url.path}.", "")


def _more(filters: dict[str, str | None], cursor: str | None) -> str | None:
    """The next page's query: the filters in use and the cursor, or None on the last page."""
    if not cursor:
        return None
    return "?" + urlencode({**{k: v for k, v in filters.items() if v}, "cursor": cursor})
