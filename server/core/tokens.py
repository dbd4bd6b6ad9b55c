"""Bearer tokens: created for a person or an agent with roles, stored only as hashes, revocable."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from server.core.models import Actor, ActorKind, new_id
from server.errors import invalid

if TYPE_CHECKING:
    from server.core.service import Core
    from server.db.records import Token

PREFIX = "jct_"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")


class Role(StrEnum):
    WORKER = "worker"
    REVIEWER = "reviewer"
    ADMIN = "admin"


# Which tool groups each role may use (DESIGN section 5). Workers may also enqueue, so agents
# can hand work to each other; only admins cancel.
ROLE_TOOLSETS: dict[Role, frozenset[str]] = {
    Role.WORKER: frozenset({"worker", "plan", "observe"}),
    Role.REVIEWER: frozenset({"observe", "review"}),
    Role.ADMIN: frozenset({"worker", "plan", "observe", "review", "admin"}),
}
WORKER_EXTRA_TOOLS = frozenset({"jct_enqueue_task"})


@dataclass(frozen=True)
class TokenInfo:
    name: str
    roles: tuple[str, ...]
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True)
class Principal:
    """A verified token holder; `token_id` names the very token (a name outlives a rotated token)."""

    name: str
    roles: frozenset[Role]
    token_id: str | None = None

    @property
    def admin(self) -> bool:
        return Role.ADMIN in self.roles

    def actor(self, client: str = "", session: str | None = None) -> Actor:
        kind: ActorKind = "agent" if self.roles & {Role.WORKER} else "human"
        return Actor(
            actor_id=self.name,
            actor_kind=kind,
            name=self.name,
            client=client,
            admin=self.admin,
            principal=self.name,
            session=session,
            authenticated=True,
        )

    def may_use(self, tool: str, toolset: str) -> bool:
        if any(toolset in ROLE_TOOLSETS[role] for role in self.roles):
            return True
        return Role.WORKER in self.roles and tool in WORKER_EXTRA_TOOLS


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _new(name: str, roles: tuple[Role, ...]) -> tuple[str, dict[str, object], TokenInfo]:
    """A new token: its secret, its row, and what is told of it."""
    secret = PREFIX + secrets.token_urlsafe(32)
    created = datetime.now(UTC)
    row = {
        "id": new_id(),
        "name": name,
        "roles": [role.value for role in roles],
        "token_hash": hash_secret(secret),
        "created_at": created,
    }
    return secret, row, TokenInfo(name, roles, created, None)


def _roles(roles: list[str]) -> tuple[Role, ...]:
    if not roles:
        raise invalid("a token needs at least one role.", "Pass --role worker, reviewer or admin.")
    parsed = tuple(sorted({Role(role) for role in roles if role in Role.__members__.values()}))
    if len(parsed) != len(set(roles)):
        raise invalid(f"unknown role in {roles}.", "Roles are worker, reviewer and admin.")
    return parsed


async def create_token(core: Core, name: str, roles: list[str]) -> tuple[str, TokenInfo]:
    """Returns the secret (shown once, never stored) and the token's record."""
    if not _NAME.match(name):
        raise invalid(f"token name {name!r} is not valid.", "Use letters, digits, '.', '_', '@' or '-' (max 128).")
    parsed = _roles(roles)
    secret, row, info = _new(name, parsed)
    async with core.db.write() as conn:
        inserted = await _rows().insert_token(conn, row)
    if not inserted:
        raise invalid(
            f"a live token named {name!r} already exists.",
            f"Pick another name, or replace it with `jct token rotate {name}`.",
        )
    return secret, info


async def rotate_token(core: Core, name: str) -> tuple[str, TokenInfo] | None:
    """Revoke the live token named `name` and create its successor with the same roles, in one transaction;
    None if there is no live token of that name."""
    async with core.db.write() as conn:
        old: Token | None = await _rows().live_token_by_name(conn, name)
        if old is None:
            return None
        parsed = tuple(sorted(Role(r) for r in old.roles if r in Role.__members__.values()))
        secret, row, info = _new(name, parsed)
        await _rows().revoke_token(conn, name, datetime.now(UTC))
        assert await _rows().insert_token(conn, row)
    return secret, info


async def revoked_among(core: Core, token_ids: set[str]) -> set[str]:
    """Which of these tokens have been revoked."""
    async with core.db.read() as conn:
        return set(await _rows().revoked_among(conn, token_ids))


async def list_tokens(core: Core) -> list[TokenInfo]:
    async with core.db.read() as conn:
        rows: list[Token] = await _rows().all_tokens(conn)
    return [TokenInfo(row.name, tuple(str(r) for r in row.roles), row.created_at, row.revoked_at) for row in rows]


async def revoke_token(core: Core, name: str) -> bool:
    async with core.db.write() as conn:
        return bool(await _rows().revoke_token(conn, name, datetime.now(UTC)))


async def verify(core: Core, secret: str) -> Principal | None:
    if not secret.startswith(PREFIX) or len(secret) > 256:
        return None
    async with core.db.read() as conn:
        row: Token | None = await _rows().live_token_by_hash(conn, hash_secret(secret))
    return _principal(row) if row is not None else None


def _principal(token: Token) -> Principal:
    # A role this build does not know (written by a newer one) grants nothing.
    known = {role.value for role in Role}
    return Principal(name=token.name, roles=frozenset(Role(r) for r in token.roles if r in known), token_id=token.id)


# --- dashboard sessions ------------------------------------------------------------------------
# A dashboard session is a cookie naming the token it was opened with, signed with that token's stored hash
# (which never leaves the database): any server process can check it, a restart keeps it, and revoking or
# rotating the token ends it at the next request, and so does logging out (its signature is then kept in
# ended_ui_sessions until it would have expired). The secret itself is never in the cookie or a URL.

UI_SESSION_SECONDS = 12 * 3600


def _mac(key: str, *parts: str) -> str:
    return hmac.new(key.encode(), "|".join(parts).encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class UiSession:
    principal: Principal
    csrf: str  # what every form of this session carries


async def open_ui_session(core: Core, secret: str) -> tuple[UiSession, str] | None:
    """A dashboard session for a token's secret, with its cookie value; None for a secret that is not live."""
    principal = await verify(core, secret)
    if principal is None or principal.token_id is None:
        return None
    # A random part makes each login its own session, so logging out of one ends no other.
    issued, nonce = str(int(time.time())), secrets.token_hex(8)
    mac = _mac(hash_secret(secret), "ui", principal.token_id, issued, nonce)
    cookie = f"{principal.token_id}.{issued}.{nonce}.{mac}"
    session = await ui_session(core, cookie)
    assert session is not None
    return session, cookie


async def ui_session(core: Core, cookie: str) -> UiSession | None:
    """The session a cookie names, if its signature holds, it is not older than UI_SESSION_SECONDS, it was not
    logged out and its token is still live."""
    parts = cookie.split(".")
    if len(parts) != 4 or len(cookie) > 200 or not parts[1].isdigit():
        return None
    token_id, issued, nonce, mac = parts
    if not 0 <= time.time() - int(issued) <= UI_SESSION_SECONDS:
        return None
    async with core.db.read() as conn:
        row: Token | None = await _rows().live_token_by_id(conn, token_id) if _is_uuid(token_id) else None
        ended = row is not None and await _rows().ui_session_ended(conn, mac)
    if row is None or ended or not hmac.compare_digest(mac, _mac(row.token_hash, "ui", token_id, issued, nonce)):
        return None
    return UiSession(_principal(row), _mac(row.token_hash, "csrf", token_id, issued, nonce))


async def end_ui_session(core: Core, cookie: str) -> None:
    """Log a session out on every process: its signature is refused until it would have expired anyway."""
    if await ui_session(core, cookie) is None:
        return
    _, issued, _, mac = cookie.split(".")
    expires = datetime.fromtimestamp(int(issued) + UI_SESSION_SECONDS, UTC)
    async with core.db.write() as conn:
        await _rows().end_ui_session(conn, mac, expires, datetime.now(UTC))


# --- dashboard forms without a session ----------------------------------------------------------
# The login form and every form of JCT_AUTH=none have no session to tie their token to. The browser holds a
# random nonce in a cookie, and the form carries a MAC of that nonce under a key kept in the database: another
# site on the same host (cookies ignore ports) can plant a nonce but cannot compute the MAC that goes with it,
# and every process on the database computes the same one.


async def form_key(core: Core) -> str:
    """The key form tokens are signed with, made by the first process that needs it."""
    async with core.db.write() as conn:
        key: str = await _rows().server_secret(conn, "dashboard_form_key", secrets.token_hex(32))
    return key


def form_token(key: str, nonce: str) -> str:
    return _mac(key, "form", nonce)


def _is_uuid(value: str) -> bool:
    return re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", value) is not None


def _rows() -> Any:
    """server.db.tokens, imported on first use: server/identity.py imports this module for Principal and Role,
    and `jct serve --stdio` answers `initialize` before it loads the database layer (server/cli/stdio.py)."""
    from server.db import tokens

    return tokens
