"""Change notifications fanned out to many subscribers: latency after a completion, and server memory per session.

One `jct serve` (a subprocess) and `--sessions` legacy streamable HTTP sessions (the 2025-11-25
`initialize` handshake, as Claude Code speaks), all in this process as asyncio tasks, each with its own
`mcp.Client`, each subscribed with `resources/subscribe` to the same run's URI `jct://runs/{id}`.
Another session (the agent) claimed that run; it completes it, and the benchmark records when each
subscriber's `notifications/resources/updated` for the URI arrives:

  latency   from the moment the agent's `jct_complete_task` call returns until a session has its
            notification (p50 and p99 over sessions, and the max: the time until every session has it).
            The server's change feed polls the audit log every JCT_NOTIFY_INTERVAL_SECONDS (0.25 s by
            default), so up to one interval of that is waiting for the next poll.
  memory    the server's VmRSS (/proc/<pid>/status) with only the agent connected, and again once every
            session is open, subscribed and has received one notification; the difference / sessions.

Before the measured completion, a progress report on the run sends every session one notification: it
proves each session's GET stream is open (a notification sent before it opens is dropped by the
transport), and warms both sides. For each dialect: SQLite in a temp directory, and PostgreSQL in a
throwaway database `jct_bench_<random>` created on JCT_BENCH_POSTGRES_URL's server and dropped after.

    python bench/notify.py                          # 200 sessions, SQLite and PostgreSQL, one completion each
    python bench/notify.py --sessions 50 --rounds 3 --dialects sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp_types import ResourceUpdatedNotification
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import add_database_arguments, admin, check_dialects, cpu_seconds, free_port, rss_kib, tool, wait_ready

from server.config import async_database_url
from server.core.models import parse_run_id

OPENING = 20  # sessions opening (initialize, GET stream, subscribe) at once
NOTIFIED = 60.0  # the longest wait for every session's notification
QUIET = 1.0  # after the warm-up notifications, before the measured completion (plus up to one poll interval)
POLL_INTERVAL = 0.25  # the server's JCT_NOTIFY_INTERVAL_SECONDS (its default; the benchmark does not change it)


# --- the server ----------------------------------------------------------------------------------


def start_server(database_url: str, home: Path, port: int) -> subprocess.Popen[bytes]:
    """`jct serve` (as `python -m server serve`, so the pid is the server's) with a clean JCT_* environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JCT_") and k != "DATABASE_URL"}
    env |= {
        "JCT_DATABASE_URL": database_url,
        "JCT_HOME": str(home),
        "JCT_TRACE_ROOT": str(home / "traces"),
        "JCT_LOG_LEVEL": "WARNING",
        "JCT_AUTO_REWORK": "false",  # a partial completion stays completed (no briefing version written)
    }
    log = (home / f"server-{port}.log").open("wb")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "server", "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            cwd=home,
            stdout=log,
            stderr=log,
        )
    finally:
        log.close()


def stop_server(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# --- the sessions --------------------------------------------------------------------------------


@dataclass
class Subscriber:
    """One session's record of the notifications for the URI it watches."""

    uri: str = ""
    arrivals: list[float] = field(default_factory=list)
    changed: anyio.Event = field(default_factory=anyio.Event)

    async def __call__(self, message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification) and message.params.uri == self.uri:
            self.arrivals.append(time.perf_counter())
            self.changed.set()
            self.changed = anyio.Event()

    def first_after(self, moment: float) -> float | None:
        return next((at for at in self.arrivals if at >= moment), None)


async def claimed_run(agent: Client, n: int) -> tuple[str, str]:
    enqueued = await tool(
        agent,
        "jct_enqueue_task",
        {"objective": f"Notify bench task {n}", "operation": "analysis", "target_repo": "bench/repo"},
    )
    claim = await tool(agent, "jct_claim_task", {"task_id": enqueued["task_id"]})
    return str(enqueued["task_id"]), parse_run_id(claim["run_id"])[0]  # the run, without the claim's key


async def all_notified(subscribers: list[Subscriber], since: float, timeout: float) -> bool:
    """Wait until every subscriber has a notification at or after `since`; False on timeout."""
    with anyio.move_on_after(timeout):
        for subscriber in subscribers:
            while subscriber.first_after(since) is None:
                await subscriber.changed.wait()
        return True
    return False


@dataclass
class Round:
    latencies: list[float]  # seconds, one per session, from the completion call's return
    missing: int
    server_cpu: float  # seconds the server process spent from just before the completion until all arrived
    client_cpu: float  # the same for this process (all the sessions and the agent)


async def measure(base_url: str, pid: int, sessions: int, rounds: int) -> tuple[list[Round], int, int, float]:
    """Returns the rounds, RSS before and after opening the sessions (KiB), and how long opening took."""
    url = f"{base_url}/mcp"
    subscribers = [Subscriber() for _ in range(sessions)]
    clients: list[Client | None] = [None] * sessions
    opened, close = anyio.Event(), anyio.Event()
    gate = anyio.Semaphore(OPENING)
    count = 0

    async def session(index: int) -> None:
        nonlocal count
        await gate.acquire()  # released once open: only the opening is limited
        waiting = True
        try:
            async with Client(url, mode="legacy", message_handler=subscribers[index]) as client:
                gate.release()
                waiting = False
                clients[index] = client
                count += 1
                if count == sessions:
                    opened.set()
                await close.wait()
        finally:
            if waiting:
                gate.release()

    async def subscribe_all(uri: str, previous: str | None) -> None:
        async def one(index: int) -> None:
            client = clients[index]
            assert client is not None
            async with gate:
                if previous is not None:
                    await client.unsubscribe_resource(previous)
                subscribers[index].uri = uri
                await client.subscribe_resource(uri)

        async with anyio.create_task_group() as tg:
            for index in range(sessions):
                tg.start_soon(one, index)

    results: list[Round] = []
    phase = random.Random(sessions)
    async with Client(url, mode="legacy") as agent, anyio.create_task_group() as tg:
        await tool(agent, "jct_queue_stats", {})
        rss_before = rss_kib(pid)
        started = time.perf_counter()
        for index in range(sessions):
            tg.start_soon(session, index)
        with anyio.fail_after(300):
            await opened.wait()
        open_seconds = time.perf_counter() - started
        rss_after = 0
        uri: str | None = None
        for n in range(rounds):
            task_id, run_id = await claimed_run(agent, n)
            previous, uri = uri, f"jct://runs/{run_id}"
            await subscribe_all(uri, previous)
            # Warm-up: one notification to every session proves its GET stream is open.
            for attempt in range(5):
                since = time.perf_counter()
                await tool(agent, "jct_report_progress", {"task_id": task_id, "message": f"warm-up {attempt}"})
                if await all_notified(subscribers, since, 10.0):
                    break
            else:
                raise RuntimeError("some sessions never received the warm-up notification")
            if n == 0:
                rss_after = rss_kib(pid)
            # A random phase against the feed's polls, so rounds do not all land at the same point of the interval.
            await anyio.sleep(QUIET + phase.uniform(0, POLL_INTERVAL))
            server_cpu, client_cpu = cpu_seconds(pid), time.process_time()
            marker = time.perf_counter()
            await tool(agent, "jct_complete_task", {"task_id": task_id, "success": True, "summary": "Benchmarked."})
            returned = time.perf_counter()
            await all_notified(subscribers, marker, NOTIFIED)
            server_cpu, client_cpu = cpu_seconds(pid) - server_cpu, time.process_time() - client_cpu
            arrivals = [s.first_after(marker) for s in subscribers]
            results.append(
                Round(
                    latencies=[at - returned for at in arrivals if at is not None],
                    missing=sum(at is None for at in arrivals),
                    server_cpu=server_cpu,
                    client_cpu=client_cpu,
                )
            )
            print(f"  round {n + 1}: {summary(results[-1])}", file=sys.stderr, flush=True)
        close.set()
    return results, rss_before, rss_after, open_seconds


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def summary(row: Round) -> str:
    if not row.latencies:
        return f"no notifications ({row.missing} missing)"
    ms = [v * 1000 for v in row.latencies]
    return (
        f"p50 {quantile(ms, 0.5):.0f} ms, p99 {quantile(ms, 0.99):.0f} ms, max {max(ms):.0f} ms, "
        f"min {min(ms):.0f} ms, missing {row.missing}; CPU: server {row.server_cpu * 1000:.0f} ms, "
        f"client {row.client_cpu * 1000:.0f} ms"
    )


# --- databases and orchestration -----------------------------------------------------------------


async def bench_dialect(dialect: str, database_url: str, home: Path, args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    process = start_server(database_url, home, port)
    try:
        base_url = f"http://127.0.0.1:{port}"
        await wait_ready(process, base_url)
        rounds, before, after, open_seconds = await measure(base_url, process.pid, args.sessions, args.rounds)
    finally:
        stop_server(process)
    print(
        f"  {dialect}: opened {args.sessions} sessions in {open_seconds:.1f}s; server RSS {before / 1024:.1f} MiB "
        f"-> {after / 1024:.1f} MiB",
        file=sys.stderr,
        flush=True,
    )
    return {"dialect": dialect, "rounds": rounds, "before": before, "after": after, "open": open_seconds}


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="jct-bench-notify-") as tmp:
        home = Path(tmp)
        if "sqlite" in args.dialects:
            (home / "sqlite").mkdir()
            url = f"sqlite+aiosqlite:///{home / 'sqlite' / 'bench.db'}"
            rows.append(await bench_dialect("sqlite", url, home / "sqlite", args))
        if "postgresql" in args.dialects:
            base = make_url(async_database_url(args.postgres_url))
            name = f"jct_bench_{uuid.uuid4().hex[:10]}"
            admin_url = base.render_as_string(hide_password=False)
            await admin(admin_url, f"CREATE DATABASE {name}")
            try:
                (home / "postgresql").mkdir()
                url = base.set(database=name).render_as_string(hide_password=False)
                rows.append(await bench_dialect("postgresql", url, home / "postgresql", args))
            finally:
                await admin(admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    return rows


def table(rows: list[dict[str, Any]], sessions: int) -> str:
    lines = [
        "| dialect | sessions | round | min ms | p50 ms | p99 ms | max ms | missing | server CPU ms | client CPU ms "
        "| server RSS before | after | per session |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        per_session = (row["after"] - row["before"]) / sessions
        for n, measured in enumerate(row["rounds"], start=1):
            ms = [v * 1000 for v in measured.latencies] or [float("nan")]
            memory = (
                f"{row['before'] / 1024:.1f} MiB | {row['after'] / 1024:.1f} MiB | {per_session:.0f} KiB"
                if n == 1
                else " | | "
            )
            lines.append(
                f"| {row['dialect']} | {sessions} | {n} | {min(ms):.0f} | {quantile(ms, 0.5):.0f} | "
                f"{quantile(ms, 0.99):.0f} | {max(ms):.0f} | {measured.missing} | {measured.server_cpu * 1000:.0f} | "
                f"{measured.client_cpu * 1000:.0f} | {memory} |"
            )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=200, help="subscribed sessions (default 200)")
    parser.add_argument("--rounds", type=int, default=1, help="completions measured per dialect (default 1)")
    add_database_arguments(parser)
    args = parser.parse_args(argv)
    check_dialects(parser, args)
    if args.sessions < 1 or args.rounds < 1:
        parser.error("--sessions and --rounds must be positive")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    # resources/subscribe is what handshake-era clients (Claude Code) use; the SDK marks it deprecated.
    warnings.filterwarnings("ignore", message="resources/(un)?subscribe is removed")
    print(f"# notify benchmark: {args.sessions} legacy streamable HTTP sessions, {args.rounds} completion(s)")
    print(
        f"# {datetime.now(UTC):%Y-%m-%d}, nproc {os.cpu_count()}, Python {platform.python_version()}, "
        f"mcp {version('mcp')}",
        flush=True,
    )
    started = time.perf_counter()
    rows = asyncio.run(run(args))
    print(f"# {time.perf_counter() - started:.0f}s in all")
    print()
    print(table(rows, args.sessions))


if __name__ == "__main__":
    main()
