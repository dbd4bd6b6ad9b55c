"""The HTTP front door with JCT_AUTH=token: bearer tokens, protected-resource metadata, a per-principal rate cap.

Every HTTP request to the MCP endpoints (/mcp, /sse, /messages/) must carry `Authorization: Bearer jct_...`.
`FrontDoor` verifies it (a hash lookup in the tokens table, on every request, so a revoked token stops
working at once), answers 401 with a `WWW-Authenticate` header naming the protected-resource metadata
(RFC 9728, as the MCP authorization spec asks), 403 for a token whose roles allow no MCP use, and 429 when a
principal exceeds JCT_RATE_LIMIT_PER_MINUTE. A request it lets through carries the SDK's `AuthenticatedUser`
in `scope["user"]` and in the SDK's auth context variable: the SDK binds each HTTP session to the principal
that opened it, and `TokenIdentity` (server/identity.py) reads the principal of each tool call from there.
/healthz, /readyz and the metadata stay open.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Awaitable, Callable

from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend
from mcp.server.auth.provider import AccessToken
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from server.core import tokens
from server.core.service import Core
from server.identity import access_token

log = logging.getLogger("jct.auth")

METADATA_PATH = "/.well-known/oauth-protected-resource"
# Each protected path prefix, and the resource (RFC 9728) whose metadata a 401 on it points to.
PROTECTED: tuple[tuple[str, str], ...] = (("/mcp", "/mcp"), ("/sse", "/sse"), ("/messages", "/sse"))
RESOURCE_NAME = "JCT work queue"
MAX_BUCKETS = 100_000


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

    def _store(self, key: str, level: float, now: float) -> None:
        if key not in self.buckets and len(self.buckets) >= MAX_BUCKETS:
            self.buckets.clear()  # only reachable with absurd numbers of tokens; forgetting refills buckets
        self.buckets[key] = (level, now)


def _resource_of(path: str) -> str | None:
    for prefix, resource in PROTECTED:
        if path == prefix or path.startswith(prefix + "/"):
            return resource
    return None


def _base_url(conn: HTTPConnection) -> str:
    return str(conn.base_url).rstrip("/")


def metadata_url(conn: HTTPConnection, resource: str) -> str:
    """Where RFC 9728 section 3.1 puts the metadata of `{base}{resource}`."""
    return f"{_base_url(conn)}{METADATA_PATH}{resource}"


def _error(status: int, error: str, description: str, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"error": error, "error_description": description}, status_code=status, headers=headers)


class FrontDoor:
    """ASGI middleware in front of the whole app: authenticate, authorize and rate-limit the MCP endpoints."""

    def __init__(self, app: ASGIApp, core: Core, rate_limit_per_minute: int) -> None:
        self.app = app
        self.backend = BearerAuthBackend(JctTokenVerifier(core))
        self.with_context = AuthContextMiddleware(app)
        self.limiter = RateLimiter(rate_limit_per_minute)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        resource = _resource_of(scope["path"]) if scope["type"] == "http" else None
        if resource is None:
            await self.app(scope, receive, send)
            return
        conn = HTTPConnection(scope)
        try:
            authenticated = await self.backend.authenticate(conn)
        except Exception:
            log.exception("verifying a bearer token failed")
            response = _error(503, "temporarily_unavailable", "JCT could not verify the token; retry shortly.")
            await response(scope, receive, send)
            return
        if authenticated is None:
            await self._unauthorized(conn, resource)(scope, receive, send)
            return
        credentials, user = authenticated
        if not credentials.scopes:
            response = _error(
                403,
                "insufficient_scope",
                "This token has no role that allows using JCT; ask the operator for one with "
                "--role worker, reviewer or admin.",
                {"WWW-Authenticate": self._challenge(conn, resource, "insufficient_scope", "No usable role")},
            )
            await response(scope, receive, send)
            return
        wait = self.limiter.take(user.access_token.client_id)
        if wait > 0:
            retry_after = max(1, math.ceil(wait))
            log.info("rate limit: %s must wait %ds", user.access_token.client_id, retry_after)
            response = JSONResponse(
                {
                    "error": "rate_limited",
                    "error_description": "Too many requests for this token (JCT_RATE_LIMIT_PER_MINUTE); "
                    f"retry after {retry_after}s.",
                    "retry_after_seconds": retry_after,
                },
                status_code=429,
                headers={"Retry-After": str(retry_after)},
            )
            await response(scope, receive, send)
            return
        scope["user"] = user
        scope["auth"] = credentials
        await self.with_context(scope, receive, send)

    def _unauthorized(self, conn: HTTPConnection, resource: str) -> Response:
        header = conn.headers.get("authorization")
        if header is None or not header.lower().startswith("bearer "):
            description = "Authentication required: send 'Authorization: Bearer jct_...' (see `jct token create`)."
        else:
            description = "The bearer token is not valid: unknown, mistyped or revoked."
        challenge = self._challenge(conn, resource, "invalid_token", description)
        return _error(401, "invalid_token", description, {"WWW-Authenticate": challenge})

    @staticmethod
    def _challenge(conn: HTTPConnection, resource: str, error: str, description: str) -> str:
        quoted = description.replace("\\", "\\\\").replace('"', "'")
        return (
            f'Bearer realm="jct", error="{error}", error_description="{quoted}", '
            f'resource_metadata="{metadata_url(conn, resource)}"'
        )


def metadata_routes() -> list[Route]:
    """RFC 9728 protected-resource metadata for /mcp and /sse (and the server root).

    There is no OAuth authorization server to name: tokens are issued by `jct token create`, so the document
    has no `authorization_servers` (optional in RFC 9728) and clients are configured with the header.
    """

    def handler(resource: str) -> Callable[[Request], Awaitable[Response]]:
        async def metadata(request: Request) -> Response:
            body = {
                "resource": f"{_base_url(request)}{resource}",
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
