"""Dashboard pages at scale: each page's render time against jct_queue_stats over MCP, on one server.

A database is bulk-loaded by `scale.load` (1M tasks by default), a server started on it (`scale.serving`),
and each page of /ui/ fetched in turn with jct_queue_stats called over streamable HTTP between them, so a
noisy neighbour slows both alike. The goal (DESIGN section 14): every page's p50 within 3x of
jct_queue_stats's p50. Writes the table to stdout and, with --write, to bench/DASHBOARD.md.

    python bench/dashboard.py                                   # PostgreSQL, 1M tasks
    python bench/dashboard.py --size 100000 --dialects sqlite --calls 30
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path

import httpx2
from common import add_database_arguments, check_dialects, tool
from mcp import Client
from scale import Stat, _quantile, fresh_database, load, serving

GOAL = 3.0


def pages(task_id: str) -> dict[str, str]:
    return {
        "overview /ui/": "/ui/",
        "queue": "/ui/queue",
        "queue, all statuses": "/ui/queue?status=all",
        "task": f"/ui/tasks/{task_id}",
        "reviews": "/ui/reviews",
        "missions": "/ui/missions",
        "agents": "/ui/agents",
        "stuck": "/ui/stuck",
        "audit": "/ui/audit",
        "audit by action": "/ui/audit?action=task.completed",
    }


async def measure(base_url: str, task_id: str, calls: int) -> dict[str, Stat]:
    latencies: dict[str, list[float]] = {name: [] for name in ["jct_queue_stats (MCP)", *pages(task_id)]}
    async with AsyncExitStack() as stack:
        client = await stack.enter_async_context(Client(f"{base_url}/mcp", mode="legacy"))
        http = await stack.enter_async_context(httpx2.AsyncClient(base_url=base_url, timeout=120))
        for n in range(-3, calls):
            started = time.perf_counter()
            await tool(client, "jct_queue_stats", {})
            if n >= 0:
                latencies["jct_queue_stats (MCP)"].append(time.perf_counter() - started)
            for name, path in pages(task_id).items():
                started = time.perf_counter()
                response = await http.get(path)
                assert response.status_code == 200, (path, response.status_code, response.text[:500])
                if n >= 0:
                    latencies[name].append(time.perf_counter() - started)
    stats = {}
    for name, values in latencies.items():
        values.sort()
        stats[name] = Stat(_quantile(values, 0.5), _quantile(values, 0.99), len(values))
    return stats


def table(dialect: str, size: int, stats: dict[str, Stat]) -> str:
    floor = stats["jct_queue_stats (MCP)"].p50_ms
    lines = [
        f"{dialect}, {size:,} tasks, {next(iter(stats.values())).calls} calls per row (p50 / p99 ms; x: p50 over "
        f"jct_queue_stats's p50, goal at most {GOAL:g}x)",
        "",
        "| call | p50 ms | p99 ms | x queue_stats |",
        "|---|---|---|---|",
    ]
    for name, stat in stats.items():
        lines.append(f"| {name} | {stat.p50_ms:.1f} | {stat.p99_ms:.1f} | {stat.p50_ms / floor:.2f} |")
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> None:
    reports = []
    with tempfile.TemporaryDirectory(prefix="jct-dashboard-") as tmp_name:
        tmp = Path(tmp_name)
        for dialect in args.dialects:
            async with fresh_database(dialect, args.postgres_url, tmp, f"ui{args.size}") as url:
                loaded = await load(url, args.size)
                print(f"{dialect}: loaded {args.size:,} tasks in {loaded.seconds:.1f}s", file=sys.stderr)
                async with serving(url, tmp / f"home-{dialect}") as base_url:
                    stats = await measure(base_url, loaded.task_ids[0], args.calls)
            reports.append(table(dialect, args.size, stats))
            print(reports[-1] + "\n")
    if args.write:
        header = "# Dashboard pages at scale\n\nWritten by `python bench/dashboard.py --write` (see its docstring).\n\n"
        (Path(__file__).parent / "DASHBOARD.md").write_text(header + "\n\n".join(reports) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="tasks to bulk-load")
    parser.add_argument("--calls", type=int, default=50, help="timed fetches per page")
    parser.add_argument("--write", action="store_true", help="also write bench/DASHBOARD.md")
    add_database_arguments(parser)
    parser.set_defaults(dialects=["postgresql"])
    args = parser.parse_args()
    check_dialects(parser, args)
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
