"""Where a server's time goes under the contention workload: pyinstrument's flat self-time report.

One bench server (bench/echo_server.py) under `python -m pyinstrument` on a fresh database; `--agents`
agents drain `--tasks` tasks through the whole lifecycle (bench/contention.py's drain); the server is
stopped (SIGTERM: uvicorn shuts down cleanly, then pyinstrument writes its report). The report's top
lines (functions by share of the sampled time spent in their own code, library frames included) are
what bench/RESULTS.md shows. Profiling slows the server, so no figure of this run is a measurement.

    python bench/profiling.py --dialect postgresql --tasks 300
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DEFAULT_PG, bulk_load, fresh_database, servers
from contention import Cell, drain, open_clients

TOP = 35  # lines of the flat report kept


async def run(dialect: str, agents: int, tasks: int, home: Path, pg: str, log: Any = print) -> dict[str, Any]:
    report = home / f"profile-{dialect}.txt"
    async with fresh_database(dialect, home, pg) as url, servers(url, home / "profile", 1, profile=report) as procs:
        await bulk_load(url, tasks)
        async with AsyncExitStack() as stack:
            clients = await open_clients(stack, [f"{procs[0][1]}/mcp"], agents)
            cell = Cell(config=f"{dialect} (profiled)", agents=agents, tasks=tasks)
            await drain(clients, cell)
        # servers() has stopped the server; pyinstrument wrote the report on the way out.
    text = report.read_text() if report.exists() else "(pyinstrument wrote no report)"
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    log(f"  profile {dialect}: {cell.lifecycles} lifecycles profiled, {len(lines)} report lines")
    return {"dialect": dialect, "agents": agents, "tasks": tasks, "top": lines[:TOP]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dialect", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--postgres-url", default=DEFAULT_PG)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jct-bench-profile-") as tmp:
        result = anyio.run(run, args.dialect, args.agents, args.tasks, Path(tmp), args.postgres_url)
    print("\n".join(result["top"]))


if __name__ == "__main__":
    main()
