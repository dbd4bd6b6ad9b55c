"""Who is calling: an Actor for every tool call, whatever the transport, and which tools it may use.

Claims are fenced on the run (server/core/claims/leases.py), and a call without a `run_id` acts on the run its
caller claimed. So every agent needs its own claimant identity, even when nothing authenticates it:

- stdio, and HTTP with JCT_AUTH=none: `LocalIdentity`. Each connection (a stdio process, a legacy
  streamable HTTP or SSE session) is its own agent, `local-3f2a9c` or `alice-3f2a9c`, unless
  JCT_AGENT_ID names it. A stateless 2026-07-28 request has no connection that outlives it: its
  caller is plain `local`, unless its HTTP request carries the header `X-JCT-Agent` (the Claude Code
  plugin's headersHelper sends one per Claude Code process): then, on any HTTP transport, its agent is
  `local-` and six hex digits of the header's SHA-256, the same for every request that carries that value.
  The header is self-asserted and tells agents apart for display and per-agent counts; it fences nothing
  (a caller without a session still names its run). It also ties a stateless call to its agent's
  listen stream, keyed with the principal (server/sessions.py `agent_holder`), with or without tokens.
  The principal is `local`: without tokens nothing is authenticated, so the key in the `run_id` a claim
  returned is what proves a caller claimed (server/core/claims/leases.py). Sessions and streams are capped
  per session, not per `local` (server/sessions.py).
- HTTP with JCT_AUTH=token: `TokenIdentity`. The front door (server/auth.py) verifies the bearer token of
  each HTTP request and stores it, as the SDK's `AccessToken`, in the SDK's auth context variable; the SDK
  runs every request handler in the context of the HTTP request that carried the message, so
  `get_access_token()` inside a tool names the principal of *that* request (streamable HTTP and SSE alike).
  The token's name is both the agent and the principal; the connection tells apart two agents that share
  one token. `X-JCT-Agent` is ignored: a header the client picks must not change who acts (separation of
  duties compares agents, the claim cap counts a principal's claims).

A caller without a session (a stateless request) must pass `run_id` to act on a claim: nothing else tells
its claim apart.

A client's self-reported `clientInfo.name` is kept for display only (`Actor.client`), cleaned of anything
that is not printable text.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import weakref
from dataclasses import dataclass, field
from typing import Any, Protocol

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.connection import Connection

from server import sdk
from server.core.models import LOCAL, Actor
from server.core.text import one_line, storable
from server.core.tokens import Principal, Role
from server.errors import ErrorCode, JctError, invalid

_ROLES = {role.value: role for role in Role}
CLIENT_NAME_CHARS = 64
AGENT_HEADER = "x-jct-agent"
AGENT_HEADER_CHARS = 128
_AGENT_VALUE = re.compile(rf"[\x21-\x7e]{{1,{AGENT_HEADER_CHARS}}}")  # visible ASCII, no spaces


class Identity(Protocol):
    def actor(self, ctx: Any) -> Actor:
        """The caller of the current tool call."""
        ...

    def may_use(self, tool: str, toolset: str) -> bool:
        """Whether the caller of the current request may call `tool` (of `toolset`)."""
        ...


def _connection(ctx: Any) -> Connection | None:
    try:
        return sdk.connection_of(ctx.request_context)
    except (AttributeError, LookupError, ValueError):
        return None


class SessionKeys:
    """A random key for each client connection, kept while the connection lives (weakly, so a closed
    connection is forgotten); None for a stateless request, whose connection ends with the request."""

    def __init__(self) -> None:
        self._keys: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()

    def of(self, ctx: Any) -> str | None:
        connection = _connection(ctx)
        channel = sdk.lasting_channel(connection) if connection is not None else None
        if channel is None:
            return None
        key = self._keys.get(channel)
        if key is None:
            key = self._keys[channel] = secrets.token_hex(8)
        return key


def client_name(ctx: Any) -> str:
    """The MCP client's self-reported name: display only, never an identity; plain, one line, short.
    A name no database can carry (NUL, a lone surrogate) is refused."""
    try:
        params = ctx.session.client_params
    except (AttributeError, LookupError, ValueError):
        return ""
    info = getattr(params, "client_info", None)
    name = str(getattr(info, "name", "") or "")
    storable(name, "clientInfo.name")
    return one_line(name, CLIENT_NAME_CHARS)


def declared_agent(ctx: Any) -> str | None:
    """The `X-JCT-Agent` header of the HTTP request that carried the call: None without one (stdio, or a
    client that sends none). A value that is not 1 to 128 visible ASCII characters, or the header sent
    twice, is refused: the call changes nothing."""
    try:
        request = ctx.request_context.request
    except (AttributeError, LookupError, ValueError):
        return None
    headers = getattr(request, "headers", None)
    if headers is None:
        return None
    values = headers.getlist(AGENT_HEADER)
    if not values:
        return None
    agent = agent_value(values)
    if agent is not None:
        return agent
    raise invalid(
        f"The X-JCT-Agent header must be sent once, 1 to {AGENT_HEADER_CHARS} visible ASCII characters "
        "(letters, digits, punctuation; no spaces).",
        "Fix or remove the header in the MCP client's configuration (the JCT plugin's headersHelper sends a "
        "valid one), then reconnect.",
    )


def agent_value(values: list[str]) -> str | None:
    """The X-JCT-Agent value of a request that sent the header `values`: None unless it was sent once, 1 to 128
    visible ASCII characters."""
    if len(values) == 1 and _AGENT_VALUE.fullmatch(values[0]):
        return str(values[0])
    return None


def agent_suffix(value: str) -> str:
    """Six hex digits naming the agent that sent `value` as its X-JCT-Agent header."""
    return hashlib.sha256(value.encode()).hexdigest()[:6]


@dataclass(frozen=True)
class LocalIdentity:
    """stdio, and HTTP with JCT_AUTH=none: each connection is its own agent, `<base>-<6 hex>`, unless
    `fixed` (JCT_AGENT_ID) names every connection's agent; an HTTP request's X-JCT-Agent header names its
    agent instead of the connection."""

    base: str = LOCAL
    fixed: bool = False
    sessions: SessionKeys = field(default_factory=SessionKeys, compare=False)

    def actor(self, ctx: Any) -> Actor:
        session = self.sessions.of(ctx)
        declared = declared_agent(ctx)
        if self.fixed:
            actor_id = self.base
        elif declared is not None:  # the client names its agent (the Claude Code plugin: one per process)
            actor_id = f"{self.base}-{agent_suffix(declared)}"
        elif session is not None:
            actor_id = f"{self.base}-{session[:6]}"
        else:  # a stateless caller that names no agent is nobody in particular; it must name its run
            actor_id = self.base
        return Actor(
            actor_id=actor_id,
            actor_kind="agent",
            name=actor_id,
            client=client_name(ctx),
            principal=LOCAL,
            session=session,
        )

    def may_use(self, tool: str, toolset: str) -> bool:
        return True


def FixedIdentity(actor_id: str) -> LocalIdentity:
    """Every connection acts as `actor_id` (JCT_AGENT_ID; tests naming their agents)."""
    return LocalIdentity(actor_id, fixed=True)


# --- bearer tokens ---------------------------------------------------------------------------


def access_token(principal: Principal, secret: str) -> AccessToken:
    """The SDK's record of a verified JCT token: the principal's name is the client, the token's id the
    subject, its roles the scopes. The SDK binds each HTTP session to the (client, subject) that opened it,
    so a session outlives neither its token's revocation nor its rotation."""
    return AccessToken(
        token=secret,
        client_id=principal.name,
        subject=principal.token_id,
        scopes=sorted(role.value for role in principal.roles),
    )


def principal_of(token: AccessToken) -> Principal:
    return Principal(name=token.client_id, roles=frozenset(_ROLES[s] for s in token.scopes if s in _ROLES))


def current_principal() -> Principal | None:
    """The principal whose verified token the current HTTP request carried, if any."""
    token = get_access_token()
    return None if token is None else principal_of(token)


def no_token() -> JctError:
    return JctError(
        ErrorCode.PERMISSION_DENIED,
        "This call carries no verified bearer token.",
        "Connect over HTTP with the header 'Authorization: Bearer jct_...' (an operator creates one with "
        "`jct token create`).",
    )


@dataclass(frozen=True)
class TokenIdentity:
    """HTTP with JCT_AUTH=token: the principal of the bearer token the current request carried."""

    sessions: SessionKeys = field(default_factory=SessionKeys, compare=False)

    def actor(self, ctx: Any) -> Actor:
        principal = current_principal()
        if principal is None:
            raise no_token()
        return principal.actor(client=client_name(ctx), session=self.sessions.of(ctx))

    def may_use(self, tool: str, toolset: str) -> bool:
        principal = current_principal()
        return principal is not None and principal.may_use(tool, toolset)
