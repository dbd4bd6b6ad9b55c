"""The dashboard at /ui/ (DESIGN section 14): server-rendered pages over the same core operations the tools
call, forms for the operator's actions, and one event stream per page fed by the change feed."""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import anyio
from jinja2 import Environment, FileSystemLoader, select_autoescape
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from server.core.claims import cancel, queue
from server.core.missions import status as mission_status
from server.core.operators import actions as operators
from server.core.operators import observe
from server.core.review import reviews as review
from server.core.service import Core
from server.errors import NOT_FOUND, ErrorCode, JctError
from server.failures import world_failure
from server.notify.hub import NotificationHub
from server.sessions import Sessions
from server.ui.access import COOKIE, FORM_COOKIE, Access, Viewer, form_token

log = logging.getLogger("jct.ui")

HERE = Path(__file__).parent
MAX_FORM_BYTES = 64 * 1024
HEARTBEAT_SECONDS = 15.0
FLOW_CACHE_SECONDS = 5.0
PAGE = 25
STATUSES = ("queued", "blocked", "running", "completed", "failed", "cancelled", "all")
OPERATIONS = ("code_change", "docs", "analysis", "ops")
PRIORITIES = ("P0", "P1", "P2", "P3", "P4")

Handler = Callable[[Request, Viewer], Awaitable[Response]]


def _when(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _iso(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(UTC).isoformat()


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(["html"], default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["iso"] = _iso
    env.filters["pretty"] = _pretty
    return env


def build_ui(
    core: Core, hub: NotificationHub, sessions: Sessions, security: TransportSecuritySettings, tokens_on: bool
) -> Starlette:
    env = _environment()
    access = Access(core, tokens_on)
    # The throughput chart counts five-minute intervals: every page of this process shares a reading for a few
    # seconds rather than walking the last hour's audit rows on each live refresh.
    flow_cache: dict[str, tuple[float, Any]] = {}

    async def recent_throughput() -> Any:
        cached = flow_cache.get("flow")
        if cached is not None and time.monotonic() - cached[0] < FLOW_CACHE_SECONDS:
            return cached[1]
        flow = await operators.throughput(core)
        flow_cache["flow"] = (time.monotonic(), flow)
        return flow

    guard = TransportSecurityMiddleware(security)

    def render(request: Request, viewer: Viewer | None, name: str, code: int = 200, **values: Any) -> HTMLResponse:
        html = env.get_template(name).render(
            viewer=viewer, tokens_on=tokens_on, path=request.url.path, now=datetime.now(UTC), **values
        )
        headers = {
            "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "same-origin",  # "no-referrer" would make form posts send `Origin: null`
            "Cache-Control": "no-store",
        }
        response = HTMLResponse(html, status_code=code, headers=headers)
        if viewer is not None and viewer.issued:
            set_cookie(request, response, FORM_COOKIE, viewer.csrf)
        return response

    def set_cookie(request: Request, response: Response, name: str, value: str) -> None:
        """The dashboard's cookies (session, form token): HttpOnly, SameSite=Strict, under /ui only."""
        response.set_cookie(
            name, value, httponly=True, samesite="strict", path="/ui", secure=request.url.scheme == "https"
        )

    def problem(
        request: Request, viewer: Viewer | None, status: int, title: str, message: str, hint: str = ""
    ) -> Response:
        return render(request, viewer, "error.html", status, title=title, message=message, hint=hint)

    def page(handler: Handler, action: str | None = None) -> Callable[[Request], Awaitable[Response]]:
        """A route: Host and Origin checked, the visitor known (or sent to the login form), JCT's errors as pages."""

        async def endpoint(request: Request) -> Response:
            refused = await guard.validate_request(request)
            if refused is not None:
                return refused
            viewer: Viewer | None = None
            try:
                viewer = await access.viewer(request)
                if viewer is None:
                    return RedirectResponse(f"/ui/login?{urlencode({'next': request.url.path})}", status_code=303)
                if not viewer.may_read:
                    return problem(request, viewer, 403, "Not allowed", "Your token's roles cannot read the queue.")
                if request.method == "POST":
                    refusal = await _check_form(request, viewer, action)
                    if refusal is not None:
                        return problem(request, viewer, *refusal)
                return await handler(request, viewer)
            except Exception as caught:
                exc = _first(caught)
                if isinstance(exc, JctError):
                    # An id in the path that is not one JCT made names nothing: as unknown as a well-formed one.
                    malformed = exc.code is ErrorCode.INVALID_ARGUMENT and bool(request.path_params)
                    missing = (exc.code in NOT_FOUND or malformed) and request.method == "GET"
                    status = 404 if missing else 403 if exc.code is ErrorCode.PERMISSION_DENIED else 400
                    title = "Not found" if status == 404 else exc.code.value
                    return problem(request, viewer, status, title, exc.message, exc.suggestion)
                if world_failure(exc) is None:
                    raise
                message = "JCT cannot reach its database right now; nothing was changed."
                return problem(request, None, 503, "Unavailable", message, "Retry in a few seconds.")

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

    # --- pages -------------------------------------------------------------------------------------

    async def overview(request: Request, viewer: Viewer) -> Response:
        # Independent reads, each its own short transaction: run side by side.
        parts: dict[str, Any] = {}

        async def fetch(name: str, read: Awaitable[Any]) -> None:
            parts[name] = await read

        async with anyio.create_task_group() as tg:
            tg.start_soon(fetch, "stats", queue.queue_stats(core))
            tg.start_soon(fetch, "stuck", operators.list_stuck(core, limit=10))
            tg.start_soon(fetch, "agents", operators.list_agents(core))
            tg.start_soon(fetch, "missions", mission_status.list_missions(core, limit=10))
            tg.start_soon(fetch, "reviews", review.list_pending_reviews(core, limit=5))
            tg.start_soon(fetch, "oldest", queue.list_tasks(core, status="queued", limit=1))
            tg.start_soon(fetch, "flow", recent_throughput())
        stats, stuck, agents, missions, reviews, oldest, flow = (
            parts[name] for name in ("stats", "stuck", "agents", "missions", "reviews", "oldest", "flow")
        )
        return render(
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

    async def queue_page(request: Request, viewer: Viewer) -> Response:
        params = request.query_params
        filters = {key: params.get(key) or None for key in ("status", "operation", "repo", "mission")}
        status = filters["status"] or "queued"
        listing = await queue.list_tasks(
            core,
            status=status,
            operation=filters["operation"],
            repo=filters["repo"],
            mission_id=filters["mission"],
            limit=PAGE,
            cursor=params.get("cursor") or None,
        )
        more = None
        if listing.next_cursor:
            more = "?" + urlencode({**{k: v for k, v in filters.items() if v}, "cursor": listing.next_cursor})
        return render(
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

    async def task_page(request: Request, viewer: Viewer) -> Response:
        task_id = request.path_params["task_id"]
        view = await observe.get_task(core, task_id)
        context = await observe.get_context(core, task_id)
        runs = [await observe.get_run(core, run.run_id) for run in view.runs[:5]]
        evidence = {}
        for run in runs:
            if run.evidence_pack is not None:
                evidence[run.run.run_id] = (await observe.get_evidence(core, run.run.run_id)).evidence_pack
        audit = await observe.get_audit_trail(core, "Task", view.task.task_id, limit=100)
        return render(
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

    async def artifact_page(request: Request, viewer: Viewer) -> Response:
        content = await observe.get_artifact(core, request.path_params["artifact_id"], max_chars=100_000)
        lines = (content.content or "").splitlines()
        return render(request, viewer, "artifact.html", content=content, lines=lines)

    async def reviews_page(request: Request, viewer: Viewer) -> Response:
        cursor = request.query_params.get("cursor") or None
        pending = await review.list_pending_reviews(core, limit=PAGE, cursor=cursor)
        return render(request, viewer, "reviews.html", pending=pending, message=request.query_params.get("done", ""))

    async def missions_page(request: Request, viewer: Viewer) -> Response:
        status = request.query_params.get("status") or "active"
        cursor = request.query_params.get("cursor") or None
        listing = await mission_status.list_missions(core, status=status, limit=PAGE, cursor=cursor)
        more = "?" + urlencode({"status": status, "cursor": listing.next_cursor}) if listing.next_cursor else None
        return render(request, viewer, "missions.html", listing=listing, status=status, more=more)

    async def mission_page(request: Request, viewer: Viewer) -> Response:
        view = await mission_status.get_mission(core, request.path_params["mission_id"], include=["tasks"])
        return render(request, viewer, "mission.html", view=view)

    async def agents_page(request: Request, viewer: Viewer) -> Response:
        agents = await operators.list_agents(core)
        return render(request, viewer, "agents.html", agents=agents)

    async def stuck_page(request: Request, viewer: Viewer) -> Response:
        stuck = await operators.list_stuck(core, limit=200)
        return render(request, viewer, "stuck.html", stuck=stuck)

    async def audit_page(request: Request, viewer: Viewer) -> Response:
        params = request.query_params
        filters = {key: params.get(key) or None for key in ("actor_id", "action", "entity_kind", "since", "until")}
        page_ = await operators.search_audit(core, **filters, limit=50, cursor=params.get("cursor") or None)
        more = None
        if page_.next_cursor:
            more = "?" + urlencode({**{k: v for k, v in filters.items() if v}, "cursor": page_.next_cursor})
        return render(request, viewer, "audit.html", page=page_, filters=filters, more=more)

    # --- actions -----------------------------------------------------------------------------------

    def _form(request: Request) -> dict[str, str]:
        return {key: value for key, value in request.state.form.items() if isinstance(value, str)}

    async def review_action(request: Request, viewer: Viewer) -> Response:
        form = _form(request)
        result = await review.submit_review(
            core,
            viewer.actor(),
            request.path_params["pack_id"],
            form.get("decision", ""),
            form.get("reason", ""),
            reviewer_name=viewer.name,
        )
        return RedirectResponse(f"/ui/reviews?{urlencode({'done': f'Review recorded: {result.decision}.'})}", 303)

    async def task_action(
        request: Request, viewer: Viewer, run: Callable[[dict[str, str]], Awaitable[str]]
    ) -> Response:
        message = await run(_form(request))
        task_id = request.path_params["task_id"]
        return RedirectResponse(f"/ui/tasks/{task_id}?{urlencode({'done': message})}", 303)

    async def requeue_action(request: Request, viewer: Viewer) -> Response:
        async def run(form: dict[str, str]) -> str:
            result = await operators.requeue_task(
                core,
                viewer.actor(),
                request.path_params["task_id"],
                form.get("reason", ""),
                form.get("feedback") or None,
            )
            return f"Requeued: {result.task_status}."

        return await task_action(request, viewer, run)

    async def priority_action(request: Request, viewer: Viewer) -> Response:
        async def run(form: dict[str, str]) -> str:
            result = await operators.set_priority(
                core, viewer.actor(), request.path_params["task_id"], form.get("priority", "")
            )
            return f"Priority {result.previous} -> {result.priority}."

        return await task_action(request, viewer, run)

    async def cancel_action(request: Request, viewer: Viewer) -> Response:
        async def run(form: dict[str, str]) -> str:
            await cancel.cancel_task(core, viewer.actor(), request.path_params["task_id"], form.get("reason", ""))
            return "Cancelled."

        return await task_action(request, viewer, run)

    # --- login -------------------------------------------------------------------------------------

    async def login(request: Request) -> Response:
        refused = await guard.validate_request(request)
        if refused is not None:
            return refused
        target = request.query_params.get("next", "/ui/")
        target = target if target.startswith("/ui/") and "//" not in target else "/ui/"
        if not tokens_on:
            return RedirectResponse("/ui/", 303)
        csrf, issued = form_token(request)
        if request.method == "GET":
            form_page = render(request, None, "login.html", csrf=csrf, target=target, failed=False)
            if issued:
                set_cookie(request, form_page, FORM_COOKIE, csrf)
            return form_page
        length = request.headers.get("content-length")
        if length is None or not length.isdigit() or int(length) > 4096:
            return problem(request, None, 413, "Too large", "The login form was larger than a token.", "")
        form = await request.form()
        sent = form.get("csrf")
        if issued or not isinstance(sent, str) or not hmac.compare_digest(sent, csrf):
            return problem(request, None, 403, "Form refused", "This login form is out of date.", "Reload the page.")
        secret = form.get("token")
        opened = await access.login(secret.strip()) if isinstance(secret, str) else None
        if opened is None:
            return render(request, None, "login.html", 401, csrf=csrf, target=target, failed=True)
        _viewer, cookie = opened
        response = RedirectResponse(target, 303)
        set_cookie(request, response, COOKIE, cookie)
        return response

    async def logout(request: Request, viewer: Viewer) -> Response:
        response = RedirectResponse("/ui/login", 303)
        response.delete_cookie(COOKIE, path="/ui", httponly=True, samesite="strict")
        return response

    # --- the event stream --------------------------------------------------------------------------

    async def events(scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        refused = await guard.validate_request(request)
        viewer = await access.viewer(request) if refused is None else None
        if refused is not None or viewer is None:
            await (refused or Response("log in first", status_code=401))(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-store"),
                    (b"x-accel-buffering", b"no"),
                ],
            }
        )
        try:
            async with (
                sessions.stream("ui", viewer.name, viewer.credential),
                hub.watch() as changes,
                anyio.create_task_group() as tg,
            ):
                tg.start_soon(_until_disconnected, receive, tg.cancel_scope)
                # `hello` tells a page that (re)connected to catch up with what it missed.
                await _event(send, b"retry: 2000\nevent: hello\ndata: {}\n\n")
                while True:
                    with anyio.move_on_after(HEARTBEAT_SECONDS):
                        batch = await changes.receive()
                        await _event(send, b"event: change\ndata: " + json.dumps(sorted(batch)).encode() + b"\n\n")
                        continue
                    await _event(send, b": keep-alive\n\n")
        finally:
            # Closed by revocation, shutdown or the page going away: end the response if anyone still listens.
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def not_found(request: Request) -> Response:
        viewer = await access.viewer(request)
        return problem(request, viewer, 404, "Not found", f"There is no dashboard page at {request.url.path}.", "")

    routes = [
        Route("/", page(overview), methods=["GET"]),
        Route("/queue", page(queue_page), methods=["GET"]),
        Route("/tasks/{task_id}", page(task_page), methods=["GET"]),
        Route("/tasks/{task_id}/requeue", page(requeue_action, "requeue"), methods=["POST"]),
        Route("/tasks/{task_id}/priority", page(priority_action, "priority"), methods=["POST"]),
        Route("/tasks/{task_id}/cancel", page(cancel_action, "cancel"), methods=["POST"]),
        Route("/artifacts/{artifact_id}", page(artifact_page), methods=["GET"]),
        Route("/reviews", page(reviews_page), methods=["GET"]),
        Route("/reviews/{pack_id}", page(review_action, "review"), methods=["POST"]),
        Route("/missions", page(missions_page), methods=["GET"]),
        Route("/missions/{mission_id}", page(mission_page), methods=["GET"]),
        Route("/agents", page(agents_page), methods=["GET"]),
        Route("/stuck", page(stuck_page), methods=["GET"]),
        Route("/audit", page(audit_page), methods=["GET"]),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", page(logout), methods=["POST"]),
        Route("/events", _Asgi(events)),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        Route("/{rest:path}", page(lambda request, viewer: not_found(request))),
    ]
    return Starlette(routes=routes)


def _first(exc: Exception) -> Exception:
    """The exception itself, or the first one a task group wrapped (the overview reads side by side)."""
    while isinstance(exc, ExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


async def _event(send: Send, body: bytes) -> None:
    await send({"type": "http.response.body", "body": body, "more_body": True})


async def _until_disconnected(receive: Receive, scope: anyio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


class _Asgi:
    """A plain ASGI callable as a route's endpoint (Starlette wraps bare functions as request handlers)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)
