"""One database fixture for every test: SQLite always, PostgreSQL when JCT_TEST_POSTGRES_URL is set.

PostgreSQL tests never skip once the variable is set: an unreachable server fails them.
Each test gets an empty migrated database: on SQLite a file copy of a template migrated once per worker; on
PostgreSQL a `CREATE DATABASE ... TEMPLATE` copy of such a template, emptied when the test ends and handed to the
worker's next test (`_give_back`). Tests of migration itself migrate their own databases.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
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
        _shapes[worker] = await _database_shape(str(make_url(_admin_url()).set(database=name)))
        _templates[worker] = name
    return _templates[worker]


async def postgres_database(worker: str) -> str:
    template = await _template(worker)
    name = f"jct_t_{uuid.uuid4().hex[:12]}"
    # FILE_COPY copies the template's files (its backend's CPU is a third of WAL_LOG's, which writes every block
    # through the WAL), but it makes the checkpointer flush: counted machine-wide, a copy and its drop cost about
    # the same either way (115-160 ms against 94-145 here). A copy is made once per worker, and again only after
    # a test changed its schema (`_give_back`).
    await _admin_execute(f"CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY")
    return str(make_url(_admin_url()).set(database=name))


async def drop_postgres_database(url: str) -> None:
    name = make_url(url).database
    await _admin_execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# A PostgreSQL database a test ended with, renamed and emptied for the worker's next test. Emptying it costs the
# server about 9 ms of CPU; a new copy of the template and its DROP cost about 130 (create 30-110, drop 20; more
# as the WAL grows), which was a quarter of the whole suite's CPU. The new name comes first: whatever still knows
# the old one (a server the test did not stop, an agent's connection) can no longer reach it, as after a DROP.
# It is kept only when emptying gives back what a new copy would be (`_SHAPE`: the same tables, columns and their
# defaults, constraints, indexes, triggers, functions, sequences, schemas and database settings, at the same
# migration) and it accepts connections; otherwise (a downgrade, a renamed table) it is dropped. Should the
# server refuse any of it (a role that is not a superuser may not skip triggers), every database is dropped, as
# before: slower, never wrong.
_reusable: dict[str, str] = {}
_shapes: dict[str, _Shape] = {}

# Everything a test could change that deleting rows would not restore, as one digest.
_SHAPE = """
SELECT md5(string_agg(item, ',' ORDER BY item)) FROM (
    SELECT concat_ws(':', 'column', c.relname, c.relkind, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),
        a.attnotnull, pg_get_expr(d.adbin, d.adrelid)) AS item
    FROM pg_class c
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
    WHERE c.relnamespace = 'public'::regnamespace
    UNION ALL SELECT concat_ws(':', 'relation', relname, relkind) FROM pg_class
        WHERE relnamespace = 'public'::regnamespace
    UNION ALL SELECT concat_ws(':', 'index', indexdef) FROM pg_indexes WHERE schemaname = 'public'
    UNION ALL SELECT concat_ws(':', 'constraint', conrelid::regclass, conname, pg_get_constraintdef(oid))
        FROM pg_constraint WHERE connamespace = 'public'::regnamespace
    UNION ALL SELECT concat_ws(':', 'trigger', pg_get_triggerdef(oid), tgenabled) FROM pg_trigger
        WHERE NOT tgisinternal
    UNION ALL SELECT concat_ws(':', 'function', proname, md5(prosrc)) FROM pg_proc
        WHERE pronamespace = 'public'::regnamespace
    UNION ALL SELECT concat_ws(':', 'sequence', sequencename, start_value, increment_by, min_value, max_value, cycle)
        FROM pg_sequences WHERE schemaname = 'public'
    UNION ALL SELECT concat_ws(':', 'schema', nspname) FROM pg_namespace
        WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema'
    UNION ALL SELECT concat_ws(':', 'setting', array_to_string(setconfig, ',')) FROM pg_db_role_setting
        WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
    UNION ALL SELECT concat_ws(':', 'version', version_num) FROM alembic_version
) AS shape
"""


@dataclass(frozen=True)
class _Shape:
    """A template's shape digest, and the tables and sequences it has (so has every database of its digest)."""

    digest: str
    tables: Sequence[str]
    sequences: Sequence[str]


async def _database_shape(url: str) -> _Shape:
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            digest = str((await conn.execute(text(_SHAPE))).scalar_one())
            tables = (await conn.execute(text(_TABLES))).scalars().all()
            return _Shape(digest, tables, (await conn.execute(text(_SEQUENCES))).scalars().all())
    finally:
        await engine.dispose()


async def _checked_out(worker: str) -> str:
    """An empty migrated database for a test of this worker: the one its last test gave back, else a new copy."""
    return _reusable.pop(worker, None) or await postgres_database(worker)


async def _give_back(worker: str, url: str) -> None:
    """Rename the test's database and empty it for the worker's next test, or drop it when it is not as a new
    copy would be."""
    old, new = make_url(url).database, f"jct_t_{uuid.uuid4().hex[:12]}"
    ended = f"SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = '{old}'"
    try:
        await _admin_execute(ended, f"ALTER DATABASE {old} RENAME TO {new}")
    except DBAPIError:  # gone, or a session came back between the two
        await drop_postgres_database(url)
        return
    renamed = str(make_url(url).set(database=new))
    try:
        emptied = await _emptied(renamed, _shapes[worker])
    except DBAPIError:  # refusing connections, or refusing to skip triggers
        emptied = False
    if emptied and worker not in _reusable:  # one kept per worker: a second would never be dropped
        _reusable[worker] = renamed
    else:
        await drop_postgres_database(renamed)


async def _emptied(url: str, shape: _Shape) -> bool:
    """If the database's shape is the template's, its rows go and its sequences start again."""
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            if (await conn.execute(text(_SHAPE))).scalar_one() != shape.digest:
                return False
            # The rows go without their triggers: no foreign key to follow, no count delta to write.
            await conn.execute(text("SET LOCAL session_replication_role = replica"))
            for table in shape.tables:
                await conn.execute(text(f'DELETE FROM "{table}"'))
            for sequence in shape.sequences:
                await conn.execute(text(f'ALTER SEQUENCE "{sequence}" RESTART'))
            return True
    finally:
        await engine.dispose()


_TABLES = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'alembic_version'"
_SEQUENCES = "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'"


@pytest.fixture(scope="session", autouse=True)
def _drop_templates() -> Iterator[None]:
    yield
    for name in [*_templates.values(), *(make_url(url).database for url in _reusable.values())]:
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
    url = await _checked_out(worker_id_str)
    try:
        yield url
    finally:
        await _give_back(worker_id_str, url)


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
