"""Contention: N agents drain a queue through the full lifecycle over streamable HTTP, beside two floors.

For each configuration (one server on SQLite, one on PostgreSQL, two server processes sharing one
PostgreSQL database) and each agent count, a fresh database is bulk-loaded (bench/scale.py) with
`--tasks` queued tasks and the servers are started (bench/echo_server.py: `create_app` plus `echo`).
Then, from this process (the load generator; every server is its own process):

  lifecycle   each agent (its own `mcp.Client`, legacy streamable HTTP) loops jct_claim_next,
              jct_report_progress, jct_report_artifact (1 KiB log), jct_complete_task until the queue
              is empty; lifecycles/s = tasks / wall time. With two servers, agents alternate servers.
  echo        the protocol floor at the same concurrency: an "echo lifecycle" is 4 echo calls.
  raw claim   the storage floor: the raw claim UPDATE (bench/claims.py's statement) draining a second
              load of the same size on the same database, straight through SQLAlchemy.

One database and server set per configuration; each agent count drains its own load. After each
drain the database is checked directly: every task completed, exactly one `task.claimed` and
one `task.completed` audit row per task, one run per task (zero double claims, zero lost tasks).
Server CPU is utime+stime of each server process (/proc/<pid>/stat) across the drain.

    python bench/contention.py --agents 10 --configs sqlite --tasks 300
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

sys.path.insert(0, str(Path(__file__).resolve().parent))

from claims import RAW_POSTGRES, RAW_SQLITE
from common import DEFAULT_PG, bulk_load, cpu_seconds, fresh_database, quantile, servers, tool

ARTIFACT = ("bench log line " * 73)[:1023] + "\n"  # 1 KiB
CONFIGS = {"sqlite": ("sqlite", 1), "postgresql": ("postgresql", 1), "postgresql-2": ("postgresql", 2)}
CALLS = ("jct_claim_next", "jct_report_progress", "jct_report_artifact", "jct_complete_task")
OPENING = 20  # clients initializing at once


@dataclass
class Cell:
    config: str
    agents: int
    tasks: int
    wall: float = 0.0
    lifecycles: int = 0
    echo_wall: float = 0.0
    echo_lifecycles: int = 0
    raw_wall: float = 0.0
    server_cpu: list[float] = field(default_factory=list)  # seconds per server process across the drain
    client_cpu: float = 0.0  # seconds this process (the load generator: every agent) spent across the drain
    latencies: dict[str, list[float]] = field(default_factory=lambda: {name: [] for name in (*CALLS, "echo")})
    double_claims: int = 0
    lost: int = 0
    checks: str = ""

    @property
    def rate(self) -> float:
        return self.lifecycles / self.wall if self.wall else 0.0

    @property
    def echo_rate(self) -> float:
        return self.echo_lifecycles / self.echo_wall if self.echo_wall else 0.0

    @property
    def raw_rate(self) -> float:
        return self.tasks / self.raw_wall if self.raw_wall else 0.0

    @property
    def cpu_per_1000(self) -> float:
        return sum(self.server_cpu) / self.lifecycles * 1000 if self.lifecycles else float("nan")

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "agents": self.agents,
            "tasks": self.tasks,
            "lifecycles_per_s": self.rate,
            "echo_lifecycles_per_s": self.echo_rate,
            "raw_claims_per_s": self.raw_rate,
            "server_cpu_s": self.server_cpu,
            "cpu_per_1000": self.cpu_per_1000,
            "client_cpu_s": self.client_cpu,
            "wall": self.wall,
            "double_claims": self.double_claims,
            "lost": self.lost,
            "checks": self.checks,
            "p50_ms": {k: quantile(v, 0.5) * 1000 for k, v in self.latencies.items()},
            "p99_ms": {k: quantile(v, 0.99) * 1000 for k, v in self.latencies.items()},
        }


async def open_clients(stack: AsyncExitStack, urls: list[str], count: int) -> list[Client]:
    clients: list[Client | None] = [None] * count
    gate = anyio.Semaphore(OPENING)

    async def one(index: int) -> None:
        async with gate:
            clients[index] = await stack.enter_async_context(Client(urls[index % len(urls)], mode="legacy"))

    # AsyncExitStack entries must be entered and exited in one task: open sequentially in batches.
    for start in range(0, count, OPENING):
        for index in range(start, min(count, start + OPENING)):
            await one(index)
    return [c for c in clients if c is not None]


async def drain(clients: list[Client], cell: Cell) -> set[str]:
    """Every agent runs lifecycles until claim_next says the queue is empty; returns the task ids claimed."""
    claimed: list[str] = []

    async def timed(name: str, client: Client, args: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        result = await tool(client, name, args)
        cell.latencies[name].append(time.perf_counter() - started)
        return result

    async def agent(client: Client) -> None:
        while True:
            claim = await timed("jct_claim_next", client, {})
            if not claim["claimed"]:
                return
            task_id = claim["task_id"]
            claimed.append(task_id)
            await timed("jct_report_progress", client, {"task_id": task_id, "message": "halfway", "progress": 50})
            await timed(
                "jct_report_artifact",
                client,
                {"task_id": task_id, "title": "log", "artifact_type": "log", "content": ARTIFACT},
            )
            await timed("jct_complete_task", client, {"task_id": task_id, "success": True, "summary": "Benchmarked."})

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for client in clients:
            tg.start_soon(agent, client)
    cell.wall = time.perf_counter() - started
    cell.lifecycles = len(claimed)
    return set(claimed) if len(set(claimed)) == len(claimed) else set()


async def echo_floor(clients: list[Client], cell: Cell, lifecycles: int) -> None:
    remaining = lifecycles

    async def agent(client: Client) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            for _ in range(4):
                started = time.perf_counter()
                await tool(client, "echo", {"text": "ping"})
                cell.latencies["echo"].append(time.perf_counter() - started)

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for client in clients:
            tg.start_soon(agent, client)
    cell.echo_wall = time.perf_counter() - started
    cell.echo_lifecycles = lifecycles


async def check_audit(url: str, cell: Cell, claimed: set[str], loaded: int) -> None:
    """Zero double claims, zero lost tasks: from the database itself, after the drain (`loaded` tasks so far)."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:

            async def one(sql: str) -> int:
                return int((await conn.execute(text(sql))).scalar() or 0)

            tasks = await one("SELECT count(*) FROM tasks")
            not_completed = await one("SELECT count(*) FROM tasks WHERE status <> 'completed'")
            doubles = await one(
                "SELECT count(*) FROM (SELECT entity_id FROM audit_log WHERE action = 'task.claimed' "
                "GROUP BY entity_id HAVING count(*) > 1) d"
            )
            extra_runs = await one(
                "SELECT count(*) FROM (SELECT task_id FROM runs GROUP BY task_id HAVING count(*) > 1) d"
            )
            unclaimed = await one(
                "SELECT count(*) FROM tasks WHERE id NOT IN "
                "(SELECT entity_id FROM audit_log WHERE action = 'task.claimed')"
            )
            uncompleted = await one(
                "SELECT count(*) FROM tasks WHERE id NOT IN "
                "(SELECT entity_id FROM audit_log WHERE action = 'task.completed')"
            )
    finally:
        await engine.dispose()
    cell.double_claims = doubles + extra_runs + (cell.lifecycles - len(claimed))
    cell.lost = max(not_completed, unclaimed, uncompleted, loaded - tasks, cell.tasks - cell.lifecycles)
    cell.checks = (
        f"{tasks} tasks, {not_completed} not completed, {doubles} claimed twice (audit), {extra_runs} with 2+ runs, "
        f"{unclaimed} never claimed, {uncompleted} without task.completed; agents claimed {cell.lifecycles} "
        f"({len(claimed)} distinct)"
    )


async def raw_floor(url: str, cell: Cell, workers: int) -> None:
    """The raw claim statement draining a fresh load of `cell.tasks` tasks on the same database."""
    await bulk_load(url, cell.tasks, migrate=False)
    sqlite = url.startswith("sqlite")
    engine = create_async_engine(url, pool_size=1 if sqlite else min(workers, 20), max_overflow=0)
    statement = text(RAW_SQLITE if sqlite else RAW_POSTGRES)
    remaining = cell.tasks
    try:
        async with engine.connect() as warm:
            await warm.execute(text("SELECT 1"))

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                params: dict[str, Any] = {"run_id": str(uuid.uuid4())}
                if sqlite:
                    params["now"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
                async with engine.begin() as conn:
                    if (await conn.execute(statement, params)).first() is None:
                        raise RuntimeError("raw claim found the queue empty early")

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(1 if sqlite else min(workers, 20))))
        cell.raw_wall = time.perf_counter() - started
    finally:
        await engine.dispose()


async def run_config(
    config: str, agent_counts: list[int], tasks: int, echo_lifecycles: int, home: Path, pg: str, log: Any = print
) -> list[Cell]:
    """One fresh database and its server(s) for a configuration; each agent count drains its own load of `tasks`.

    The database check after each drain covers every task loaded so far (earlier drains included). The raw
    floors come last, once per agent count, on the same database (their claims leave no audit rows)."""
    dialect, count = CONFIGS[config]
    cells: list[Cell] = []
    async with fresh_database(dialect, home, pg) as url:
        async with servers(url, home / config, count) as procs:
            first = True
            for agents in agent_counts:
                started = time.perf_counter()
                cell = Cell(config=config, agents=agents, tasks=tasks)
                await bulk_load(url, tasks, migrate=first)
                first = False
                urls = [f"{base}/mcp" for _, base in procs]
                async with AsyncExitStack() as stack:
                    clients = await open_clients(stack, urls, agents)
                    for client in clients:  # warm up every session and the server's first-call paths
                        await tool(client, "echo", {"text": "warm"})
                    await echo_floor(clients, cell, echo_lifecycles)
                    before, client_before = [cpu_seconds(p.pid) for p, _ in procs], time.process_time()
                    claimed = await drain(clients, cell)
                    cell.server_cpu = [cpu_seconds(p.pid) - b for (p, _), b in zip(procs, before, strict=True)]
                    cell.client_cpu = time.process_time() - client_before
                await check_audit(url, cell, claimed, tasks * len(cells) + tasks)
                cells.append(cell)
                log(
                    f"  contention {config:12} {agents:3} agents: {cell.rate:6.1f} lifecycles/s "
                    f"(echo {cell.echo_rate:6.1f}/s), server CPU {cell.cpu_per_1000:.1f} s/1000, "
                    f"double {cell.double_claims}, lost {cell.lost} [{time.perf_counter() - started:.0f}s]"
                )
        for cell in cells:
            await raw_floor(url, cell, cell.agents)
            log(f"  contention {config:12} {cell.agents:3} workers: raw claim {cell.raw_rate:6.0f}/s")
    return cells


async def run(
    configs: list[str], agent_counts: list[int], tasks: int, echo_lifecycles: int, pg: str, log: Any = print
) -> list[Cell]:
    cells: list[Cell] = []
    with tempfile.TemporaryDirectory(prefix="jct-bench-contention-") as tmp:
        for config in configs:
            cells += await run_config(config, agent_counts, tasks, echo_lifecycles, Path(tmp), pg, log)
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated: {', '.join(CONFIGS)}")
    parser.add_argument("--agents", default="10,50,100", help="comma-separated agent counts")
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--echo-lifecycles", type=int, default=250)
    parser.add_argument("--postgres-url", default=DEFAULT_PG)
    args = parser.parse_args()
    configs = args.configs.split(",")
    if unknown := set(configs) - set(CONFIGS):
        parser.error(f"unknown configs {sorted(unknown)}; choose from {', '.join(CONFIGS)}")
    cells = anyio.run(
        run, configs, [int(a) for a in args.agents.split(",")], args.tasks, args.echo_lifecycles, args.postgres_url
    )
    for cell in cells:
        print(cell.as_dict())


if __name__ == "__main__":
    main()
