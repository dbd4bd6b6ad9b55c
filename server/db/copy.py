"""`jct db copy`: move every JCT table from one database into an empty one, ids and all.

The main use is SQLite -> PostgreSQL when a team outgrows the embedded default; any pair of
dialects works. Rows are read and written through SQLAlchemy Core with the tables' own types,
so datetimes, JSON and booleans convert between dialects. The whole copy is one transaction on
the target: it either arrives complete or not at all, and a failed copy can simply be re-run.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

import anyio
from sqlalchemy import JSON, BindParameter, Column, Table, bindparam, func, insert, select, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection

from server.db.engine import Database
from server.db.migrate import current_revision, head_revision, upgrade
from server.db.tables import metadata

BATCH_SIZE = 5000
# Bound as SQL NULL for None, JSON 'null' for JSON.NULL: the source's two kinds of "nothing" stay apart.
_JSON_KEEPING_NULLS = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")


class CopyError(Exception):
    """A copy that cannot or must not go ahead; the message is one line saying what to do."""


@dataclass
class TraceMove:
    """Where stored artifact content goes when the target will be served with another JCT_TRACE_ROOT."""

    root: Path
    files_copied: int = 0
    files_missing: list[str] = field(default_factory=list)


@dataclass
class CopyReport:
    rows: dict[str, int] = field(default_factory=dict)
    derived: list[str] = field(default_factory=list)
    sequences: dict[str, int] = field(default_factory=dict)
    # The trace roots the copied artifact URIs point into (after any --trace-root move).
    trace_roots: set[Path] = field(default_factory=set)
    stored_artifacts: int = 0
    trace_move: TraceMove | None = None


def copied_tables() -> list[Table]:
    """Every JCT table in foreign-key order, less the derived ones (triggers fill those from the copied rows)."""
    return [table for table in metadata.sorted_tables if not table.info.get("derived")]


async def copy_database(
    source_url: str,
    target_url: str,
    *,
    trace_root: Path | None = None,
    batch_size: int = BATCH_SIZE,
    on_table: Callable[[str, int], None] | None = None,
) -> CopyReport:
    """Copy every row of `source_url` into the empty JCT database at `target_url` (migrated to head first)."""
    if _same_database(source_url, target_url):
        raise CopyError("the source and the target are the same database; pass --to a different one")
    _check_source_exists(source_url)
    source = Database(source_url, pool_size=1, max_overflow=0)
    target = Database(target_url, pool_size=1, max_overflow=0)
    try:
        await _prepare(source, "source", require_schema=True)
        await _prepare(target, "target", require_schema=False)
        report = CopyReport(trace_move=_trace_move(trace_root))
        try:
            async with _snapshot(source) as src, target.write() as dst:
                await _refuse_non_empty(dst, target)
                for table in metadata.sorted_tables:
                    if table.info.get("derived"):
                        report.derived.append(table.name)
                        continue
                    try:
                        report.rows[table.name] = await _copy_table(src, dst, table, batch_size, report)
                    except CopyError:
                        raise
                    except Exception as exc:
                        raise CopyError(f"copying table {table.name} failed: {_first_line(exc)}") from exc
                    if on_table is not None:
                        on_table(table.name, report.rows[table.name])
                if not target.is_sqlite:
                    # SQLite picks max(rowid)+1 by itself; PostgreSQL sequences know nothing of the copied ids.
                    report.sequences = await _reset_sequences(dst)
        except CopyError as exc:
            raise CopyError(f"{exc}; the target was left as it was") from exc
        except Exception as exc:
            raise CopyError(f"the copy failed, the target was left as it was: {_first_line(exc)}") from exc
        return report
    finally:
        with anyio.CancelScope(shield=True):
            await source.dispose()
            await target.dispose()


# --- preparing both ends ------------------------------------------------------------------------


def _same_database(a: str, b: str) -> bool:
    first, second = make_url(a), make_url(b)
    if first.get_backend_name() == second.get_backend_name() == "sqlite":
        return Path(first.database or "").resolve() == Path(second.database or "").resolve()
    return first.render_as_string(hide_password=False) == second.render_as_string(hide_password=False)


def _check_source_exists(url: str) -> None:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and not Path(parsed.database or "").is_file():
        where = Path(parsed.database or "").absolute()
        raise CopyError(f"there is no SQLite database at {where}; set JCT_DATABASE_URL or pass --from")


async def _prepare(db: Database, role: str, *, require_schema: bool) -> None:
    where = make_url(db.url).render_as_string(hide_password=True)
    hint = "check --from or JCT_DATABASE_URL" if role == "source" else "check --to"
    try:
        revision = await current_revision(db)
    except Exception as exc:
        raise CopyError(f"cannot reach the {role} database {where}: {_first_line(exc)}; {hint}") from None
    if require_schema and revision is None:
        raise CopyError(f"the {role} database {where} has no JCT schema; is it the right database?")
    try:
        # Every jct command migrates its database; the copy needs both ends at the schema it knows.
        await upgrade(db)
    except Exception as exc:
        raise CopyError(
            f"migrating the {role} database {where} to {head_revision()} failed: {_first_line(exc)}"
        ) from None


def _snapshot(db: Database) -> AbstractAsyncContextManager[AsyncConnection]:
    """One read transaction over the whole source, so every table is read as of the same moment."""
    if db.is_sqlite:
        return db.read()  # a deferred BEGIN in WAL mode: a snapshot from the first read on
    return db.engine.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True).begin()


async def _refuse_non_empty(conn: AsyncConnection, target: Database) -> None:
    tables = copied_tables()
    if not target.is_sqlite:
        # Keep a running server's writes out until the copy commits (reads may go on).
        names = ", ".join(conn.dialect.identifier_preparer.quote(t.name) for t in tables)
        await conn.execute(text(f"LOCK TABLE {names} IN EXCLUSIVE MODE"))
    # Derived tables are left out: they only ever hold what triggers made of the copied tables' rows.
    for table in tables:
        if (await conn.execute(select(func.count()).select_from(table))).scalar_one():
            where = make_url(target.url).render_as_string(hide_password=True)
            raise CopyError(
                f"the target database {where} is not empty (table {table.name} has rows); "
                "copy into a new, empty database"
            )


# --- copying ------------------------------------------------------------------------------------


def _is_json(column: Column[Any]) -> bool:
    return isinstance(column.type, JSON)


async def _copy_table(
    src: AsyncConnection, dst: AsyncConnection, table: Table, batch_size: int, report: CopyReport
) -> int:
    columns = list(table.columns)
    json_columns = [c for c in columns if _is_json(c)]
    # JSON null and SQL NULL both read back as None; ask the source which one each value is.
    null_flags = [c.is_(None).label(f"_jct_null_{i}") for i, c in enumerate(json_columns)]
    query = select(*columns, *null_flags).order_by(*table.primary_key.columns)
    values: dict[str, BindParameter[Any]] = {
        c.key: bindparam(c.key, type_=_JSON_KEEPING_NULLS if _is_json(c) else c.type) for c in columns
    }
    statement = insert(table).values(values)
    copied = 0
    result = await src.stream(query)
    async for batch in result.partitions(batch_size):
        rows = []
        for row in batch:
            record = {c.key: row[i] for i, c in enumerate(columns)}
            for i, c in enumerate(json_columns):
                if record[c.key] is None and not row[len(columns) + i]:
                    record[c.key] = JSON.NULL
            rows.append(record)
        await _place_artifacts(table.name, rows, report)
        await dst.execute(statement, rows)
        copied += len(rows)
    return copied


async def _reset_sequences(conn: AsyncConnection) -> dict[str, int]:
    """setval every integer autoincrement key's sequence past the largest copied id."""
    reset: dict[str, int] = {}
    for table in copied_tables():
        column = table.autoincrement_column
        if column is None:
            continue
        next_id = (await conn.execute(select(func.coalesce(func.max(column), 0) + 1))).scalar_one()
        sequence = func.pg_get_serial_sequence(table.name, column.name)
        # is_called=false: the next nextval() returns next_id itself (also right for an empty table).
        done = (await conn.execute(select(func.setval(sequence, next_id, False)))).scalar_one()
        if done is not None:
            reset[table.name] = int(next_id)
    return reset


# --- artifact content -------------------------------------------------------------------------


def _trace_move(root: Path | None) -> TraceMove | None:
    return None if root is None else TraceMove(root.resolve())


def _path_of(uri: str) -> Path | None:
    parsed = urlparse(uri)
    return Path(url2pathname(parsed.path)) if parsed.scheme == "file" else None


async def _place_artifacts(table: str, rows: list[dict[str, Any]], report: CopyReport) -> None:
    """Stored content lives in files under the trace root, named by absolute file URIs in the rows."""
    move = report.trace_move
    if table == "runs" and move is not None:
        for row in rows:
            row["artifact_root_uri"] = (move.root / "runs" / row["id"]).as_uri()
    if table != "artifacts":
        return
    for row in rows:
        if not row["stored"]:
            continue
        report.stored_artifacts += 1
        path = _path_of(row["uri"])
        # The trace store's layout: <root>/runs/<run_id>/artifacts/<file>.
        if path is None or path.parent.name != "artifacts" or path.parents[1].name != row["run_id"]:
            raise CopyError(f"artifact {row['id']} is marked stored but its URI {row['uri']!r} is not in a trace store")
        if move is None:
            report.trace_roots.add(path.parents[3])
            continue
        destination = move.root / "runs" / row["run_id"] / "artifacts" / path.name
        if await anyio.to_thread.run_sync(_copy_file, path, destination, row["sha256"]):
            move.files_copied += 1
        else:
            move.files_missing.append(str(path))
        row["uri"] = destination.as_uri()
        report.trace_roots.add(move.root)


def _copy_file(source: Path, destination: Path, sha256: str | None) -> bool:
    """Copy one content file (False if the source file is gone); never overwrite different content."""
    if source.resolve() == destination.resolve():
        return source.is_file()
    if not source.is_file():
        return False
    if destination.exists():
        if destination.read_bytes() != source.read_bytes():
            raise CopyError(f"{destination} already exists with other content; pass an empty --trace-root")
        return True
    if sha256 is not None and hashlib.sha256(source.read_bytes()).hexdigest() != sha256:
        raise CopyError(f"{source} does not match the sha256 recorded for it; the trace store was changed")
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, destination)
    return True


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
