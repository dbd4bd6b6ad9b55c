"""Artifacts: 1 KiB, 100 KiB and 1 MiB artifacts reported by 10 agents at once, beside `sink` of the same text.

One server (bench/echo_server.py) on a fresh database per dialect; `--agents` legacy streamable HTTP
clients, each holding one claimed task. For each size, every agent reports its share of artifacts
(`jct_report_artifact`, artifact_type log, the content inline), all agents at once; then the same
number of `sink` calls carrying the same text (the protocol floor for that payload: a tool that takes
the text and returns its length, on the same server). Throughput in artifacts/s and MiB/s; latency p50/p99.

    python bench/artifacts.py --dialects sqlite
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DEFAULT_PG, fresh_database, quantile, servers, tool

KIB = 1024
# size in bytes -> artifacts per agent (fewer of the big ones; each cell still has every agent busy at once)
SIZES = {KIB: 30, 100 * KIB: 10, 1024 * KIB: 3}


def payload(size: int) -> str:
    line = "bench artifact log line 0123456789 abcdefghijklmnopqrstuvwxyz\n"
    return (line * (size // len(line) + 1))[:size]


async def timed_phase(clients: list[Client], per_agent: int, call: Any) -> tuple[float, list[float]]:
    latencies: list[float] = []

    async def agent(index: int) -> None:
        for n in range(per_agent):
            started = time.perf_counter()
            await call(index, n)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for index in range(len(clients)):
            tg.start_soon(agent, index)
    return time.perf_counter() - started, latencies


async def measure(dialect: str, agents: int, home: Path, pg: str, log: Any = print) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    async with fresh_database(dialect, home, pg) as url, servers(url, home / dialect, 1) as procs:
        base = procs[0][1]
        async with AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(Client(f"{base}/mcp", mode="legacy")) for _ in range(agents)]
            tasks = []
            for n, client in enumerate(clients):
                enqueued = await tool(
                    client,
                    "jct_enqueue_task",
                    {"objective": f"Artifact bench {n}", "operation": "analysis", "target_repo": "bench/repo"},
                )
                await tool(client, "jct_claim_task", {"task_id": enqueued["task_id"]})
                tasks.append(enqueued["task_id"])
                await tool(client, "echo", {"text": "warm"})
            for size, per_agent in SIZES.items():
                text = payload(size)

                async def report(i: int, n: int, text: str = text, size: int = size) -> None:
                    args = {"task_id": tasks[i], "title": f"log {size} {n}", "artifact_type": "log", "content": text}
                    await tool(clients[i], "jct_report_artifact", args)

                async def sink(i: int, _n: int, text: str = text) -> None:
                    await tool(clients[i], "sink", {"text": text})

                await report(0, -1)  # warm this size's path once
                wall, latencies = await timed_phase(clients, per_agent, report)
                sink_wall, sink_latencies = await timed_phase(clients, per_agent, sink)
                count = per_agent * agents
                row = {
                    "dialect": dialect,
                    "size": size,
                    "agents": agents,
                    "count": count,
                    "per_s": count / wall,
                    "mib_per_s": count * size / wall / (1024 * 1024),
                    "p50_ms": quantile(latencies, 0.5) * 1000,
                    "p99_ms": quantile(latencies, 0.99) * 1000,
                    "sink_per_s": count / sink_wall,
                    "sink_p50_ms": quantile(sink_latencies, 0.5) * 1000,
                    "sink_p99_ms": quantile(sink_latencies, 0.99) * 1000,
                }
                rows.append(row)
                log(
                    f"    artifacts {dialect:10} {size // KIB:5} KiB: {row['per_s']:6.1f}/s "
                    f"({row['mib_per_s']:.1f} MiB/s), p50 {row['p50_ms']:.0f} ms, p99 {row['p99_ms']:.0f} ms; "
                    f"sink {row['sink_per_s']:.1f}/s"
                )
    return rows


async def run(dialects: list[str], agents: int, pg: str, log: Any = print) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="jct-bench-artifacts-") as tmp:
        for dialect in dialects:
            rows += await measure(dialect, agents, Path(tmp), pg, log)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dialects", default="sqlite,postgresql")
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--postgres-url", default=DEFAULT_PG)
    args = parser.parse_args()
    anyio.run(run, args.dialects.split(","), args.agents, args.postgres_url)


if __name__ == "__main__":
    main()
