"""Claims per second through the service layer, beside the floor: the same claim as one raw SQL statement.

For each dialect (SQLite in a temp file; PostgreSQL in a throwaway database) and each worker count, the
queue is bulk-loaded with `--claims` tasks (each with its issue, context packet and constraint snapshot,
as `jct_enqueue_task` makes them) and drained by that many asyncio workers sharing one Core:

  service  `queue.claim_next` (the claim statement, the run, the issue, the audit rows, the briefing)
  raw      one `UPDATE tasks ... WHERE id = (SELECT ... LIMIT 1 [FOR UPDATE SKIP LOCKED]) RETURNING id`
           inside `db.write()`, on the same engine and pool

The ratio is service cost / raw cost (raw claims/s divided by service claims/s): 1.0 means the service
layer adds nothing; the goal is at most 2.0.

    python bench/claims.py                      # both dialects, 1/10/50 workers, 2,000 claims per cell
    python bench/claims.py --claims 500 --dialects sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import insert, text
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import add_database_arguments, admin, check_dialects

from server.config import Settings, async_database_url
from server.core.claims import queue
from server.core.models import Actor
from server.core.service import Core
from server.db import tables as t
from server.db.engine import Database
from server.db.migrate import upgrade

CHUNK = 500  # rows per multi-row INSERT: well under SQLite's and asyncpg's bound-parameter limits
# Children before parents, for emptying the tables between measurements.
TABLES = (
    "audit_log",
    "review_decisions",
    "evidence_packs",
    "artifacts",
    "run_events",
    "runs",
    "tasks",
    "context_packets",
    "constraint_snapshots",
    "issue_doctrine",
    "issues",
)

RAW_SQLITE = """
UPDATE tasks SET status = 'running', claimed_at = :now, active_run_id = :run_id
WHERE id = (SELECT id FROM tasks WHERE status = 'queued' ORDER BY priority, queued_at, id LIMIT 1)
  AND status = 'queued'
RETURNING id
"""

RAW_POSTGRES = """
UPDATE tasks SET status = 'running', claimed_at = now(), active_run_id = :run_id
WHERE id = (SELECT id FROM tasks WHERE status = 'queued' ORDER BY priority, queued_at, id LIMIT 1
            FOR UPDATE SKIP LOCKED)
  AND status = 'queued'
RETURNING id
"""


# --- the data ----------------------------------------------------------------------------


def task_rows(n: int) -> tuple[list[dict[str, Any]], ...]:
    """n tasks as enqueue makes them, with mixed priorities and increasing ages."""
    rng = random.Random(n)
    start = datetime.now(UTC) - timedelta(days=1)
    issues, packets, snapshots, tasks = [], [], [], []
    for i in range(n):
        issue_id, snapshot_id, task_id = str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4())
        priority = f"P{rng.randrange(5)}"
        at = start + timedelta(milliseconds=i)
        criteria = ["Email is validated", "Tests pass"]
        issues.append(
            {
                "id": issue_id,
                "title": f"Task {i}",
                "type": "code_change",
                "priority": priority,
                "status": "ready",
                "acceptance_criteria": criteria,
                "created_at": at,
                "updated_at": at,
            }
        )
        packets.append(
            {
                "id": str(uuid.uuid4()),
                "issue_id": issue_id,
                "version": 1,
                "summary": "The endpoint accepts anything.",
                "prior_art": [],
                "files_of_interest": ["src"],
                "acceptance_criteria": criteria,
                "data": {},
                "review_feedback": None,
                "created_at": at,
            }
        )
        snapshots.append(
            {
                "id": snapshot_id,
                "issue_id": issue_id,
                "scope": "run",
                "time_budget_seconds": 3600,
                "allow_network": False,
                "allow_secrets": False,
                "allowed_paths": ["src"],
                "created_at": at,
            }
        )
        tasks.append(
            {
                "id": task_id,
                "operation": "code_change",
                "objective": f"Task {i}: add input validation",
                "target_repo": "myorg/api",
                "target_ref": "main",
                "target_path": "src",
                "priority": priority,
                "time_budget_seconds": 3600,
                "status": "queued",
                "attempts": 0,
                "max_attempts": 3,
                "idempotency_key": None,
                "request_hash": None,
                "trace_id": str(uuid.uuid4()),
                "issue_id": issue_id,
                "constraint_snapshot_id": snapshot_id,
                "requested_by": "bench",
                "queued_at": at,
            }
        )
    return issues, packets, snapshots, tasks


async def reload(db: Database, n: int) -> None:
    """Empty every table, then bulk-load n queued tasks with multi-row INSERTs."""
    async with db.write() as conn:
        if db.is_sqlite:
            for name in TABLES:
                await conn.execute(text(f"DELETE FROM {name}"))
        else:
            await conn.execute(text(f"TRUNCATE {', '.join(TABLES)}"))
        for table, rows in zip(
            (t.issues, t.context_packets, t.constraint_snapshots, t.tasks), task_rows(n), strict=True
        ):
            for i in range(0, len(rows), CHUNK):
                await conn.execute(insert(table).values(rows[i : i + CHUNK]))
    if not db.is_sqlite:
        async with db.engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text("VACUUM ANALYZE"))


# --- the two ways to claim ---------------------------------------------------------------

Claimer = Callable[[Core, Actor], Awaitable[bool]]


async def service_claim(core: Core, actor: Actor) -> bool:
    return (await queue.claim_next(core, actor)).claimed


async def raw_claim(core: Core, actor: Actor) -> bool:
    statement = text(RAW_SQLITE if core.db.is_sqlite else RAW_POSTGRES)
    params: dict[str, Any] = {"run_id": str(uuid.uuid4())}
    if core.db.is_sqlite:
        params["now"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    async with core.db.write() as conn:
        return (await conn.execute(statement, params)).first() is not None


async def drain(core: Core, claim: Claimer, workers: int, claims: int) -> float:
    """Load `claims` tasks, let `workers` asyncio tasks claim them all; seconds taken by the claiming."""
    await reload(core.db, claims)
    remaining = claims

    async def worker(n: int) -> None:
        nonlocal remaining
        actor = Actor(actor_id=f"bench-{n}", name=f"bench-{n}", session=f"bench-{n}")
        while remaining > 0:
            remaining -= 1
            if not await claim(core, actor):
                raise RuntimeError("the queue ran dry before the claims were done")

    started = time.perf_counter()
    await asyncio.gather(*(worker(n) for n in range(workers)))
    return time.perf_counter() - started


# --- databases ---------------------------------------------------------------------------


async def bench_dialect(dialect: str, url: str, args: argparse.Namespace, home: Path) -> list[dict[str, Any]]:
    settings = Settings(_env_file=None, database_url=url, home=home, trace_root=home / "traces")
    rows = []
    for workers in args.workers:
        core = Core.build(settings)  # a fresh engine per cell: the default pool a server would run with
        try:
            await upgrade(core.db)
            for claim in (service_claim, raw_claim):  # warm the pool and the statement caches
                await drain(core, claim, workers, min(200, args.claims))
            service, raw = [], []
            for _ in range(args.repeat):  # interleaved, so drift on a noisy machine hits both alike
                service.append(await drain(core, service_claim, workers, args.claims))
                raw.append(await drain(core, raw_claim, workers, args.claims))
        finally:
            await core.db.dispose()
        service_rate = args.claims / statistics.median(service)
        raw_rate = args.claims / statistics.median(raw)
        rows.append(
            {
                "dialect": dialect,
                "workers": workers,
                "service": service_rate,
                "raw": raw_rate,
                "ratio": raw_rate / service_rate,
            }
        )
        print(f"  {dialect:10} {workers:3} workers: service {service_rate:8.0f}/s, raw {raw_rate:8.0f}/s", flush=True)
    return rows


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="jct-bench-") as tmp:
        home = Path(tmp)
        if "sqlite" in args.dialects:
            rows += await bench_dialect("sqlite", f"sqlite+aiosqlite:///{home / 'bench.db'}", args, home)
        if "postgresql" in args.dialects:
            base = make_url(async_database_url(args.postgres_url))
            name = f"jct_bench_{uuid.uuid4().hex[:10]}"
            admin_url = base.render_as_string(hide_password=False)
            await admin(admin_url, f"CREATE DATABASE {name}")
            try:
                url = base.set(database=name).render_as_string(hide_password=False)
                rows += await bench_dialect("postgresql", url, args, home)
            finally:
                await admin(admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| dialect | workers | service claims/s | raw claims/s | ratio (service cost / raw cost) |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['dialect']} | {row['workers']} | {row['service']:,.0f} | {row['raw']:,.0f} | {row['ratio']:.2f} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--claims", type=int, default=2000, help="claims per measurement (default 2000)")
    parser.add_argument(
        "--workers",
        type=lambda s: [int(n) for n in s.split(",")],
        default=[1, 10, 50],
        help="comma-separated worker counts (default 1,10,50)",
    )
    add_database_arguments(parser)
    parser.add_argument("--repeat", type=int, default=1, help="measurements per cell; the median is shown (default 1)")
    args = parser.parse_args(argv)
    check_dialects(parser, args)
    if args.claims < 1 or args.repeat < 1 or any(w < 1 for w in args.workers):
        parser.error("--claims, --repeat and --workers must be positive")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(f"# claims benchmark: {args.claims} claims per cell, median of {args.repeat}", flush=True)
    print(f"# {datetime.now(UTC):%Y-%m-%d}, nproc {os.cpu_count()}, Python {platform.python_version()}", flush=True)
    rows = asyncio.run(run(args))
    print()
    print(table(rows))


if __name__ == "__main__":
    main()
