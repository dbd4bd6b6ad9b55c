"""create_app(): the one ASGI application. MCP over streamable HTTP and SSE, health, readiness, one lifespan.

The Core (and its not-yet-connected engine) and the MCP server are built once per app, here; the lifespan
connects, migrates, starts the lease sweeper and the MCP session manager. SSE connections enter only the
MCP server's trivial default lifespan, so nothing expensive is ever created per connection.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from importlib.metadata import version
from typing import Any

import anyio
from mcp.server import MCPServer
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from server import sdk
from server.auth import FrontDoor, JctTokenVerifier, PublicOrigin, metadata_routes
from server.background import run_background
from server.config import Settings
from server.core import schema, tokens
from server.core.claims import holding
from server.core.claims.queue import queue_stats
from server.core.service import Core
from server.failures import FailureLog
from server.identity import Identity, LocalIdentity, TokenIdentity
from server.mcp import build_mcp
from server.metrics import CONTENT_TYPE, Metrics
from server.notify.hub import NotificationHub
from server.session_guard import SessionGuard
from server.sessions import Sessions, session_entry, watch_revocations, watch_unclosed
from server.shutdown import CountRequests, Drain, Readiness
from server.ui.app import build_ui
from server.ui.dashboard import Dashboard

log = logging.getLogger("jct.app")

READY_CHECK_SECONDS = 5.0
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


def host_names(settings: Settings) -> list[str]:
    """The names JCT answers to: loopback, the bind host (unless a wildcard) and JCT_ALLOWED_HOSTS but `*`."""
    bind = f"[{settings.host}]" if ":" in settings.host else settings.host
    binds = [bind] if bind not in ("0.0.0.0", "[::]") else []
    return list(dict.fromkeys([*LOOPBACK, *binds, *(name for name in settings.allowed_hosts if name != "*")]))


def public_origin(settings: Settings) -> PublicOrigin:
    """JCT_PUBLIC_URL, else a Host from `host_names`, else the operator's first name for JCT, else the bind address."""
    names = host_names(settings)
    named = [name for name in settings.allowed_hosts if name != "*"]  # behind a proxy: its default port
    binds = names[len(LOOPBACK) :] if not named else []
    fallback = named[0] if named else f"{binds[0] if binds else LOOPBACK[0]}:{settings.port}"
    return PublicOrigin(settings.public_url, names, fallback)


def transport_security(settings: Settings) -> TransportSecuritySettings:
    """Host/Origin allow-list (DNS rebinding): loopback, the bind host and JCT_ALLOWED_HOSTS; `*` turns it off."""
    if "*" in settings.allowed_hosts:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    hosts = [form for name in host_names(settings) for form in (name, f"{name}:*")]
    origins = [f"{scheme}://{form}" for scheme in ("http", "https") for form in hosts]
    return TransportSecuritySettings(allowed_hosts=hosts, allowed_origins=origins)


def max_request_body(settings: Settings) -> int:
    """Big enough that an oversized artifact reaches JCT and gets PAYLOAD_TOO_LARGE, not a bare HTTP 413."""
    return max(16 * 1024 * 1024, 4 * settings.max_artifact_bytes)


def create_app(settings: Settings, *, extend: Callable[[MCPServer[Any]], None] | None = None) -> Starlette:
    """The JCT server. `extend` may register more tools on the MCP server before it is mounted (benchmarks)."""
    core = Core.build(settings)  # creating the engine does not connect; the lifespan does
    tokens_on = settings.auth == "token"
    identity: Identity = TokenIdentity() if tokens_on else LocalIdentity()
    metrics = Metrics()
    mcp = build_mcp(core, identity, NotificationHub(metrics, settings.max_subscriptions_per_session))
    if extend is not None:
        extend(mcp)
    security = transport_security(settings)
    public = public_origin(settings)
    body_limit = max_request_body(settings)
    # Claude Code re-initializes after `404 Session not found` (tests/claude_code/test_session_loss.py), so
    # idle legacy sessions are closed; and it never sends DELETE, so without that they would pile up.
    # Sessions are capped by JCT (server/sessions.py), which closes the least recently used instead of
    # refusing a new one as the SDK's own cap does.
    streamable = mcp.streamable_http_app(
        streamable_http_path="/mcp",
        transport_security=security,
        max_request_body_size=body_limit,
        session_idle_timeout=settings.session_idle_seconds or None,
        max_sessions=None,
    )
    sse = mcp.sse_app(
        sse_path="/sse", message_path="/messages/", transport_security=security, max_request_body_size=body_limit
    )
    sessions = Sessions(settings.max_sessions_per_principal, settings.max_sessions)
    replica = settings.replica
    sdk.hook_sessions(
        mcp.session_manager,
        rename=(lambda session_id: f"{replica}.{session_id}") if replica else None,
        admitted=lambda session_id, requestor, close: sessions.add(
            session_entry(sessions, session_id, requestor, close)
        ),
        discarded=sessions.remove,
    )
    head = schema.head_revision()
    state = Readiness()

    async def healthz(_: Request) -> JSONResponse:
        tools = await mcp.list_tools()
        return JSONResponse({"status": "ok", "version": version("jct"), "tools": len(tools)})

    async def readyz(_: Request) -> JSONResponse:
        reason = await _not_ready(core, head, state)
        if reason is not None:
            return JSONResponse({"status": "unavailable", "reason": reason}, status_code=503)
        return JSONResponse({"status": "ready", "revision": head})

    # /metrics is checked like /mcp, so a DNS-rebinding page cannot read it; /healthz and /readyz stay open.
    metrics_guard = TransportSecurityMiddleware(security)
    metrics_failures = FailureLog(log, "/metrics leaves out the queue figures")

    async def metrics_endpoint(request: Request) -> Response:
        refused = await metrics_guard.validate_request(request)
        if refused is not None:
            return refused
        began = metrics_failures.now()
        try:
            stats = await queue_stats(core)
        except Exception as exc:  # the process's own series still matter when the database is away
            if not metrics_failures.failed_on(exc):
                log.warning("metrics: queue figures unavailable: %s", exc)
        else:
            metrics_failures.recovered(began=began)
            for status, count in stats.counts.items():
                metrics.tasks.labels(status).set(count)
            metrics.leases_overdue.set(stats.expired_leases)
            metrics.pending_reviews.set(stats.pending_reviews)
            metrics.oldest_queued_age.set(stats.oldest_queued_age_seconds or 0)
        metrics.sessions.labels("streamable_http").set(len(sdk.streamable_sessions(mcp.session_manager)))
        metrics.sessions.labels("sse").set(sessions.count("sse"))
        metrics.sessions.labels("listen").set(sessions.count("listen"))
        metrics.sessions.labels("ui").set(sessions.count("ui"))
        metrics.subscribers.set(mcp.hub.subscriber_count)
        metrics.waiting_claims.set(core.waiters.count)
        metrics.count_turns(core.waiters.tried, core.waiters.skipped)
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            await schema.upgrade(core)
            async with anyio.create_task_group() as tg, mcp.session_manager.run():
                await tg.start(sessions.run)
                if tokens_on:
                    await tg.start(watch_revocations, sessions, partial(tokens.revoked_among, core))
                    await tg.start(watch_unclosed, sessions, partial(_token_subject, JctTokenVerifier(core)))
                await tg.start(run_background, core, mcp.hub)
                state.serving = True
                log.info("JCT serving (database at revision %s)", head)
                try:
                    yield
                finally:
                    state.serving = False
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await core.db.dispose()

    async def to_dashboard(_: Request) -> Response:
        return RedirectResponse("/ui/", status_code=307)

    routes: list[BaseRoute] = [
        Route("/healthz", healthz, methods=["GET"]),
        # The dashboard (server/ui/): its own login with tokens, so the front door leaves it alone.
        Route("/ui", to_dashboard, methods=["GET"]),
        Mount(
            "/ui",
            app=build_ui(
                Dashboard.build(core, mcp.hub, sessions, security, tokens_on, settings.login_failures_per_minute)
            ),
        ),
        Route("/health", healthz, methods=["GET"]),  # seed 003's name for the same liveness answer
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        *streamable.routes,
        *sse.routes,
        *(metadata_routes(public) if tokens_on else []),
    ]
    # With tokens on, every request to /mcp, /sse and /messages/ passes the front door (server/auth.py).
    # The request count is outermost, so a drain also waits for requests the front door is deciding on.
    drain = Drain(mcp.in_flight, state, core.db.stop, core.waiters.stop, partial(holding.hand_back, core))
    middleware = [Middleware(CountRequests, requests=drain.requests)]
    if tokens_on:
        middleware.append(
            Middleware(
                FrontDoor,
                core=core,
                rate_limit_per_minute=settings.rate_limit_per_minute,
                public=public,
                unauthenticated_per_minute=settings.unauthenticated_per_minute,
                unchecked_close=sessions.close_when_checked,
            )
        )
    # Inside the front door, so it knows who opened what.
    middleware.append(Middleware(SessionGuard, sessions=sessions))
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware)
    app.state.drain = drain
    app.state.metrics = metrics
    app.state.sessions = sessions
    return app


async def _token_subject(verifier: JctTokenVerifier, token: str) -> str | None:
    """The id of the valid token `token`, or None (raises while the database is away)."""
    verified = await verifier.verify_token(token)
    return None if verified is None else verified.subject


async def _not_ready(core: Core, head: str, state: Readiness) -> str | None:
    try:
        with anyio.fail_after(READY_CHECK_SECONDS):
            revision = await schema.revision(core)
    except Exception as exc:
        detail = str(exc).strip().splitlines()
        return f"database unreachable: {type(exc).__name__}" + (f": {detail[0]}" if detail else "")
    if revision != head:
        return f"database not migrated: at revision {revision}, head is {head}"
    if (full := core.db.disk_full()) is not None:
        return f"disk full: writes fail ({full})"
    if state.draining:
        return "draining: the server is shutting down"
    if not state.serving:
        return "starting: the server's lifespan has not started"
    return None
