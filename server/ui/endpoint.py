"""How a dashboard handler becomes a route: Host and Origin checked, the visitor known (or sent to the login
form), a posted form's size, token and role checked, and JCT's errors shown as pages."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from server.errors import NOT_FOUND, ErrorCode, JctError
from server.failures import world_failure
from server.ui.access import Viewer
from server.ui.dashboard import Dashboard, dashboard

MAX_FORM_BYTES = 64 * 1024

Handler = Callable[[Dashboard, Request, Viewer], Awaitable[Response]]


def page(handler: Handler, action: str | None = None) -> Callable[[Request], Awaitable[Response]]:
    """A route's endpoint for `handler`; `action` names what a posted form does, for the role check."""

    async def endpoint(request: Request) -> Response:
        ui = dashboard(request)
        refused = await ui.guard.validate_request(request)
        if refused is not None:
            return refused
        viewer: Viewer | None = None
        try:
            viewer = await ui.access.viewer(request)
            if viewer is None:
                return RedirectResponse(f"/ui/login?{urlencode({'next': request.url.path})}", status_code=303)
            if not viewer.may_read:
                return ui.problem(request, viewer, 403, "Not allowed", "Your token's roles cannot read the queue.")
            if request.method == "POST":
                refusal = await _check_form(request, viewer, action)
                if refusal is not None:
                    return ui.problem(request, viewer, *refusal)
            return await handler(ui, request, viewer)
        except Exception as caught:
            exc = _first(caught)
            if isinstance(exc, JctError):
                # An id in the path that is not one JCT made names nothing: as unknown as a well-formed one.
                malformed = exc.code is ErrorCode.INVALID_ARGUMENT and bool(request.path_params)
                missing = (exc.code in NOT_FOUND or malformed) and request.method == "GET"
                status = 404 if missing else 403 if exc.code is ErrorCode.PERMISSION_DENIED else 400
                title = "Not found" if status == 404 else exc.code.value
                return ui.problem(request, viewer, status, title, exc.message, exc.suggestion)
            if world_failure(exc) is None:
                raise
            message = "JCT cannot reach its database right now; nothing was changed."
            return ui.problem(request, None, 503, "Unavailable", message, "Retry in a few seconds.")

    return endpoint


async def _check_form(request: Request, viewer: Viewer, action: str | None) -> tuple[int, str, str, str] | None:
    length = request.headers.get("content-length")
    if length is None or not length.isdigit() or int(length) > MAX_FORM_BYTES:
        return 413, "Too large", "The form was larger than the dashboard accepts.", "Shorten the text."
    form = await request.form()
    request.state.form = form
    if not viewer.csrf_ok(form.get("csrf")):
        return 403, "Form refused", "This form was not sent by a current dashboard page.", "Reload the page."
    if action is not None and not viewer.may(action):
        return 403, "Not allowed", f"Your token's roles do not allow {action}.", "Ask an admin."
    return None


def _first(exc: Exception) -> Exception:
    """The exception itself, or the first one a task group wrapped (the overview reads side by side)."""
    while isinstance(exc, ExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
