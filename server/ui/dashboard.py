"""What every dashboard handler reaches: the core, the change feed, the session cap, who is looking, the
templates; and the one way a page is rendered (its security headers, the form token's cookie)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import HTTPConnection, Request
from starlette.responses import HTMLResponse, Response

from server.auth import RateLimiter
from server.connections import Repeats
from server.core.service import Core
from server.markdown import duration
from server.notify.hub import NotificationHub
from server.sessions import Sessions
from server.ui.access import FORM_COOKIE, Access, Viewer

HERE = Path(__file__).parent
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # "no-referrer" would make form posts send `Origin: null`
    "Cache-Control": "no-store",
}


@dataclass
class Dashboard:
    core: Core
    hub: NotificationHub
    sessions: Sessions
    access: Access
    guard: TransportSecurityMiddleware  # Host and Origin, as the MCP endpoint checks them
    templates: Environment
    tokens_on: bool
    # Failed logins per client address (a token bucket): guessing tokens through the login form is slowed.
    login_failures: RateLimiter
    repeats: Repeats
    # The throughput chart's last reading and when it was taken (time.monotonic()): see pages.recent_throughput.
    flow: tuple[float, Any] | None = None

    @classmethod
    def build(
        cls,
        core: Core,
        hub: NotificationHub,
        sessions: Sessions,
        security: TransportSecuritySettings,
        tokens_on: bool,
        login_failures_per_minute: int = 10,
    ) -> Dashboard:
        access = Access(core, tokens_on)
        guard = TransportSecurityMiddleware(security)
        failures = RateLimiter(login_failures_per_minute)
        return cls(core, hub, sessions, access, guard, _environment(), tokens_on, failures, Repeats())

    def render(
        self, request: Request, viewer: Viewer | None, name: str, code: int = 200, **values: Any
    ) -> HTMLResponse:
        html = self.templates.get_template(name).render(
            viewer=viewer, tokens_on=self.tokens_on, path=request.url.path, now=datetime.now(UTC), **values
        )
        response = HTMLResponse(html, status_code=code, headers=HEADERS)
        if viewer is not None and viewer.issued is not None:
            set_cookie(request, response, FORM_COOKIE, viewer.issued)
        return response

    def problem(
        self, request: Request, viewer: Viewer | None, status: int, title: str, message: str, hint: str = ""
    ) -> Response:
        return self.render(request, viewer, "error.html", status, title=title, message=message, hint=hint)


def dashboard(connection: HTTPConnection) -> Dashboard:
    """The dashboard a request came to: build_ui holds it on its app's state."""
    ui = connection.app.state.dashboard
    assert isinstance(ui, Dashboard)
    return ui


def set_cookie(request: Request, response: Response, name: str, value: str) -> None:
    """The dashboard's cookies (session, form token): HttpOnly, SameSite=Strict, under /ui only."""
    response.set_cookie(name, value, httponly=True, samesite="strict", path="/ui", secure=request.url.scheme == "https")


def _when(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _iso(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(UTC).isoformat()


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


def _cost(spent: Any) -> str:
    """What runs reported spending (results.Spent), short: `$1.25 · 48,000 tokens`."""
    return f"${spent.cost_usd:.2f} · {int(spent.tokens):,} tokens"


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
    env.filters["cost"] = _cost
    env.filters["duration"] = duration
    return env
