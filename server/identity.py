"""Who is calling: an Actor for every tool call, whatever the transport, and which tools it may use.

- stdio, and HTTP with JCT_AUTH=none: `FixedIdentity`, one principal for every caller.
- HTTP with JCT_AUTH=token: `TokenIdentity`. The front door (server/auth.py) verifies the bearer token of
  each HTTP request and stores it, as the SDK's `AccessToken`, in the SDK's auth context variable; the SDK
  runs every request handler in the context of the HTTP request that carried the message, so
  `get_access_token()` inside a tool names the principal of *that* request (streamable HTTP and SSE alike).
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from typing import Any, Protocol

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken

from server.core.models import Actor
from server.core.tokens import Principal, Role
from server.errors import ErrorCode, JctError

_ROLES = {role.value: role for role in Role}


class Identity(Protocol):
    def actor(self, ctx: Any) -> Actor:
        """The caller of the current tool call."""
        ...

    def may_use(self, tool: str, toolset: str) -> bool:
        """Whether the caller of the current request may call `tool` (of `toolset`)."""
        ...


def _client_name(ctx: Any) -> str:
    """The MCP client's self-reported name (display only; never an identity assertion)."""
    try:
        params = ctx.session.client_params
    except (AttributeError, LookupError, ValueError):
        return ""
    info = getattr(params, "client_info", None)
    return str(getattr(info, "name", "") or "")[:128]


def local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return os.environ.get("USER", "local")


@dataclass(frozen=True)
class FixedIdentity:
    """stdio, and HTTP with JCT_AUTH=none: one principal for every caller, named by the client for display."""

    actor_id: str

    def actor(self, ctx: Any) -> Actor:
        client = _client_name(ctx)
        return Actor(actor_id=self.actor_id, actor_kind="agent", name=client or self.actor_id, client=client)

    def may_use(self, tool: str, toolset: str) -> bool:
        return True


# --- bearer tokens ---------------------------------------------------------------------------


def access_token(principal: Principal, secret: str) -> AccessToken:
    """The SDK's record of a verified JCT token: the principal's name is the client and the subject,
    its roles are the scopes (so the SDK binds each HTTP session to the principal that opened it)."""
    return AccessToken(
        token=secret,
        client_id=principal.name,
        subject=principal.name,
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

    def actor(self, ctx: Any) -> Actor:
        principal = current_principal()
        if principal is None:
            raise no_token()
        return principal.actor(client=_client_name(ctx))

    def may_use(self, tool: str, toolset: str) -> bool:
        principal = current_principal()
        return principal is not None and principal.may_use(tool, toolset)
