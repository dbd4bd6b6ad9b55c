"""What every command shares: settings, one-line failures, and running one piece of work on the database."""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from sqlalchemy.engine import make_url

from server.cli.startup import StartupError, configure_logging, fail, load_settings
from server.config import Settings
from server.core import schema
from server.core.models import Actor, local_user
from server.core.service import Core
from server.errors import JctError

__all__ = ["StartupError", "configure_logging", "fail", "load_settings"]

T = TypeVar("T")

DATABASE_TIMEOUT = 15.0


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def masked(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def open_core(settings: Settings) -> Core:
    try:
        return Core.build(settings)
    except Exception as exc:  # a bad URL or an unwritable JCT_HOME
        raise StartupError(
            f"cannot open the database {masked(settings.database_url)}: {first_line(exc)}; check JCT_DATABASE_URL"
        ) from None


async def prepare_database(core: Core) -> None:
    """Reach the database, then bring its schema to head; say which of the two failed."""
    url = masked(core.settings.database_url)
    try:
        with anyio.fail_after(DATABASE_TIMEOUT):
            await core.ping()
    except TimeoutError:
        raise StartupError(
            f"the database {url} did not answer within {DATABASE_TIMEOUT:.0f}s; check JCT_DATABASE_URL"
        ) from None
    except Exception as exc:
        raise StartupError(f"cannot reach the database {url}: {first_line(exc)}; check JCT_DATABASE_URL") from None
    try:
        await schema.upgrade(core)
    except Exception as exc:
        raise StartupError(f"migrating the database {url} failed: {first_line(exc)}") from None


def run_core(work: Callable[[Core, Actor], Awaitable[T]]) -> T:
    """Open the configured database (migrating it), run one piece of work as the local admin, close it."""
    settings = load_settings()
    actor = Actor(actor_id=settings.agent_id or local_user(), actor_kind="human", name="jct-cli", admin=True)

    async def main() -> T:
        core = open_core(settings)
        try:
            await prepare_database(core)
            return await work(core, actor)
        finally:
            with anyio.CancelScope(shield=True):
                await core.close()

    try:
        return anyio.run(main)
    except StartupError as exc:
        fail(str(exc))
    except JctError as exc:
        fail(f"{exc.code.value}: {exc.message} {exc.suggestion}".strip())
