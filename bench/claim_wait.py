"""Waiting claims (DESIGN section 17): how soon an enqueue on one process reaches a waiter on another, and what
idle waiters cost.

Two `jct serve` processes, A and B, on one fresh database (PostgreSQL by default; SQLite works too, two
processes on one file). Every client is a real `mcp.Client` over streamable HTTP (the 2026-07-28 protocol).

- Wake-up latency: `--rounds` times, a waiter on A calls `jct_claim_next(wait_seconds=60)`; once it reports
  that it waits (its first progress notification) and a random moment later, a planner on B enqueues a task;
  the latency is from the enqueue's answer (its commit) to the waiter's answer holding that task. p50 and p99
  against JCT_NOTIFY_INTERVAL_SECONDS, the interval at which each process reads the audit log.
- Idle waiters: `--waiters` calls wait on A at once (`--clients` clients, the calls spread over them). Over
  `--idle-seconds`, A's resident memory and the database's transactions per second (PostgreSQL:
  xact_commit + xact_rollback of the database in pg_stat_database, every process's reads and writes
  included), beside the same window with the clients connected and no call waiting. Then one task is
  enqueued through B: the claim queries its wake-up cost on A (jct_waiting_claim_turns_total in A's
  /metrics: all waiters share the filters, so one tries and takes it, one more finds nothing, and the rest
  skip their try).

Writes bench/results/claim_wait.json and its rows in bench/RESULTS.md's summary (bench/report.py keeps them when
the suite rewrites the file), and prints each dialect's figures.

    .venv/bin/python bench/claim_wait.py [--dialects postgresql] [--rounds 50] [--waiters 1000]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
from anyio.abc import TaskStatus
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    add_database_arguments,
    check_dialects,
    free_port,
    fresh_database,
    quantile,
    raise_nofile,
    rss_kib,
    scalar,
    start_server,
    stop_server,
    tool,
    wait_ready,
)

RESULTS = Path(__file__).resolve().parent / "results" / "claim_wait.json"
WAIT = 60.0
IDLE_WAIT = 900.0  # the idle waiters outlast the whole measurement
ENV = {"JCT_CLAIM_WAIT_MAX_SECONDS": str(IDLE_WAIT), "JCT_MAX_CONNECTIONS": "10000"}
PHASES = 1.0  # seconds over which an enqueue's moment is spread (several of the feed's intervals)
XACTS = "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"


async def enqueue(planner: Client, n: int) -> str:
    created = await tool(
        planner,
        "jct_enqueue_task",
        {"objective": f"Bench task {n}", "operation": "analysis", "target_repo": "bench/repo"},
    )
    return str(created["task_id"])


class Waiter:
    def __init__(self, client: Client, wait: float) -> None:
        self.client, self.wait = client, wait
        self.waiting = anyio.Event()
        self.answered: float | None = None
        self.result: dict[str, Any] | None = None

    async def _progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.waiting.set()

    async def run(self) -> None:
        result = await self.client.call_tool(
            "jct_claim_next", {"wait_seconds": self.wait}, progress_callback=self._progress
        )
        self.answered = time.perf_counter()
        if result.is_error or result.structured_content is None:
            raise RuntimeError(f"jct_claim_next failed: {result.content}")
        self.result = dict(result.structured_content)


async def latency(a_url: str, b_url: str, rounds: int) -> dict[str, Any]:
    """Seconds from an enqueue's answer on B to the answer of the waiter on A that claimed the task."""
    samples: list[float] = []
    async with Client(f"{a_url}/mcp") as agent, Client(f"{b_url}/mcp") as planner:
        await agent.list_tools()
        for n in range(rounds):
            waiter = Waiter(agent, WAIT)
            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter.run)
                await waiter.waiting.wait()
                # At a random moment: rounds that follow each other at once would keep the same phase to A's
                # feed reads, and measure one point of the interval over and over.
                await anyio.sleep(random.uniform(0, PHASES))
                task_id = await enqueue(planner, n)
                enqueued = time.perf_counter()
            assert waiter.result is not None
            assert waiter.result.get("task_id") == task_id, waiter.result
            assert waiter.answered is not None
            samples.append(waiter.answered - enqueued)
    return {
        "rounds": rounds,
        "p50_ms": round(quantile(samples, 0.5) * 1000, 1),
        "p99_ms": round(quantile(samples, 0.99) * 1000, 1),
        "max_ms": round(max(samples) * 1000, 1),
    }


async def _client(url: str, *, task_status: TaskStatus[Client]) -> None:
    async with Client(url) as client:
        await client.list_tools()
        task_status.started(client)
        await anyio.sleep_forever()


async def transactions(database_url: str) -> int | None:
    return None if database_url.startswith("sqlite") else int(await scalar(database_url, XACTS))


# PostgreSQL adds a backend's transactions to pg_stat_database when it goes idle, up to 10 s late: a window
# starts this long after what came before it (the waiters' first claims) so that it counts none of it.
SETTLE_SECONDS = 12.0


async def window(database_url: str, pid: int, seconds: float) -> dict[str, Any]:
    """RSS of `pid` at the end, and database transactions per second over `seconds`."""
    await anyio.sleep(SETTLE_SECONDS)
    before = await transactions(database_url)
    await anyio.sleep(seconds)
    after = await transactions(database_url)
    per_second = None if before is None or after is None else round((after - before - 1) / seconds, 2)
    return {"rss_mib": round(rss_kib(pid) / 1024, 1), "transactions_per_second": per_second}


async def idle(database_url: str, a_pid: int, a_url: str, b_url: str, args: argparse.Namespace) -> dict[str, Any]:
    async with Client(f"{b_url}/mcp") as planner, anyio.create_task_group() as tg:
        clients = [await tg.start(_client, f"{a_url}/mcp") for _ in range(args.clients)]
        quiet = await window(database_url, a_pid, args.idle_seconds)
        waiters = [Waiter(clients[n % len(clients)], IDLE_WAIT) for n in range(args.waiters)]
        started = time.perf_counter()
        async with anyio.create_task_group() as calls:
            for waiter in waiters:
                calls.start_soon(waiter.run)
            for waiter in waiters:
                await waiter.waiting.wait()
            all_waiting = time.perf_counter() - started
            waiting = await window(database_url, a_pid, args.idle_seconds)
            # One task for all the waiters: the claim queries its wake-up cost (A's /metrics counts the turns).
            before = await turns(a_url)
            woke = time.perf_counter()
            task_id = await enqueue(planner, -1)
            while not any(w.result is not None for w in waiters):
                await anyio.sleep(0.01)
            taken = time.perf_counter() - woke
            while sum(after := await turns(a_url)) - sum(before) < args.waiters:
                await anyio.sleep(0.1)  # every other waiter has had its turn
            calls.cancel_scope.cancel()
        tg.cancel_scope.cancel()
    winners = [w.result for w in waiters if w.result is not None]
    assert [r.get("task_id") for r in winners] == [task_id], winners
    return {
        "waiters": args.waiters,
        "clients": args.clients,
        "seconds_until_all_waiting": round(all_waiting, 1),
        "no_waiter": quiet,
        "waiting": waiting,
        "rss_per_waiter_kib": round((waiting["rss_mib"] - quiet["rss_mib"]) * 1024 / args.waiters, 1),
        "one_task_taken_after_ms": round(taken * 1000, 1),
        "wake_up_claims_tried": after[0] - before[0],
        "wake_up_tries_skipped": after[1] - before[1],
    }


async def turns(base_url: str) -> tuple[int, int]:
    """The server's woken-waiter turns so far: (tried, skipped), from /metrics."""
    async with httpx2.AsyncClient() as http:
        text = (await http.get(f"{base_url}/metrics")).text
    counts = {"tried": 0, "skipped": 0}
    for line in text.splitlines():
        for outcome in counts:
            if line.startswith(f'jct_waiting_claim_turns_total{{outcome="{outcome}"}}'):
                counts[outcome] = int(float(line.split()[-1]))
    return counts["tried"], counts["skipped"]


async def bench_dialect(dialect: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="claim-wait-") as tmp:
        home = Path(tmp)
        async with fresh_database(dialect, home / "db", args.postgres_url) as database_url:
            started = []
            try:
                for name in ("a", "b"):
                    port = free_port()
                    process = start_server(database_url, home / name, port, echo=False, env=ENV)
                    started.append((process, f"http://127.0.0.1:{port}"))
                    await wait_ready(process, started[-1][1])
                (a, a_url), (_b, b_url) = started
                result = {"dialect": dialect, "latency": await latency(a_url, b_url, args.rounds)}
                result["idle"] = await idle(database_url, a.pid, a_url, b_url, args)
                return result
            finally:
                for process, _url in started:
                    stop_server(process)


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    raise_nofile()
    rows = []
    for dialect in args.dialects:
        row = await bench_dialect(dialect, args)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


# --- RESULTS.md -------------------------------------------------------------------------------------------

RESULTS_MD = Path(__file__).resolve().parent / "RESULTS.md"
SUMMARY_PREFIX = "| waiting claims:"


def summary_rows(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """The waiting claims' rows in RESULTS.md's summary of every target (bench/report.py keeps them)."""
    rows = []
    for row in result["rows"]:
        latency, idle = row["latency"], row["idle"]
        rates = [idle[key]["transactions_per_second"] for key in ("no_waiter", "waiting")]
        queries = f"; database {rates[1]} vs {rates[0]} transactions/s" if None not in rates else ""
        rows += [
            (
                f"waiting claims: wake-up from an enqueue on process B to a waiter on process A ({row['dialect']})",
                f"p50 {latency['p50_ms']:.0f} ms, p99 {latency['p99_ms']:.0f} ms ({latency['rounds']} rounds)",
                "(reported; the feed reads every 250 ms)",
                "reported",
            ),
            (
                f"waiting claims: {idle['waiters']:,} idle waiters on one process ({row['dialect']})",
                f"{idle['rss_per_waiter_kib']:.0f} KiB each{queries}; one enqueue woke all: "
                f"{idle['wake_up_claims_tried']} claim queries, {idle['wake_up_tries_skipped']} tries skipped",
                "no query per idle waiter",
                "met" if idle["wake_up_claims_tried"] <= 3 else "**missed**",
            ),
        ]
    return rows


def write_results_md(result: dict[str, Any], path: Path = RESULTS_MD) -> None:
    """Put the waiting claims' rows into RESULTS.md's summary, replacing earlier ones."""
    lines = [line for line in path.read_text().splitlines() if not line.startswith(SUMMARY_PREFIX)]
    header = next((n for n, line in enumerate(lines) if line.startswith("| target |")), None)
    if header is None:
        return
    end = next((n for n in range(header, len(lines)) if not lines[n].startswith("|")), len(lines))
    lines[end:end] = [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in summary_rows(result)]
    path.write_text("\n".join(lines).rstrip() + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_database_arguments(parser)
    parser.set_defaults(dialects=["postgresql"])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--waiters", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=50, help="clients the idle waiters' calls are spread over")
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--no-results-md", action="store_true", help="do not touch bench/RESULTS.md")
    args = parser.parse_args()
    check_dialects(parser, args)
    rows = anyio.run(run, args)
    result = {"command": " ".join(sys.argv[1:]), "measured_at": time.strftime("%Y-%m-%d"), "rows": rows}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    if not args.no_results_md:
        write_results_md(result)


if __name__ == "__main__":
    main()
