"""Who is calling: an Actor for every tool call, whatever the transport."""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from typing import Any, Protocol

from server.core.models import Actor


class Identity(Protocol):
    def actor(self, ctx: Any) -> Actor: ...


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
