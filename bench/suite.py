"""The whole benchmark suite in one run: every workload beside its baselines, then bench/RESULTS.md with charts.

    python bench/suite.py                   # everything (what `make bench` runs; about 25 minutes on 2 cores)
    python bench/suite.py --quick           # every workload at small sizes: a smoke test of the harness
    python bench/suite.py --only sessions,artifacts

Workloads (each module's docstring says exactly what it measures):

  protocol     bench/protocol.py: jct_claim_next, jct_report_artifact (1 KiB), jct_complete_task beside
               `echo` at 1 and 10 clients, SQLite and PostgreSQL (target: cost at most 1.5x echo's)
  contention   bench/contention.py: 10/50/100 agents draining 2,000 tasks through the whole lifecycle,
               on SQLite, PostgreSQL and two servers sharing PostgreSQL, beside echo and the raw claim
               statement; double claims and lost tasks checked in the database; server CPU per process
  scale        bench/scale.py: p50/p99 of the hot calls with 1k, 100k and 1M tasks loaded; PostgreSQL
               plans (EXPLAIN ANALYZE) at 1M (target: p50 at 1M within 1.5x of p50 at 1k)
  sessions     bench/sessions.py: 500 legacy streamable HTTP sessions from 4 client processes: server
               memory per idle and per subscribed session, notification fan-out p50/p99
  artifacts    bench/artifacts.py: 1 KiB, 100 KiB, 1 MiB artifacts from 10 agents at once beside `sink`
  integrate    bench/integrate.py: a one-file change replayed into 10,000 files and the target moved, beside
               the bare git commands (target: at most 1.5x)
  profile      (with --profile) bench/profiling.py: pyinstrument's flat report of a server through a drain

Every server is its own process (`create_app` plus the floor tools, or `jct serve`); every database is
fresh (a temp SQLite file, or a PostgreSQL database created on JCT_BENCH_POSTGRES_URL's server and
dropped after). Results: bench/RESULTS.md, charts and raw JSON under bench/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import artifacts
import contention
import integrate
import profiling
import protocol
import report
import scale
import sessions
from common import DEFAULT_PG, fresh_database, raise_nofile, scalar

# Quickest first: an interrupted run still leaves RESULTS.md with what finished (it is rewritten after each).
WORKLOADS = ("integrate", "sessions", "artifacts", "protocol", "scale", "contention")
OPTIONAL = ("profile",)  # not in the default run: add with --profile (about a minute more)
BENCH = Path(__file__).resolve().parent


def log(message: str) -> None:
    print(message, flush=True)


def machine(postgres_url: str, pg_version: str) -> dict[str, Any]:
    with open("/proc/meminfo") as meminfo:
        total = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:"))
    cpu = ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "")
    except OSError:
        pass
    return {
        "date": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "cores": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": total / 1024 / 1024,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "postgresql": pg_version,
        "mcp": version("mcp"),
        "platform": platform.platform(),
        "load_before": os.getloadavg(),
    }


# --- the workloads ---------------------------------------------------------------------------------


async def run_protocol(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dialect in ("sqlite", "postgresql"):
        cells = await protocol.run(dialect, args.protocol_levels, args.protocol_calls, "legacy", home, args.pg, log)
        out[dialect] = {
            str(level): {
                name: {
                    "calls_per_s": cell.rate,
                    "p50_ms": cell.quantile(0.5),
                    "p99_ms": cell.quantile(0.99),
                    "calls": len(cell.latencies),
                    "server_cpu_ms": cell.server_cpu_ms,
                }
                for name, cell in by_call.items()
            }
            for level, by_call in cells.items()
        }
    return out


async def run_contention(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    cells = await contention.run(list(contention.CONFIGS), args.agents, args.tasks, args.echo_lifecycles, args.pg, log)
    return {"tasks": args.tasks, "echo_lifecycles": args.echo_lifecycles, "cells": [c.as_dict() for c in cells]}


async def run_scale(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"sizes": args.sizes, "calls": args.scale_calls, "dialects": {}}
    for dialect in args.scale_dialects:
        by_size: dict[str, Any] = {}
        for n in args.sizes:
            started = time.perf_counter()
            async with fresh_database(dialect, home / "scale", args.pg) as url:
                loaded = await scale.load(url, n)
                async with scale.serving(url, home / f"scale-{dialect}-{n}") as base_url:
                    stats = await scale.measure(
                        base_url, calls=args.scale_calls, task_ids=loaded.task_ids, mission_ids=loaded.mission_ids
                    )
                entry: dict[str, Any] = {
                    "load_seconds": loaded.seconds,
                    "audit_rows": loaded.audit_rows,
                    "missions": loaded.missions,
                    "active_missions": len(loaded.mission_ids),
                    "blocked": loaded.blocked,
                    "stats": {name: {"p50_ms": st.p50_ms, "p99_ms": st.p99_ms} for name, st in stats.items()},
                }
                if dialect == "postgresql" and n == max(args.sizes):
                    try:
                        plans = await scale.explain(
                            url,
                            task_id=loaded.task_ids[0] if loaded.task_ids else None,
                            mission_id=loaded.mission_ids[0] if loaded.mission_ids else None,
                        )
                    except Exception as exc:  # the plans are a report, not a gate: keep the run going
                        entry["plans_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
                        log(f"  scale: EXPLAIN failed: {entry['plans_error']}")
                    else:
                        entry["plans"] = [
                            {"name": p.name, "sql": p.sql, "plan": p.plan, "scans": p.scans, "full_scans": p.full_scans}
                            for p in plans
                        ]
                if dialect == "sqlite":
                    Path(url.split("///", 1)[1]).unlink(missing_ok=True)
            by_size[str(n)] = entry
            log(
                f"  scale {dialect} {n:,} tasks: loaded in {loaded.seconds:.0f}s, measured "
                f"[{time.perf_counter() - started:.0f}s]"
            )
        out["dialects"][dialect] = by_size
    return out


async def run_sessions(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    result = await sessions.measure(
        args.sessions_dialect, args.sessions, args.session_workers, 5, 2, home / "sessions", args.pg, log
    )
    return result.as_dict()


async def run_artifacts(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    return {"rows": await artifacts.run(["sqlite", "postgresql"], 10, args.pg, log)}


async def run_integrate(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    result = await integrate.measure(home / "integrate", args.integrate_files, args.integrate_rounds, log)
    for cell in result["variants"].values():  # the medians are the figures; every sample: integrate.py --json
        cell.pop("jct_samples_ms")
        cell.pop("bare_samples_ms")
    return result


async def run_profile(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    return await profiling.run("postgresql", 10, 60 if args.quick else 300, home, args.pg, log)


RUNNERS: dict[str, Callable[[argparse.Namespace, Path], Awaitable[dict[str, Any]]]] = {
    "protocol": run_protocol,
    "contention": run_contention,
    "scale": run_scale,
    "sessions": run_sessions,
    "artifacts": run_artifacts,
    "integrate": run_integrate,
    "profile": run_profile,
}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    pg_version = str(await scalar(args.pg, "SHOW server_version"))
    results: dict[str, Any] = {"machine": machine(args.pg, pg_version), "timings": {}, "args": {}}
    results["args"] = {k: v for k, v in vars(args).items() if k != "pg"}
    suite_started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="jct-bench-suite-") as tmp:
        for name in args.only:
            log(f"== {name}")
            started = time.perf_counter()
            results.setdefault("load", {})[name] = {"before": os.getloadavg()}
            try:
                results[name] = await RUNNERS[name](args, Path(tmp))
            except Exception as exc:  # one broken workload must not cost the others' figures
                results.setdefault("errors", {})[name] = f"{type(exc).__name__}: {exc}"
                log(f"== {name} FAILED: {results['errors'][name]}")
                traceback.print_exc()
            results["timings"][name] = time.perf_counter() - started
            results["load"][name]["after"] = os.getloadavg()
            log(f"== {name}: {results['timings'][name]:.0f}s")
            results["timings"]["total"] = time.perf_counter() - suite_started
            results["machine"]["load_after"] = os.getloadavg()
            save(results, args)
    return results


def save(results: dict[str, Any], args: argparse.Namespace) -> None:
    (args.results_dir / "results.json").write_text(json.dumps(results, indent=1, default=str))
    report.write(results, args.out, args.results_dir)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes everywhere (checks the harness)")
    parser.add_argument(
        "--only", default=",".join(WORKLOADS), help=f"comma-separated: {', '.join((*WORKLOADS, *OPTIONAL))}"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also profile a server (pyinstrument) through a 300-task drain; its top frames go in RESULTS.md",
    )
    parser.add_argument("--out", type=Path, default=BENCH / "RESULTS.md")
    parser.add_argument("--results-dir", type=Path, default=BENCH / "results")
    parser.add_argument(
        "--postgres-url",
        dest="pg",
        default=os.environ.get("JCT_BENCH_POSTGRES_URL", DEFAULT_PG),
        help="server for the throwaway databases (env JCT_BENCH_POSTGRES_URL)",
    )
    parser.add_argument(
        "--scale-dialects",
        default="postgresql",
        help="dialects for the scale workload (default postgresql: a 1M-task SQLite load adds minutes)",
    )
    parser.add_argument(
        "--from-json", type=Path, help="only write RESULTS.md and the charts from a results.json of an earlier run"
    )
    args = parser.parse_args(argv)
    args.only = [w.strip() for w in args.only.split(",") if w.strip()]
    if args.profile and "profile" not in args.only:
        args.only.append("profile")
    if unknown := set(args.only) - set(RUNNERS):
        parser.error(f"unknown workloads {sorted(unknown)}; choose from {', '.join(RUNNERS)}")
    quick = args.quick
    args.protocol_levels = [1, 10]
    args.protocol_calls = 60 if quick else 300
    args.agents = [2, 5] if quick else [10, 50, 100]
    args.tasks = 40 if quick else 2000
    args.echo_lifecycles = 20 if quick else 250
    args.sizes = [1000, 5000] if quick else [1000, 100_000, 1_000_000]
    args.scale_calls = 20 if quick else 100
    args.scale_dialects = args.scale_dialects.split(",")
    args.sessions = 40 if quick else 500
    args.session_workers = 2 if quick else 4
    args.sessions_dialect = "postgresql"
    args.integrate_files = 1000 if quick else 10_000
    args.integrate_rounds = 10 if quick else 150
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    warnings.filterwarnings("ignore", message="resources/(un)?subscribe is removed")
    raise_nofile()
    args.results_dir.mkdir(parents=True, exist_ok=True)
    results = json.loads(args.from_json.read_text()) if args.from_json else anyio.run(main_async, args)
    save(results, args)
    total = results["timings"].get("total", 0.0)
    timings = ", ".join(f"{k} {v:.0f}s" for k, v in results["timings"].items() if k != "total")
    log(f"\nbench: {timings}; total {total / 60:.1f} min")
    log(f"bench: results in {args.out} (charts and results.json in {args.results_dir})")


if __name__ == "__main__":
    main()
