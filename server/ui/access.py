"""Who is looking at the dashboard, and what they may do: the same roles the tools check.

With JCT_AUTH=none (loopback only) every visitor is the local operator, with every right. With tokens, a
visitor logs in by posting a token; the session is a signed cookie (server/core/tokens.py) checked on every
request, so revoking the token ends it. Every form carries a CSRF token tied to the session. Where there is no
session yet (the login form) or none at all (JCT_AUTH=none), the browser holds a random nonce in a cookie and
the form carries its MAC under a key kept in the database (server/core/tokens.py `form_key`): a page on another
port of the same host can plant the cookie (cookies ignore ports) but cannot compute the token that goes with
it; any JCT process on the database accepts it, and a restart does not make open forms stale.
"""

from __future__ import annotations

import hmac
import re
import secrets
from dataclasses import dataclass

from starlette.requests import Request

from server.core import tokens
from server.core.models import LOCAL, Actor
from server.core.service import Core
from server.core.tokens import Principal

COOKIE = "jct_ui"
FORM_COOKIE = "jct_form"  # the nonce whose MAC the login form and the forms of JCT_AUTH=none carry

# Each dashboard action, as the tool it mirrors and that tool's toolset: a role may do on the dashboard
# exactly what it may do through MCP.
ACTIONS: dict[str, tuple[str, str]] = {
    "review": ("jct_submit_review", "review"),
    "requeue": ("jct_requeue_task", "admin"),
    "priority": ("jct_set_priority", "admin"),
    "cancel": ("jct_cancel_task", "admin"),
    # Another agent's claim ended by hand: no tool of its own; as much an admin's as cancelling it.
    "release": ("jct_cancel_task", "admin"),
    "expire": ("jct_cancel_task", "admin"),
}
READ = ("jct_get_task", "observe")


@dataclass(frozen=True)
class Viewer:
    name: str
    csrf: str
    principal: Principal | None = None  # None: JCT_AUTH=none, the local operator
    credential: str | None = None  # the token id the session was opened with
    issued: str | None = None  # a new nonce, which the page sets as FORM_COOKIE

    def may(self, action: str) -> bool:
        tool, toolset = ACTIONS.get(action, READ)
        return self.principal is None or self.principal.may_use(tool, toolset)

    @property
    def may_read(self) -> bool:
        return self.principal is None or self.principal.may_use(*READ)

    @property
    def signed_in(self) -> bool:
        return self.principal is not None

    def actor(self) -> Actor:
        if self.principal is None:
            return Actor(actor_id=LOCAL, actor_kind="human", name="dashboard", admin=True, principal=LOCAL)
        return self.principal.actor(client="dashboard")

    def csrf_ok(self, sent: object) -> bool:
        return isinstance(sent, str) and hmac.compare_digest(sent, self.csrf)


class Access:
    def __init__(self, core: Core, tokens_on: bool) -> None:
        self.core = core
        self.tokens_on = tokens_on
        self._form_key: str | None = None

    async def form_token(self, request: Request) -> tuple[str, str | None]:
        """The token a sessionless form carries: the MAC of the nonce the visitor's FORM_COOKIE holds, or of a
        new nonce, returned second for the page to set."""
        if self._form_key is None:
            self._form_key = await tokens.form_key(self.core)
        held = request.cookies.get(FORM_COOKIE, "")
        issued = None if re.fullmatch(r"[0-9a-f]{64}", held) else secrets.token_hex(32)
        return tokens.form_token(self._form_key, issued or held), issued

    async def viewer(self, request: Request) -> Viewer | None:
        """The visitor, or None when tokens are on and the request carries no live session."""
        if not self.tokens_on:
            csrf, issued = await self.form_token(request)
            return Viewer(LOCAL, csrf, issued=issued)
        cookie = request.cookies.get(COOKIE)
        if not cookie:
            return None
        session = await tokens.ui_session(self.core, cookie)
        if session is None:
            return None
        principal = session.principal
        return Viewer(principal.name, session.csrf, principal, principal.token_id)

    async def login(self, secret: str) -> tuple[Viewer, str] | None:
        opened = await tokens.open_ui_session(self.core, secret)
        if opened is None:
            return None
        session, cookie = opened
        principal = session.principal
        return Viewer(principal.name, session.csrf, principal, principal.token_id), cookie
