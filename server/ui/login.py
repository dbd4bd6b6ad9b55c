"""Logging in to the dashboard with a token, and out. With JCT_AUTH=none there is nothing to log in to."""

from __future__ import annotations

import hmac
import logging
import math

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from server.connections import LOG_INTERVAL
from server.core import tokens
from server.ui.access import COOKIE, FORM_COOKIE, Viewer
from server.ui.dashboard import Dashboard, dashboard, set_cookie

log = logging.getLogger("jct.ui")

MAX_LOGIN_BYTES = 4096


async def login(request: Request) -> Response:
    """The login form (GET) and its post: a valid token opens a session cookie and goes on to `next`."""
    ui = dashboard(request)
    refused = await ui.guard.validate_request(request)
    if refused is not None:
        return refused
    target = request.query_params.get("next", "/ui/")
    target = target if target.startswith("/ui/") and "//" not in target else "/ui/"
    if not ui.tokens_on:
        return RedirectResponse("/ui/", 303)
    csrf, issued = await ui.access.form_token(request)
    if request.method == "GET":
        form_page = ui.render(request, None, "login.html", csrf=csrf, target=target, failed=False)
        if issued is not None:
            set_cookie(request, form_page, FORM_COOKIE, issued)
        return form_page
    length = request.headers.get("content-length")
    if length is None or not length.isdigit() or int(length) > MAX_LOGIN_BYTES:
        return ui.problem(request, None, 413, "Too large", "The login form was larger than a token.", "")
    form = await request.form()
    sent = form.get("csrf")
    if issued is not None or not isinstance(sent, str) or not hmac.compare_digest(sent, csrf):
        return ui.problem(request, None, 403, "Form refused", "This login form is out of date.", "Reload the page.")
    address = request.client.host if request.client is not None else ""
    wait = ui.login_failures.wait(address)
    if wait > 0:
        retry = max(1, math.ceil(wait))
        message = "Too many failed logins from this address (JCT_LOGIN_FAILURES_PER_MINUTE)."
        refused = ui.problem(request, None, 429, "Too many attempts", message, f"Retry in {retry}s.")
        refused.headers["Retry-After"] = str(retry)
        return refused
    secret = form.get("token")
    opened = await ui.access.login(secret.strip()) if isinstance(secret, str) else None
    if opened is None:
        ui.login_failures.take(address)
        held = ui.repeats.due(("login", address))
        if held is not None:
            log.warning(
                "dashboard: %d failed login(s) from %s (logged once per %.0fs)",
                held + 1,
                address or "an unknown address",
                LOG_INTERVAL,
            )
        return ui.render(request, None, "login.html", 401, csrf=csrf, target=target, failed=True)
    _viewer, cookie = opened
    response = RedirectResponse(target, 303)
    set_cookie(request, response, COOKIE, cookie)
    return response


async def logout(ui: Dashboard, request: Request, viewer: Viewer) -> Response:
    """End the session on every process, not only in this browser: a copy of its cookie stops working too."""
    cookie = request.cookies.get(COOKIE)
    if cookie:
        await tokens.end_ui_session(ui.core, cookie)
    response = RedirectResponse("/ui/login", 303)
    response.delete_cookie(COOKIE, path="/ui", httponly=True, samesite="strict")
    return response
