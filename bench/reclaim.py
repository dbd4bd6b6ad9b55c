"""Connection-held leases (DESIGN section 17): how soon a killed stdio agent's task is claimed by another agent,
and what the renewal costs the database.

One `jct serve` (HTTP) on a fresh database per dialect (PostgreSQL by default too; SQLite works too), with the
default lease settings unless told otherwise.

- Reclaim: `--rounds` times, a task is enqueued; an agent with its own `jct serve --stdio` (an `mcp.Client`
  over stdio, as Claude Code starts one) claims it; another agent waits for work on the HTTP server
  (`jct_claim_next(wait_seconds=...)`); a random moment within a renewal period after the claim, the stdio
  server is SIGKILLed. The figure is from the SIGKILL to the waiting agent's answer holding the task: the
  goal is under 60 s with the defaults (JCT_LIVE_LEASE_SECONDS 45, JCT_SWEEP_INTERVAL_SECONDS 5).
- Renewal cost: one stdio server holds N runs (`--held`, e.g. 1,10,100), with `--renew-lease` as its live
  lease so the window sees many periods. Over `--window` seconds, the renewal's write statements per second
  and rows renewed per second (read from the runs' leases every 20 ms, `Writes`), beside the same window with
  the server holding nothing (none expected). At the default live lease, scale by 3 / 45 instead of 3 / 3.

Writes bench/results/reclaim.json and prints each dialect's figures.

    .venv/bin/python bench/reclaim.py [--dialects sqlite] [--rounds 3] [--held 1,10,100]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    BENCH_DIR,
    SERVER_ENV,
    add_database_arguments,
    check_dialects,
    free_port,
    fresh_database,
    start_server,
    stop_server,
    tool,
    wait_ready,
)

RESULTS = BENCH_DIR / "results" / "reclaim.json"
TASK = {"objective": "Change the module", "operation": "analysis", "target_repo": "myorg/api"}
DEFAULT_LIVE_LEASE = 45.0


def stdio_params(database_url: str, home: Path, settings: dict[str, str]) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JCT_")} | SERVER_ENV | settings
    env |= {"JCT_DATABASE_URL": database_url, "JCT_HOME": str(home), "JCT_TRACE_ROOT": str(home / "traces")}
    return StdioServerParameters(
        command=sys.executable, args=["-m", "server", "serve", "--stdio"], env=env, cwd=str(BENCH_DIR.parent)
    )


def stdio_server_pids() -> set[int]:
    """This process's children that are `jct serve --stdio` (the SDK starts them; it does not say their pid)."""
    found = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        for pid in (task / "children").read_text().split():
            with suppress(OSError):
                if b"--stdio" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.add(int(pid))
    return found


@asynccontextmanager
async def stdio_agent(params: StdioServerParameters) -> AsyncIterator[tuple[Client, int]]:
    """A client with its own stdio server, and that server's pid, run in a task of its own: a server killed
    meanwhile ends it quietly."""
    opened: dict[str, Any] = {}
    ready, done = anyio.Event(), anyio.Event()

    async def run() -> None:
        before = stdio_server_pids()
        try:
            async with Client(params, mode="legacy") as client:
                (opened["pid"],) = stdio_server_pids() - before
                opened["client"] = client
                ready.set()
                await done.wait()
        except Exception as exc:  # its server was killed
            opened.setdefault("error", exc)
        except BaseExceptionGroup as group:  # the same, from the client's task group
            if group.subgroup(Exception) is None or group.subgroup(lambda e: not isinstance(e, Exception)):
                raise
            opened.setdefault("error", group)
        finally:
            ready.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await ready.wait()
        if "client" not in opened:
            raise RuntimeError(f"the stdio agent did not start: {opened.get('error')!r}")
        try:
            yield opened["client"], opened["pid"]
        finally:
            done.set()
            with suppress(ProcessLookupError):
                os.kill(opened["pid"], signal.SIGKILL)


async def reclaim_round(base: str, params: StdioServerParameters, live_lease: float, wait: float) -> float:
    """Seconds from the SIGKILL of the claimant's stdio server to another agent's claim of its task."""
    async with Client(f"{base}/mcp") as other:
        task = await tool(other, "jct_enqueue_task", TASK)
        async with stdio_agent(params) as (agent, pid):
            claimed = await tool(agent, "jct_claim_next", {})
            assert claimed["task_id"] == task["task_id"], claimed
            result: dict[str, Any] = {}

            async def waiter() -> None:
                result.update(await tool(other, "jct_claim_next", {"wait_seconds": wait}))
                result["at"] = time.monotonic()

            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter)
                await anyio.sleep(random.uniform(0, live_lease / 3))  # anywhere in a renewal period
                os.kill(pid, signal.SIGKILL)
                killed = time.monotonic()
    assert result.get("task_id") == task["task_id"], f"the task did not come back within {wait}s: {result}"
    return float(result["at"] - killed)


class Writes:
    """The renewal's writes, seen from the rows: every `POLL` seconds the running runs' leases are read, and a
    poll that finds leases moved counts one statement (the renewal writes all of a process's held runs at
    once, every third of its live lease, far apart from one poll to the next) and as many rows as moved. The
    same on both dialects, and nothing else moves a running run's lease while no agent calls."""

    POLL = 0.02

    def __init__(self, database_url: str) -> None:
        self.url = database_url

    async def window(self, seconds: float) -> tuple[float, float]:
        """Renewal statements per second and rows renewed per second, over `seconds`."""
        engine = create_async_engine(self.url)
        query = text("SELECT id, lease_expires_at FROM runs WHERE status = 'running'")
        statements = rows = 0
        try:
            async with engine.connect() as conn:
                leases: dict[str, Any] = {row[0]: row[1] for row in await conn.execute(query)}
                await conn.rollback()
                ends = time.monotonic() + seconds
                while time.monotonic() < ends:
                    await anyio.sleep(self.POLL)
                    current: dict[str, Any] = {row[0]: row[1] for row in await conn.execute(query)}
                    await conn.rollback()  # a fresh snapshot next time
                    moved = sum(1 for run, lease in current.items() if run in leases and leases[run] != lease)
                    statements += 1 if moved else 0
                    rows += moved
                    leases = current
        finally:
            await engine.dispose()
        return statements / seconds, rows / seconds


async def renewal_cost(
    base: str, params: StdioServerParameters, held: list[int], window: float, writes: Writes
) -> list[dict[str, float]]:
    rows = []
    async with Client(f"{base}/mcp") as other:
        for count in held:
            for _ in range(count):
                await tool(other, "jct_enqueue_task", TASK)
            async with stdio_agent(params) as (agent, _pid):
                idle, _ = await writes.window(window)  # the same process, holding nothing: none
                claimed = [(await tool(agent, "jct_claim_next", {}))["task_id"] for _ in range(count)]
                tx, updated = await writes.window(window)
                for task_id in claimed:  # let go, for the next count
                    await tool(agent, "jct_release_task", {"task_id": task_id, "reason": "bench"})
            rows.append(
                {
                    "held": count,
                    "writes_per_second": round(tx, 3),
                    "rows_per_second": round(updated, 3),
                    "idle_writes_per_second": round(idle, 3),
                }
            )
            print(f"  {count:>4} held: {rows[-1]}", flush=True)
    return rows


async def run_dialect(dialect: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    home = root / dialect
    figures: dict[str, Any] = {"live_lease_seconds": args.live_lease, "sweep_interval_seconds": args.sweep}
    settings = {"JCT_LIVE_LEASE_SECONDS": str(args.live_lease), "JCT_SWEEP_INTERVAL_SECONDS": str(args.sweep)}
    async with fresh_database(dialect, home, args.postgres_url) as database_url:
        port = free_port()
        server = start_server(database_url, home, port, echo=False, env=settings)
        base = f"http://127.0.0.1:{port}"
        try:
            await wait_ready(server, base)
            params = stdio_params(database_url, home, settings)
            samples = []
            for n in range(args.rounds):
                samples.append(await reclaim_round(base, params, args.live_lease, args.live_lease * 3))
                print(f"  reclaim round {n + 1}: {samples[-1]:.1f}s after SIGKILL", flush=True)
            figures["reclaim_seconds"] = [round(s, 2) for s in samples]
            figures["reclaim_median_seconds"] = round(statistics.median(samples), 2)
            figures["reclaim_max_seconds"] = round(max(samples), 2)
            renew = settings | {"JCT_LIVE_LEASE_SECONDS": str(args.renew_lease)}
            figures["renewal_lease_seconds"] = args.renew_lease
            figures["renewal"] = await renewal_cost(
                base, stdio_params(database_url, home, renew), args.held, args.window, Writes(database_url)
            )
        finally:
            stop_server(server)
    return figures


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_database_arguments(parser)
    parser.add_argument("--rounds", type=int, default=3, help="reclaims to time (default 3)")
    parser.add_argument("--live-lease", type=float, default=DEFAULT_LIVE_LEASE, help="JCT_LIVE_LEASE_SECONDS")
    parser.add_argument("--sweep", type=float, default=5.0, help="JCT_SWEEP_INTERVAL_SECONDS")
    parser.add_argument("--held", type=lambda s: [int(n) for n in s.split(",")], default=[1, 10, 100])
    parser.add_argument("--renew-lease", type=float, default=3.0, help="the live lease of the renewal-cost runs")
    parser.add_argument("--window", type=float, default=15.0, help="seconds per renewal-cost window")
    args = parser.parse_args()
    check_dialects(parser, args)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="jct-reclaim-") as tmp:
        for dialect in args.dialects:
            print(f"{dialect}:", flush=True)
            results[dialect] = await run_dialect(dialect, args, Path(tmp))
            figures = results[dialect]
            print(
                f"{dialect}: reclaim after SIGKILL median {figures['reclaim_median_seconds']}s, "
                f"max {figures['reclaim_max_seconds']}s (live lease {args.live_lease}s, sweep {args.sweep}s)",
                flush=True,
            )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    anyio.run(main)
