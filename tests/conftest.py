"""One database fixture for every test: SQLite always, PostgreSQL when JCT_TEST_POSTGRES_URL is set.

PostgreSQL tests never skip once the variable is set: an unreachable server fails them.
Each test gets its own database, copied from a template migrated once per worker: a file copy on SQLite,
`CREATE DATABASE ... TEMPLATE` on PostgreSQL. Tests of migration itself migrate their own databases.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from server.config import Settings, async_database_url
from server.core.service import Core
from server.db.engine import Database
from server.db.migrate import upgrade

POSTGRES_URL = os.environ.get("JCT_TEST_POSTGRES_URL", "")
DIALECTS = ["sqlite", "postgresql"] if POSTGRES_URL else ["sqlite"]


def _long_first(item: pytest.Item) -> int:
    """0 for the tests that take longest (marked `slow`, or run as one xdist group), 1 for the rest."""
    return 0 if item.get_closest_marker("slow") or item.get_closest_marker("xdist_group") else 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Long tests first (a stable sort: the same order on every worker), so `-n 4` does not end on one of them
    while the other worker idles.

    `@pytest.mark.dialects("postgresql")`: a test that only exists on some databases. Its cases for the other
    dialects are deselected, not skipped: like every PostgreSQL case, it is simply not there when
    JCT_TEST_POSTGRES_URL is unset (`DIALECTS`)."""
    kept, dropped = [], []
    for item in items:
        marker = item.get_closest_marker("dialects")
        callspec = getattr(item, "callspec", None)
        if marker is not None and callspec is not None and callspec.params.get("dialect") not in marker.args:
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = sorted(kept, key=_long_first)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


SIGNALS = (signal.SIGTERM, signal.SIGINT)


@pytest.fixture(autouse=True)
def _signals_left_as_found() -> Iterator[None]:
    """A test leaves the process's signal handlers as it found them. A uvicorn server that captured SIGTERM
    and handed it back out of order (several running at once) leaves it bound to a stopped server, and
    sse-starlette then ends every event stream of every later server in the process."""
    before = {number: signal.getsignal(number) for number in SIGNALS}
    yield
    changed = [signal.Signals(number).name for number in SIGNALS if signal.getsignal(number) != before[number]]
    for number, handler in before.items():
        signal.signal(number, handler)
    assert not changed, f"the test left {changed} with another handler (start uvicorn with capture_signals off)"


def _admin_url() -> str:
    return async_database_url(POSTGRES_URL)


async def _admin_execute(*statements: str) -> None:
    engine = create_async_engine(_admin_url(), isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            for statement in statements:
                await conn.execute(text(statement))
    finally:
        await engine.dispose()


_templates: dict[str, str] = {}


async def _template(worker: str) -> str:
    """A migrated template database for this test worker, made once."""
    if worker not in _templates:
        # Unique per process: concurrent test runs on one server must not share (or drop) a template.
        name = f"jct_tpl_{worker}_{os.getpid()}"
        await _admin_execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", f"CREATE DATABASE {name}")
        db = Database(str(make_url(_admin_url()).set(database=name)))
        try:
            await upgrade(db)
        finally:
            await db.dispose()
        _templates[worker] = name
    return _templates[worker]


async def postgres_database(worker: str) -> str:
    template = await _template(worker)
    name = f"jct_t_{uuid.uuid4().hex[:12]}"
    # FILE_COPY copies the template's files; the default (WAL_LOG) writes every block of it through the WAL,
    # three times the server's CPU (228 ms against 69 here) for a database the test drops when it ends.
    await _admin_execute(f"CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY")
    return str(make_url(_admin_url()).set(database=name))


async def drop_postgres_database(url: str) -> None:
    name = make_url(url).database
    await _admin_execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="session", autouse=True)
def _drop_templates() -> Iterator[None]:
    yield
    for name in _templates.values():
        asyncio.run(_admin_execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


_sqlite_template: list[Path] = []


async def sqlite_template(directory: Path) -> Path:
    """A migrated SQLite file for this test process, made once: a test's database is a copy of it.

    Checkpointed and closed before it is copied, so the one file holds the whole schema (no -wal, no -shm)."""
    if not _sqlite_template:
        path = directory / "template.db"
        db = Database(f"sqlite+aiosqlite:///{path}")
        try:
            await upgrade(db)
        finally:
            await db.dispose()
        conn = sqlite3.connect(path)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
        leftovers = [side for side in ("-wal", "-shm") if Path(f"{path}{side}").exists()]
        assert not leftovers, f"the SQLite template kept {leftovers} after its last connection closed"
        _sqlite_template.append(path)
    return _sqlite_template[0]


@pytest.fixture(params=DIALECTS)
def dialect(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def worker_id_str(request: pytest.FixtureRequest) -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


@pytest.fixture
async def database_url(
    dialect: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, worker_id_str: str
) -> AsyncIterator[str]:
    """A migrated, empty database of the requested dialect."""
    if dialect == "sqlite":
        template = await sqlite_template(tmp_path_factory.getbasetemp())
        shutil.copyfile(template, tmp_path / "jct.db")
        yield f"sqlite+aiosqlite:///{tmp_path / 'jct.db'}"
        return
    url = await postgres_database(worker_id_str)
    try:
        yield url
    finally:
        await drop_postgres_database(url)


@pytest.fixture
def make_settings(database_url: str, tmp_path: Path) -> Callable[..., Settings]:
    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "database_url": database_url,
            "home": tmp_path / "home",
            "trace_root": tmp_path / "traces",
        }
        values.update(overrides)
        return Settings(_env_file=None, **values)

    return make


@pytest.fixture
async def core(make_settings: Callable[..., Settings]) -> AsyncIterator[Core]:
    built = Core.build(make_settings())
    try:
        yield built
    finally:
        await built.db.dispose()
