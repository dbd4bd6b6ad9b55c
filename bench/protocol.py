"""JCT's tool calls beside the protocol floor: a trivial `echo` tool on the same server, SDK and transport.

One server (bench/echo_server.py: a subprocess running `create_app` with an extra `echo` tool) and N concurrent
`mcp.Client`s over streamable HTTP (the 2025 `initialize` handshake by default, as Claude Code speaks;
`--mode modern` for 2026-07-28). For each N, every client starts each phase together and makes its share
of `--calls` calls; each call is timed:

  echo                  echo(text="ping"): the transport, the SDK's dispatch and validation, nothing else
  jct_claim_next        claims one task each call (the queue is pre-loaded)
  jct_report_artifact   1 KiB of log text, to a task the client claimed beforehand
  jct_report_progress   a progress note on that task (a write that may be lost without harm: no WAL flush
                        waited for on PostgreSQL)
  jct_complete_task     completes the tasks claimed in the claim phase (success=true, no artifacts)

"cost vs echo" is echo calls/s divided by the call's calls/s at the same concurrency (1.0 = free; DESIGN
section 9 asks for at most 1.5). Clients and server share the machine, so read ratios, not absolutes.
"server CPU" is the server process's user + system CPU time over the phase (/proc/<pid>/stat) per call: what
one call costs the server (its background loops included, as in echo's). A loaded machine raises it too, far
less than it moves the ratios.

Each dialect gets a fresh database (SQLite in a temp directory; PostgreSQL created on
JCT_BENCH_POSTGRES_URL's server and dropped after), bulk-loaded by bench/scale.py.

    python bench/protocol.py                                 # both dialects, 1/10/50 clients, 600 calls per cell
    python bench/protocol.py --concurrency 1,10 --calls 200 --mode modern --dialects sqlite
    python bench/protocol.py --dialects postgresql --pg-set commit_delay=1000 --pg-set commit_siblings=2

`--pg-set NAME=VALUE` sets a PostgreSQL parameter on the throwaway database (ALTER DATABASE ... SET) before the
server connects: group commit (`commit_delay`, `commit_siblings`, which only a superuser may set) measured
beside the default.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    add_database_arguments,
    admin,
    bulk_load,
    check_dialects,
    cpu_seconds,
    fresh_database,
    servers,
    tool,
)
from sqlalchemy import make_url

ARTIFACT = ("bench log line " * 73)[:1023] + "\n"  # 1 KiB
CALLS = ("echo", "jct_claim_next", "jct_report_artifact", "jct_report_progress", "jct_complete_task")


# --- the clients -----------------------------------------------------------------------------


class Cell:
    """One call at one concurrency: its latencies and the phase's wall time."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.latencies: list[float] = []
        self.wall = 0.0
        self.server_cpu = 0.0  # seconds of the server process's CPU over the phase

    @property
    def server_cpu_ms(self) -> float:
        """Server CPU per call, in milliseconds."""
        return self.server_cpu / len(self.latencies) * 1000 if self.latencies else 0.0

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.wall if self.wall else 0.0

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)] * 1000


async def phase(
    clients: list[Client], cell: Cell, per_client: int, call: Callable[[int, int], Awaitable[None]], server_pid: int
) -> None:
    """Every client makes `per_client` timed calls; they start together; the phase's wall time and the server's
    CPU time are recorded."""

    async def run(index: int) -> None:
        for n in range(per_client):
            started = time.perf_counter()
            await call(index, n)
            cell.latencies.append(time.perf_counter() - started)

    async with profiled(server_pid, f"{len(clients)}-{cell.name}"):
        cpu = cpu_seconds(server_pid)
        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for index in range(len(clients)):
                tg.start_soon(run, index)
        cell.wall = time.perf_counter() - started
        cell.server_cpu = cpu_seconds(server_pid) - cpu


PROFILES: Path | None = None  # --profile: where py-spy's samples of the server go, a file per phase


@asynccontextmanager
async def profiled(server_pid: int, name: str) -> AsyncIterator[None]:
    """With --profile, py-spy samples the server over the phase (collapsed stacks, one file per phase: read them
    with `bench/stacks.py`); without, nothing. Its sampling costs the server a little CPU, so read figures from a
    run without it."""
    if PROFILES is None:
        yield
        return
    out, log = PROFILES / f"{name}.txt", PROFILES / f"{name}.log"
    with log.open("wb") as said:
        spy = await anyio.open_process(
            [
                shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy")),
                "record",
                "--pid",
                str(server_pid),
                "--format",
                "raw",
                "--gil",
                "--rate",
                str(PROFILE_RATE),
                "--output",
                str(out),
            ],
            stdout=said,
            stderr=said,
        )
    await anyio.sleep(0.5)  # py-spy attaches
    if spy.returncode is not None:
        raise RuntimeError(f"py-spy could not sample the server (it may lack ptrace permission): see {log}")
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            spy.send_signal(signal.SIGINT)  # py-spy writes what it sampled and exits
        with anyio.fail_after(60):
            await spy.wait()
    if not out.exists():
        raise RuntimeError(f"py-spy wrote no samples: see {log}")


# py-spy's samples per second: bench/stacks.py's --rate.
PROFILE_RATE = 200


async def measure(url: str, server_pid: int, concurrency: int, calls: int, mode: str) -> dict[str, Cell]:
    per_client = max(1, math.ceil(calls / concurrency))
    cells = {name: Cell(name) for name in CALLS}
    claimed: list[list[str]] = [[] for _ in range(concurrency)]
    report_to: list[str] = []
    async with AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(Client(url, mode="legacy" if mode == "legacy" else "auto"))
            for _ in range(concurrency)
        ]
        for client in clients:  # warm up: connections, schemas, the server's first-call paths
            for _ in range(3):
                await tool(client, "echo", {"text": "warm"})
            claim = await tool(client, "jct_claim_next", {})
            report_to.append(claim["task_id"])

        async def do_echo(i: int, _n: int) -> None:
            await tool(clients[i], "echo", {"text": "ping"})

        async def do_claim(i: int, _n: int) -> None:
            result = await tool(clients[i], "jct_claim_next", {})
            if not result["claimed"]:
                raise RuntimeError("the queue ran dry; enqueue more tasks")
            claimed[i].append(result["task_id"])

        async def do_report(i: int, n: int) -> None:
            args = {"task_id": report_to[i], "title": f"log {n}", "artifact_type": "log", "content": ARTIFACT}
            await tool(clients[i], "jct_report_artifact", args)

        async def do_progress(i: int, n: int) -> None:
            args = {"task_id": report_to[i], "message": f"step {n}", "progress": n % 101}
            await tool(clients[i], "jct_report_progress", args)

        async def do_complete(i: int, n: int) -> None:
            args = {"task_id": claimed[i][n], "success": True, "summary": "Benchmarked."}
            await tool(clients[i], "jct_complete_task", args)

        await phase(clients, cells["echo"], per_client, do_echo, server_pid)
        await phase(clients, cells["jct_claim_next"], per_client, do_claim, server_pid)
        await phase(clients, cells["jct_report_artifact"], per_client, do_report, server_pid)
        await phase(clients, cells["jct_report_progress"], per_client, do_progress, server_pid)
        await phase(clients, cells["jct_complete_task"], per_client, do_complete, server_pid)
    return cells


# --- orchestration ---------------------------------------------------------------------------


def table(results: dict[int, dict[str, Cell]]) -> str:
    lines = [
        "| clients | call | calls/s | p50 ms | p99 ms | cost vs echo | p50 vs echo | server CPU ms/call |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for concurrency, cells in results.items():
        floor = cells["echo"]
        for name in CALLS:
            cell = cells[name]
            cost = floor.rate / cell.rate if cell.rate else float("inf")
            p50 = cell.quantile(0.5) / floor.quantile(0.5)
            lines.append(
                f"| {concurrency} | `{name}` | {cell.rate:,.0f} | {cell.quantile(0.5):.1f} | "
                f"{cell.quantile(0.99):.1f} | {cost:.2f}x | {p50:.2f}x | {cell.server_cpu_ms:.2f} |"
            )
    return "\n".join(lines)


def tasks_needed(levels: list[int], calls: int) -> int:
    return sum(2 * max(1, math.ceil(calls / n)) * n + n for n in levels) + 10


async def run(
    dialect: str,
    levels: list[int],
    calls: int,
    mode: str,
    home: Path,
    postgres_url: str,
    log: Any = print,
    pg_settings: dict[str, str] | None = None,
) -> dict[int, dict[str, Cell]]:
    """A fresh database of `dialect`, one bench server on it, the queue bulk-loaded; every level measured."""
    results: dict[int, dict[str, Cell]] = {}
    async with fresh_database(dialect, home, postgres_url) as url:
        for name, value in (pg_settings or {}).items() if dialect == "postgresql" else ():
            await admin(url, f"ALTER DATABASE {make_url(url).database} SET {name} = {value}")
        async with servers(url, home / dialect, 1) as procs:
            await bulk_load(url, tasks_needed(levels, calls))
            for concurrency in levels:
                started = time.perf_counter()
                process, base_url = procs[0]
                results[concurrency] = await measure(f"{base_url}/mcp", process.pid, concurrency, calls, mode)
                log(f"  protocol {dialect} {concurrency} client(s) in {time.perf_counter() - started:.1f}s")
    return results


async def main_async(args: argparse.Namespace) -> None:
    levels = [int(part) for part in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory(prefix="jct-bench-") as tmp:
        for dialect in args.dialects:
            if args.profile is not None:
                global PROFILES
                PROFILES = args.profile / dialect
                PROFILES.mkdir(parents=True, exist_ok=True)
            settings = dict(item.split("=", 1) for item in args.pg_set)
            results = await run(
                dialect, levels, args.calls, args.mode, Path(tmp), args.postgres_url, pg_settings=settings
            )
            era = "2025-11-25 handshake (legacy)" if args.mode == "legacy" else "2026-07-28 (modern)"
            print(
                f"\nStreamable HTTP, {era}; {dialect}; mcp {version('mcp')}; Python {platform.python_version()}; "
                f"{os.cpu_count()} CPUs; {args.calls} calls per cell; clients and server on one machine.\n"
            )
            print(table(results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1,10,50", help="comma-separated client counts")
    parser.add_argument("--calls", type=int, default=600, help="calls per (call, concurrency) cell")
    parser.add_argument("--mode", choices=["legacy", "modern"], default="legacy")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="py-spy the server over each phase into DIR")
    parser.add_argument("--pg-set", action="append", default=[], metavar="NAME=VALUE", help="a PostgreSQL setting")
    add_database_arguments(parser)
    args = parser.parse_args()
    check_dialects(parser, args)
    logging.basicConfig(level=logging.WARNING)
    anyio.run(main_async, args)


if __name__ == "__main__":
    main()
