"""The HTTP front door with JCT_AUTH=token: bearer tokens, protected-resource metadata, a per-principal rate cap.

Every HTTP request to the MCP endpoints (/mcp, /sse, /messages/) must carry `Authorization: Bearer jct_...`.
`FrontDoor` verifies it (a hash lookup in the tokens table, on every request, so a revoked token stops
working at once), answers 401 with a `WWW-Authenticate` header naming the protected-resource metadata
(RFC 9728, as the MCP authorization spec asks), 403 for a token whose roles allow no MCP use, 429 when a
principal exceeds JCT_RATE_LIMIT_PER_MINUTE, and 503 when the database cannot say. Each refusal's body is a
JSON-RPC error (with the request's id when it sent one), so MCP clients show JCT's message; the OAuth
fields (`error`, `error_description`) are in its `data`. A request it lets through carries the SDK's
`AuthenticatedUser` in `scope["user"]` and in the SDK's auth context variable: the SDK binds each HTTP
session to the principal that opened it, and `TokenIdentity` (server/identity.py) reads the principal of
each tool call from there. /healthz, /readyz and the metadata stay open.

URLs that name the server (the metadata, the challenge's `resource_metadata`) come from `PublicOrigin`:
JCT_PUBLIC_URL, or a Host JCT answers to by name, never whatever Host a request made up.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend
from mcp.server.auth.provider import AccessToken
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from server.connections import LOG_INTERVAL, Repeats
from server.core import tokens
from server.core.service import Core
from server.errors import RpcCode
from server.failures import FailureLog, as_error, world_failure
from server.identity import access_token

log = logging.getLogger("jct.auth")

METADATA_PATH = "/.well-known/oauth-protected-resource"
# Each protected path prefix, and the resource (RFC 9728) whose metadata a 401 on it points to.
PROTECTED: tuple[tuple[str, str], ...] = (("/mcp", "/mcp"), ("/sse", "/sse"), ("/messages", "/sse"))
RESOURCE_NAME = "JCT work queue"
MAX_BUCKETS = 100_000
# A refused request's body is read to answer with its JSON-RPC id only up to this size; beyond it, `id` is null.
MAX_ID_BODY = 1024 * 1024


class JctTokenVerifier:
    """The SDK's TokenVerifier for JCT's own tokens (`jct token create`)."""

    def __init__(self, core: Core) -> None:
        self.core = core

    async def verify_token(self, token: str) -> AccessToken | None:
        principal = await tokens.verify(self.core, token)
        return None if principal is None else access_token(principal, token)


class RateLimiter:
    """A token bucket per principal: `per_minute` requests of burst, refilled at `per_minute` a minute."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.clock = clock
        self.buckets: dict[str, tuple[float, float]] = {}

    def take(self, key: str) -> float:
        """0 when the request may proceed (and is counted); otherwise the seconds until one may."""
        now = self.clock()
        level, last = self.buckets.get(key, (self.capacity, now))
        level = min(self.capacity, level + (now - last) * self.rate)
        if level >= 1.0:
            self._store(key, level - 1.0, now)
            return 0.0
        self._store(key, level, now)
        return (1.0 - level) / self.rate

    def wait(self, key: str) -> float:
        """What `take` would answer, without counting anything."""
        now = self.clock()
        level, last = self.buckets.get(key, (self.capacity, now))
        level = min(self.capacity, level + (now - last) * self.rate)
        return 0.0 if level >= 1.0 else (1.0 - level) / self.rate

    def _store(self, key: str, level: float, now: float) -> None:
        if key not in self.buckets and len(self.buckets) >= MAX_BUCKETS:
            self.buckets.clear()  # only reachable with absurd numbers of tokens; forgetting refills buckets
        self.buckets[key] = (level, now)


def _resource_of(path: str) -> str | None:
    for prefix, resource in PROTECTED:
        if path == prefix or path.startswith(prefix + "/"):
            return resource
    return None


class PublicOrigin:
    """The base URL clients reach JCT at, for what names it: JCT_PUBLIC_URL when set; else the request's Host
    when it is a name JCT answers to (loopback, the bind address, JCT_ALLOWED_HOSTS); else the first of
    those. A Host a request made up is never reflected."""

    def __init__(self, public_url: str, names: Sequence[str], fallback: str) -> None:
        self._fixed = public_url.rstrip("/")
        self._names = tuple(names)
        self._fallback = fallback

    def base(self, conn: HTTPConnection) -> str:
        if self._fixed:
            return self._fixed
        host = conn.headers.get("host", "")
        return f"{conn.url.scheme}://{host if self._is_named(host) else self._fallback}"

    def _is_named(self, host: str) -> bool:
        # The SDK's Host rule (server/app.py transport_security): a name, or a name and a port.
        name, colon, port = host.rpartition(":")
        return host in self._names or (bool(colon) and port.isdigit() and name in self._names)

    def metadata_url(self, conn: HTTPConnection, resource: str) -> str:
        """Where RFC 9728 section 3.1 puts the metadata of `{base}{resource}`."""
        return f"{self.base(conn)}{METADATA_PATH}{resource}"


async def _request_id(scope: Scope, receive: Receive) -> str | int | None:
    """The id of the JSON-RPC request in the body of a request being refused (it is never passed on), or None."""
    if scope.get("method") != "POST":
        return None
    body = bytearray()
    while len(body) <= MAX_ID_BODY:
        message = await receive()
        if message["type"] != "http.request":
            return None
        body.extend(message.get("body", b""))
        if not message.get("more_body", False):
            break
    else:
        return None
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or "method" not in parsed:
        return None
    request_id = parsed.get("id")
    return request_id if isinstance(request_id, str | int) and not isinstance(request_id, bool) else None


async def _rate_limited(scope: Scope, receive: Receive, send: Send, wait: float, what: str) -> None:
    """429 with Retry-After: `what` was refused for `wait` seconds more."""
    retry_after = max(1, math.ceil(wait))
    data = {
        "error": "rate_limited",
        "error_description": f"{what}; retry after {retry_after}s.",
        "retry_after_seconds": retry_after,
    }
    await _refuse(scope, receive, send, 429, RpcCode.RATE_LIMITED, data, {"Retry-After": str(retry_after)})


async def _refuse(
    scope: Scope,
    receive: Receive,
    send: Send,
    status: int,
    code: RpcCode,
    data: dict[str, Any],
    headers: dict[str, str] | None = None,
) -> None:
    """A JSON-RPC error body, for MCP clients, with the OAuth fields kept in `data`."""
    error = {"code": int(code), "message": data["error_description"], "data": data}
    body = {"jsonrpc": "2.0", "id": await _request_id(scope, receive), "error": error}
    await JSONResponse(body, status_code=status, headers=headers)(scope, receive, send)


class FrontDoor:
    """ASGI middleware in front of the whole app: authenticate, authorize and rate-limit the MCP endpoints."""

    def __init__(
        self,
        app: ASGIApp,
        core: Core,
        rate_limit_per_minute: int,
        public: PublicOrigin,
        unauthenticated_per_minute: int = 60,
        unchecked_close: Callable[[str, str], None] | None = None,
    ) -> None:
        self.app = app
        # Told of a close request (DELETE of a session) whose token could not be checked: (session id, token).
        self.unchecked_close = unchecked_close
        self.backend = BearerAuthBackend(JctTokenVerifier(core))
        self.with_context = AuthContextMiddleware(app)
        self.limiter = RateLimiter(rate_limit_per_minute)
        # Requests without a valid token, per client address: guessing tokens, or a flood of 401s, is slowed.
        self.strangers = RateLimiter(unauthenticated_per_minute)
        self.repeats = Repeats()
        self.public = public
        self.failures = FailureLog(log, "requests with a token answer 503")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        resource = _resource_of(scope["path"]) if scope["type"] == "http" else None
        if resource is None:
            await self.app(scope, receive, send)
            return
        conn = HTTPConnection(scope)
        began = self.failures.now()
        try:
            authenticated = await self.backend.authenticate(conn)
        except Exception as exc:
            self._remember_close(conn)
            await self._unavailable(exc, scope, receive, send)
            return
        self.failures.recovered(began=began)
        if authenticated is None:
            await self._unauthorized(conn, resource, scope, receive, send)
            return
        credentials, user = authenticated
        if not credentials.scopes:
            description = (
                "This token has no role that allows using JCT; ask the operator for one with "
                "--role worker, reviewer or admin."
            )
            challenge = self._challenge(conn, resource, "insufficient_scope", "No usable role")
            data: dict[str, Any] = {"error": "insufficient_scope", "error_description": description}
            await _refuse(scope, receive, send, 403, RpcCode.FORBIDDEN, data, {"WWW-Authenticate": challenge})
            return
        wait = self.limiter.take(user.access_token.client_id)
        if wait > 0:
            log.info("rate limit: %s must wait %ds", user.access_token.client_id, max(1, math.ceil(wait)))
            await _rate_limited(
                scope, receive, send, wait, "Too many requests for this token (JCT_RATE_LIMIT_PER_MINUTE)"
            )
            return
        scope["user"] = user
        scope["auth"] = credentials
        await self.with_context(scope, receive, send)

    def _remember_close(self, conn: HTTPConnection) -> None:
        """A session's DELETE refused for want of a database is still carried out once the token can be
        checked (server/sessions.py), so the session does not stay open for its idle timeout."""
        session = conn.headers.get("mcp-session-id")
        header = conn.headers.get("authorization", "")
        if self.unchecked_close is None or conn.scope["method"] != "DELETE" or session is None:
            return
        if header.lower().startswith("bearer ") and (token := header[7:].strip()):
            self.unchecked_close(session, token)

    async def _unauthorized(
        self, conn: HTTPConnection, resource: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        address = conn.client.host if conn.client is not None else ""
        wait = self.strangers.take(address)
        if wait > 0:
            held = self.repeats.due(("unauthenticated", address))
            if held is not None:
                log.warning(
                    "rate limit: %d request(s) without a valid token from %s refused "
                    "(JCT_UNAUTHENTICATED_PER_MINUTE; logged once per %.0fs)",
                    held + 1,
                    address or "an unknown address",
                    LOG_INTERVAL,
                )
            what = "Too many requests without a valid token from this address (JCT_UNAUTHENTICATED_PER_MINUTE)"
            await _rate_limited(scope, receive, send, wait, what)
            return
        header = conn.headers.get("authorization")
        if header is None or not header.lower().startswith("bearer "):
            description = "Authentication required: send 'Authorization: Bearer jct_...' (see `jct token create`)."
        else:
            description = "The bearer token is not valid: unknown, mistyped or revoked."
        challenge = self._challenge(conn, resource, "invalid_token", description)
        data = {"error": "invalid_token", "error_description": description}
        await _refuse(scope, receive, send, 401, RpcCode.AUTHENTICATION_REQUIRED, data, {"WWW-Authenticate": challenge})

    async def _unavailable(self, exc: Exception, scope: Scope, receive: Receive, send: Send) -> None:
        """The token could not be verified: the database failed (one log line per interval), or JCT did."""
        failure = world_failure(exc)
        if failure is None:
            log.exception("verifying a bearer token failed")
            data: dict[str, Any] = {
                "error": "temporarily_unavailable",
                "error_description": "JCT could not verify the token; retry shortly.",
            }
            await _refuse(scope, receive, send, 503, RpcCode.UNAVAILABLE, data)
            return
        self.failures.failed(failure)
        error = as_error(failure)
        wait = failure.retry_after_seconds
        data = {
            "error": "temporarily_unavailable",
            "error_description": f"JCT could not verify the token. {error.message} Retry in {wait} seconds.",
            "retry_after_seconds": wait,
        }
        await _refuse(scope, receive, send, 503, RpcCode.UNAVAILABLE, data, {"Retry-After": str(wait)})

    def _challenge(self, conn: HTTPConnection, resource: str, error: str, description: str) -> str:
        quoted = description.replace("\\", "\\\\").replace('"', "'")
        return (
            f'Bearer realm="jct", error="{error}", error_description="{quoted}", '
            f'resource_metadata="{self.public.metadata_url(conn, resource)}"'
        )


def metadata_routes(public: PublicOrigin) -> list[Route]:
    """RFC 9728 protected-resource metadata for /mcp and /sse (and the server root).

    There is no OAuth authorization server to name: tokens are issued by `jct token create`, so the document
    has no `authorization_servers` (optional in RFC 9728) and clients are configured with the header.
    """

    def handler(resource: str) -> Callable[[Request], Awaitable[Response]]:
        async def metadata(request: Request) -> Response:
            body = {
                "resource": f"{public.base(request)}{resource}",
                "bearer_methods_supported": ["header"],
                "scopes_supported": [role.value for role in tokens.Role],
                "resource_name": RESOURCE_NAME,
            }
            return Response(
                json.dumps(body),
                media_type="application/json",
                headers={"Cache-Control": "public, max-age=3600", "Access-Control-Allow-Origin": "*"},
            )

        return metadata

    return [
        Route(f"{METADATA_PATH}{resource}", handler(resource), methods=["GET"]) for resource in ("", "/mcp", "/sse")
    ]
