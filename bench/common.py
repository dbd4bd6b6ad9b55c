"""Pieces the benchmarks share."""

from __future__ import annotations

import argparse
import math
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from server.config import async_database_url

READY_SECONDS = 60.0
DEFAULT_PG = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
DIALECTS = ("sqlite", "postgresql")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_ready(process: subprocess.Popen[bytes], base_url: str) -> None:
    """Poll /readyz until the server answers 200, or fail if it exits first."""
    async with httpx2.AsyncClient(timeout=5.0) as http:
        with anyio.fail_after(READY_SECONDS):
            while process.poll() is None:
                try:
                    if (await http.get(f"{base_url}/readyz")).status_code == 200:
                        return
                except httpx2.TransportError:
                    pass
                await anyio.sleep(0.05)
    raise RuntimeError(f"the server exited with {process.returncode}")


async def tool(client: Client, name: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, args)
    if result.is_error or result.structured_content is None:
        raise RuntimeError(f"{name} failed: {result.content}")
    return dict(result.structured_content)


async def admin(url: str, statement: str) -> None:
    """One statement outside a transaction (CREATE/DROP DATABASE for throwaway benchmark databases)."""
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(statement))
    finally:
        await engine.dispose()


def add_database_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dialects",
        type=lambda s: [d.strip() for d in s.split(",")],
        default=list(DIALECTS),
        help="comma-separated: sqlite, postgresql (default both)",
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("JCT_BENCH_POSTGRES_URL", DEFAULT_PG),
        help="server to create the throwaway database on (env JCT_BENCH_POSTGRES_URL)",
    )


def check_dialects(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    unknown = set(args.dialects) - set(DIALECTS)
    if unknown:
        parser.error(f"unknown dialects: {', '.join(sorted(unknown))}")


# --- servers, databases, processes (the suite's shared plumbing) ---------------------------------

BENCH_DIR = Path(__file__).resolve().parent
# One principal (JCT_AUTH=none) plays every agent, so its claim cap is lifted for 100 concurrent agents, and
# its session cap for the 500 sessions of bench/sessions.py (past the cap its least recently used session,
# the agent's, would be closed). The benchmarks' agents complete without evidence (a partial verdict): each task
# stays completed, as it did before automatic rework, rather than going back to the queue.
SERVER_ENV = {
    "JCT_LOG_LEVEL": "WARNING",
    "JCT_AUTO_REWORK": "false",
    "JCT_MAX_CLAIMS_PER_AGENT": "10000",
    "JCT_MAX_SESSIONS_PER_PRINCIPAL": "100000",
}


def raise_nofile() -> None:
    """Lift this process's soft open-files limit to the hard limit (hundreds of sessions, two sockets each)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))


def start_server(
    database_url: str,
    home: Path,
    port: int,
    *,
    echo: bool = True,
    env: dict[str, str] | None = None,
    profile: Path | None = None,
) -> subprocess.Popen[bytes]:
    """A JCT server in its own process: `create_app` plus `echo` (bench/echo_server.py), or plain `jct serve`.

    Settings come from a clean JCT_* environment; the process's pid is the server's (no wrapper). With
    `profile`, bench/echo_server.py runs under pyinstrument, which writes its flat self-time report there
    when the server stops."""
    home.mkdir(parents=True, exist_ok=True)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JCT_") and k != "DATABASE_URL"}
    clean |= SERVER_ENV | {
        "JCT_DATABASE_URL": database_url,
        "JCT_HOME": str(home),
        "JCT_TRACE_ROOT": str(home / "traces"),
    }
    clean |= env or {}
    if profile is not None:
        pyinstrument = ["-m", "pyinstrument", "-r", "text", "-p", "flat", "-p", "time=percent_of_total"]
        command = [sys.executable, *pyinstrument, "--show-all", "--no-color", "-o", str(profile)]
        command += [str(BENCH_DIR / "echo_server.py"), "--port", str(port)]
    elif echo:
        command = [sys.executable, str(BENCH_DIR / "echo_server.py"), "--port", str(port)]
    else:
        command = [sys.executable, "-m", "server", "serve", "--host", "127.0.0.1", "--port", str(port)]
    log = (home / f"server-{port}.log").open("ab")
    try:
        return subprocess.Popen(
            command, env=clean, cwd=BENCH_DIR.parent, stdout=log, stderr=log, preexec_fn=raise_nofile
        )
    finally:
        log.close()


def stop_server(process: subprocess.Popen[bytes], how: signal.Signals = signal.SIGTERM) -> None:
    """Stop a server (SIGINT for one under pyinstrument: it writes its report only after a KeyboardInterrupt)."""
    if process.poll() is None:
        process.send_signal(how)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@asynccontextmanager
async def servers(
    database_url: str, home: Path, count: int = 1, *, echo: bool = True, profile: Path | None = None
) -> AsyncIterator[list[tuple[subprocess.Popen[bytes], str]]]:
    """`count` servers on one database, started one after another (each migrates on start), as (process, base URL)."""
    started: list[tuple[subprocess.Popen[bytes], str]] = []
    try:
        for _ in range(count):
            port = free_port()
            process = start_server(database_url, home, port, echo=echo, profile=profile)
            started.append((process, f"http://127.0.0.1:{port}"))
            await wait_ready(process, started[-1][1])
        yield started
    finally:
        for process, _ in started:
            stop_server(process, signal.SIGINT if profile is not None else signal.SIGTERM)


@asynccontextmanager
async def fresh_database(dialect: str, home: Path, postgres_url: str) -> AsyncIterator[str]:
    """A new empty database for one workload: a SQLite file under `home`, or a PostgreSQL database created on
    `postgres_url`'s server and dropped (WITH FORCE) afterwards. Yields its async SQLAlchemy URL."""
    if dialect == "sqlite":
        home.mkdir(parents=True, exist_ok=True)
        yield f"sqlite+aiosqlite:///{home / f'bench-{uuid.uuid4().hex[:8]}.db'}"
        return
    base = make_url(async_database_url(postgres_url))
    name = f"jct_bench_{uuid.uuid4().hex[:10]}"
    admin_url = base.render_as_string(hide_password=False)
    await admin(admin_url, f"CREATE DATABASE {name}")
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        await admin(admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def rss_kib(pid: int) -> int:
    """A process's resident set (VmRSS) in KiB, from /proc/<pid>/status."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc/<pid>/stat (clock-tick resolution)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def quantile(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank) of values; NaN when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


async def scalar(url: str, statement: str) -> Any:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            return (await conn.execute(text(statement))).scalar()
    finally:
        await engine.dispose()


QUEUED_INSERT = (
    "INSERT INTO tasks (id, operation, objective, target_repo, target_ref, target_path, priority, "
    "time_budget_seconds, status, attempts, max_attempts, trace_id, requested_by, queued_at) VALUES "
    "(:id, :operation, :objective, :target_repo, 'main', 'src', :priority, 3600, 'queued', 0, 3, :trace_id, "
    "'bench', :queued_at)"
)


async def bulk_load(database_url: str, count: int, *, migrate: bool = True) -> float:
    """Migrate the database (bench/scale.py's `load` with no tasks) and add `count` queued tasks: mixed
    priorities, increasing ages, no issue (as `jct_enqueue_task` makes them without one). Seconds taken.

    scale.load spreads its n tasks over queued, running and finished ones, so the queue a contention run
    drains is inserted here, in one multi-row executemany; the count triggers keep jct_queue_stats right."""
    import scale

    started = time.perf_counter()
    if migrate:  # a fresh database: migrated (and three issues added) by scale.load
        await scale.load(database_url, 0)
    rng = random.Random(count)
    start = datetime.now(UTC) - timedelta(days=1)
    sqlite = database_url.startswith("sqlite")
    rows = [
        {
            "id": str(uuid.uuid4()),
            "operation": "analysis",
            "objective": f"Bench task {n}: add input validation to the signup endpoint",
            "target_repo": "bench/repo",
            "priority": f"P{rng.randrange(5)}",
            "trace_id": str(uuid.uuid4()),
            "queued_at": (start + timedelta(milliseconds=n)).replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S.%f")
            if sqlite
            else start + timedelta(milliseconds=n),
        }
        for n in range(count)
    ]
    engine = create_async_engine(async_database_url(database_url))
    try:
        async with engine.begin() as conn:
            if rows:
                await conn.execute(text(QUEUED_INSERT), rows)
            await conn.execute(text("ANALYZE"))
    finally:
        await engine.dispose()
    return time.perf_counter() - started
