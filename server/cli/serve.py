"""`jct serve`: MCP over HTTP (uvicorn on a socket bound first) or over stdio; SIGTERM drains (server/shutdown.py)."""

from __future__ import annotations

import errno
import logging
import socket

import anyio
import typer

from server.cli.common import (
    StartupError,
    configure_logging,
    fail,
    is_loopback,
    load_settings,
    open_core,
    prepare_database,
)
from server.cli.stdio import serve_stdio
from server.config import Settings
from server.core import tokens

log = logging.getLogger("jct")


def serve(
    host: str | None = typer.Option(None, help="Interface to bind (default JCT_HOST, 127.0.0.1)."),
    port: int | None = typer.Option(None, help="Port to listen on (default JCT_PORT, 8765)."),
    stdio: bool = typer.Option(False, "--stdio", help="Serve one local MCP client over stdin/stdout instead."),
) -> None:
    """Serve JCT: MCP over HTTP (streamable HTTP at /mcp, SSE at /sse), or over stdio."""
    settings = load_settings(host=host, port=port)
    configure_logging(settings)
    try:
        if stdio:
            anyio.run(serve_stdio, settings)
        else:
            _serve_http(settings)
    except StartupError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind before uvicorn starts, so a busy port is one clear line, and hand uvicorn the bound socket."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise StartupError(f"cannot resolve host {host!r}: {exc.strerror}; pass --host or set JCT_HOST") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(f"port {port} on {host} is already in use; pass --port or set JCT_PORT") from None
        if exc.errno == errno.EACCES:
            raise StartupError(f"no permission to bind port {port} on {host}; use a port above 1023") from None
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror}; pass --host/--port") from None
    sock.set_inheritable(True)
    return sock


def _serve_http(settings: Settings) -> None:
    import uvicorn

    from server.app import create_app
    from server.connections import ACCEPT_BATCH, connection_cap, guarded_protocol, quiet_floods
    from server.shutdown import draining_server

    if settings.auth == "none" and not is_loopback(settings.host):
        raise StartupError(
            f"JCT_AUTH=none serves anyone who can reach {settings.host}; bind a loopback address "
            "(--host 127.0.0.1) or set JCT_AUTH=token"
        )
    sock = bind_socket(settings.host, settings.port)
    try:
        anyio.run(_check_database, settings)
        config = uvicorn.Config(
            create_app(settings),
            host=settings.host,
            port=settings.port,
            log_config=None,
            log_level=settings.log_level.lower(),
            access_log=settings.log_level == "DEBUG",
            lifespan="on",
            # A connection's headers are due within the header timeout, connections are capped below the
            # open-file limit (server/connections.py); an idle keep-alive connection closes after 5s.
            http=guarded_protocol(settings.header_timeout_seconds, connection_cap(settings.max_connections)),
            timeout_keep_alive=5,
            backlog=ACCEPT_BATCH,
        )
        quiet_floods()
        server = draining_server(config, settings.shutdown_grace_seconds)
        log.info("JCT %s listening on http://%s:%d (MCP at /mcp and /sse)", _version(), settings.host, settings.port)
        server.run(sockets=[sock])
    finally:
        sock.close()
    if not server.started:
        raise StartupError("the server did not start; see the log above")


async def _check_database(settings: Settings) -> None:
    core = open_core(settings)
    try:
        await prepare_database(core)
        if settings.auth == "token" and not any(t.revoked_at is None for t in await tokens.list_tokens(core)):
            log.warning("JCT_AUTH=token and no live token exists: create one with `jct token create NAME --role ...`")
    finally:
        await core.close()


def _version() -> str:
    from importlib.metadata import version

    return version("jct")
