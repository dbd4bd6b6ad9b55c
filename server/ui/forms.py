"""The dashboard's forms that change things: a review decision, and a task requeued, reprioritised, cancelled,
or its claim released or expired now. Each calls the core operation its tool calls (an operator's release or
expiry has no tool: server/core/operators/claims.py), as the viewer, then sends the browser back to the page with
what happened (post, redirect, get)."""

from __future__ import annotations

from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from server.core.claims import cancel
from server.core.operators import actions, claims
from server.core.review import reviews as review
from server.ui.access import Viewer
from server.ui.dashboard import Dashboard


def _form(request: Request) -> dict[str, str]:
    """The posted fields the endpoint read and checked (server/ui/endpoint.py), text only."""
    return {key: value for key, value in request.state.form.items() if isinstance(value, str)}


def _back_to_task(request: Request, message: str) -> Response:
    """To the task's page, or to the stuck page when the form was posted from there (`back=stuck`)."""
    if _form(request).get("back") == "stuck":
        return RedirectResponse(f"/ui/stuck?{urlencode({'done': message})}", 303)
    task_id = request.path_params["task_id"]
    return RedirectResponse(f"/ui/tasks/{task_id}?{urlencode({'done': message})}", 303)


async def review_action(ui: Dashboard, request: Request, viewer: Viewer) -> Response:
    form = _form(request)
    result = await review.submit_review(
        ui.core,
        viewer.actor(),
        request.path_params["pack_id"],
        form.get("decision", ""),
        form.get("reason", ""),
        reviewer_name=viewer.name,
    )
    return RedirectResponse(f"/ui/reviews?{urlencode({'done': f'Review recorded: {result.decision}.'})}", 303)


async def requeue_action(ui: Dashboard, request: Request, viewer: Viewer) -> Response:
    form = _form(request)
    result = await actions.requeue_task(
        ui.core, viewer.actor(), request.path_params["task_id"], form.get("reason", ""), form.get("feedback") or None
    )
    return _back_to_task(request, f"Requeued: {result.task_status}.")


async def priority_action(ui: Dashboard, request: Request, viewer: Viewer) -> Response:
    form = _form(request)
    result = await actions.set_priority(
        ui.core, viewer.actor(), request.path_params["task_id"], form.get("priority", "")
    )
    return _back_to_task(request, f"Priority {result.previous} -> {result.priority}.")


async def cancel_action(ui: Dashboard, request: Request, viewer: Viewer) -> Response:
    form = _form(request)
    await cancel.cancel_task(ui.core, viewer.actor(), request.path_params["task_id"], form.get("reason", ""))
    return _back_to_task(request, "Cancelled.")


async def release_action(ui: Dashboard, request: Request, viewer: Viewer) -> Response:
    form = _form(request)
    result = await claims.release_claim(ui.core, viewer.actor(), request.path_params["task_id"], form.get("reason", ""))
    return _back_to_task(request, f"Released run {result.run_id[:8]}: the task is {result.task_status}.")


async def expire_action(ui: Dashboard, request: Request, viewer: Viewer) -> Response:
    form = _form(request)
    result = await claims.expire_claim(ui.core, viewer.actor(), request.path_params["task_id"], form.get("reason", ""))
    return _back_to_task(
        request,
        f"Expired run {result.run_id[:8]} ({result.attempts} expired lease(s)): the task is {result.task_status}.",
    )
