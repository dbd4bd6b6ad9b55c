"""Sessions: server memory per open session, and notification fan-out latency, with hundreds of sessions.

One `jct serve` in its own process (a fresh database) and `--sessions` legacy streamable HTTP sessions
(the 2025-11-25 `initialize` handshake, as Claude Code speaks), spread over `--workers` client processes
(this file's `worker` mode; each raises its open-files limit), so no one process holds them all:

  idle memory     the server's VmRSS (/proc/<pid>/status) with only the agent's session open, then after
                  each step of opening more sessions (no subscriptions): the curve, and
                  (RSS at all sessions - RSS before) / sessions
  subscribed      every session then subscribes (`resources/subscribe`) to one run's URI and receives one
                  notification (a progress report: proof its GET stream is open); RSS again, per session
  fan-out         the agent completes the run; for each session, the time from the completion call
                  returning until its `notifications/resources/updated` for the URI arrives (CLOCK_MONOTONIC
                  is shared by all processes on one Linux machine); p50/p99/max over sessions, per round.
                  The server's change feed polls every JCT_NOTIFY_INTERVAL_SECONDS (0.25 s by default).

    python bench/sessions.py --sessions 100 --workers 2 --dialect sqlite
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp_types import ResourceUpdatedNotification

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    DEFAULT_PG,
    cpu_seconds,
    fresh_database,
    quantile,
    raise_nofile,
    rss_kib,
    servers,
    tool,
)

from server.core.models import parse_run_id

OPENING = 10  # sessions one worker opens at once
QUIET = 1.0  # after the warm-up notification, before a measured completion (plus a random part of a poll)
POLL_INTERVAL = 0.25
NOTIFIED = 60.0

warnings.filterwarnings("ignore", message="resources/(un)?subscribe is removed")


def now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


# --- the worker process: holds its share of the sessions, driven by commands on stdin ------------


@dataclass
class Subscriber:
    uri: str = ""
    arrivals: list[float] = field(default_factory=list)
    changed: anyio.Event = field(default_factory=anyio.Event)

    async def __call__(self, message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification) and message.params.uri == self.uri:
            self.arrivals.append(now())
            self.changed.set()
            self.changed = anyio.Event()

    def first_after(self, moment: float) -> float | None:
        return next((at for at in self.arrivals if at >= moment), None)


async def worker(url: str) -> None:
    """Commands, one per line: `open N`, `subscribe URI`, `wait SINCE TIMEOUT`, `close`; one JSON reply line each."""
    subscribers: list[Subscriber] = []
    clients: list[Client] = []
    close = anyio.Event()

    def reply(value: Any) -> None:
        sys.stdout.write(json.dumps(value) + "\n")
        sys.stdout.flush()

    async def session(subscriber: Subscriber, ready: anyio.Event) -> None:
        async with Client(url, mode="legacy", message_handler=subscriber) as client:
            clients.append(client)
            ready.set()
            await close.wait()

    async with anyio.create_task_group() as tg:
        while True:
            line = (await anyio.to_thread.run_sync(sys.stdin.readline)).split()
            if not line or line[0] == "close":
                close.set()
                break
            if line[0] == "open":
                for start in range(0, int(line[1]), OPENING):
                    events = []
                    for _ in range(min(OPENING, int(line[1]) - start)):
                        subscribers.append(Subscriber())
                        events.append(anyio.Event())
                        tg.start_soon(session, subscribers[-1], events[-1])
                    for event in events:
                        await event.wait()
                reply(len(clients))
            elif line[0] == "subscribe":
                uri = line[1]

                async def subscribe(client: Client, subscriber: Subscriber, uri: str = uri) -> None:
                    if subscriber.uri:
                        await client.unsubscribe_resource(subscriber.uri)
                    subscriber.uri = uri
                    await client.subscribe_resource(uri)

                for start in range(0, len(clients), OPENING):
                    async with anyio.create_task_group() as group:
                        for client, subscriber in list(zip(clients, subscribers, strict=True))[start : start + OPENING]:
                            group.start_soon(subscribe, client, subscriber)
                reply(len(clients))
            elif line[0] == "wait":
                since, timeout = float(line[1]), float(line[2])
                with anyio.move_on_after(timeout):
                    for subscriber in subscribers:
                        while subscriber.first_after(since) is None:
                            await subscriber.changed.wait()
                reply({"arrivals": [s.first_after(since) for s in subscribers], "cpu": time.process_time()})


# --- the orchestrator -----------------------------------------------------------------------------


class Workers:
    def __init__(self, url: str, count: int) -> None:
        self.processes = [
            subprocess.Popen(
                [sys.executable, __file__, "worker", "--url", url],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                preexec_fn=raise_nofile,
            )
            for _ in range(count)
        ]

    async def ask(self, commands: list[str]) -> list[Any]:
        """Send each worker its command, then read every reply (the workers run in parallel)."""
        for process, command in zip(self.processes, commands, strict=True):
            assert process.stdin is not None
            process.stdin.write(command + "\n")
            process.stdin.flush()
        replies = []
        for process in self.processes:
            assert process.stdout is not None
            line = await anyio.to_thread.run_sync(process.stdout.readline)
            if not line:
                raise RuntimeError(f"a session worker exited ({process.poll()})")
            replies.append(json.loads(line))
        return replies

    async def all(self, command: str) -> list[Any]:
        return await self.ask([command] * len(self.processes))

    def close(self) -> None:
        for process in self.processes:
            try:
                assert process.stdin is not None
                process.stdin.write("close\n")
                process.stdin.flush()
            except (BrokenPipeError, OSError):
                pass
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@dataclass
class Result:
    dialect: str
    sessions: int
    workers: int
    rss_before: int = 0  # KiB, only the agent's session open
    curve: list[tuple[int, int]] = field(default_factory=list)  # (open sessions, server RSS KiB), idle
    rss_subscribed: int = 0
    open_seconds: float = 0.0
    rounds: list[dict[str, Any]] = field(default_factory=list)

    @property
    def idle_per_session(self) -> float:
        return (self.curve[-1][1] - self.rss_before) / self.sessions

    @property
    def subscribed_per_session(self) -> float:
        return (self.rss_subscribed - self.rss_before) / self.sessions

    def as_dict(self) -> dict[str, Any]:
        return {
            "dialect": self.dialect,
            "sessions": self.sessions,
            "workers": self.workers,
            "rss_before_kib": self.rss_before,
            "curve": self.curve,
            "rss_subscribed_kib": self.rss_subscribed,
            "idle_kib_per_session": self.idle_per_session,
            "subscribed_kib_per_session": self.subscribed_per_session,
            "open_seconds": self.open_seconds,
            "rounds": self.rounds,
        }


def shares(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


async def measure(
    dialect: str, sessions: int, workers: int, steps: int, rounds: int, home: Path, pg: str, log: Any = print
) -> Result:
    result = Result(dialect=dialect, sessions=sessions, workers=workers)
    async with (
        fresh_database(dialect, home, pg) as db_url,
        servers(db_url, home / "server", 1, echo=False) as procs,
    ):
        process, url = procs[0][0], f"{procs[0][1]}/mcp"
        pid = process.pid
        async with Client(url, mode="legacy") as agent:
            await tool(agent, "jct_queue_stats", {})
            await anyio.sleep(0.5)
            result.rss_before = rss_kib(pid)
            result.curve.append((0, result.rss_before))
            pool = Workers(url, workers)
            try:
                started = now()
                opened = 0
                for step in shares(sessions, steps):
                    await pool.ask([f"open {n}" for n in shares(step, workers)])
                    opened += step
                    await anyio.sleep(0.5)
                    result.curve.append((opened, rss_kib(pid)))
                    log(f"    {opened} sessions open, server RSS {result.curve[-1][1] / 1024:.1f} MiB")
                result.open_seconds = now() - started
                phase = random.Random(sessions)
                for n in range(rounds):
                    enqueued = await tool(
                        agent,
                        "jct_enqueue_task",
                        {"objective": f"Sessions bench {n}", "operation": "analysis", "target_repo": "bench/repo"},
                    )
                    task_id = enqueued["task_id"]
                    claim = await tool(agent, "jct_claim_task", {"task_id": task_id})
                    uri = f"jct://runs/{parse_run_id(claim['run_id'])[0]}"  # the run, without the claim's key
                    await pool.all(f"subscribe {uri}")
                    for attempt in range(5):  # one notification to every session: its GET stream is open
                        since = now()
                        await tool(agent, "jct_report_progress", {"task_id": task_id, "message": f"warm {attempt}"})
                        replies = await pool.all(f"wait {since} 10")
                        if all(at is not None for reply in replies for at in reply["arrivals"]):
                            break
                    else:
                        raise RuntimeError("some sessions never received the warm-up notification")
                    if n == 0:
                        result.rss_subscribed = rss_kib(pid)
                    await anyio.sleep(QUIET + phase.uniform(0, POLL_INTERVAL))
                    server_cpu = cpu_seconds(pid)
                    marker = now()
                    await tool(agent, "jct_complete_task", {"task_id": task_id, "success": True, "summary": "Done."})
                    returned = now()
                    replies = await pool.all(f"wait {marker} {NOTIFIED}")
                    server_cpu = cpu_seconds(pid) - server_cpu
                    arrivals = [at for reply in replies for at in reply["arrivals"]]
                    latencies = [(at - returned) * 1000 for at in arrivals if at is not None]
                    result.rounds.append(
                        {
                            "p50_ms": quantile(latencies, 0.5),
                            "p99_ms": quantile(latencies, 0.99),
                            "max_ms": max(latencies, default=float("nan")),
                            "min_ms": min(latencies, default=float("nan")),
                            "missing": sum(at is None for at in arrivals),
                            "server_cpu_ms": server_cpu * 1000,
                        }
                    )
                    r = result.rounds[-1]
                    log(
                        f"    round {n + 1}: p50 {r['p50_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms, "
                        f"max {r['max_ms']:.0f} ms, missing {r['missing']}"
                    )
            finally:
                pool.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    work = sub.add_parser("worker", help="(internal) one client process holding sessions")
    work.add_argument("--url", required=True)
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--workers", type=int, default=4, help="client processes")
    parser.add_argument("--steps", type=int, default=5, help="memory samples while opening")
    parser.add_argument("--rounds", type=int, default=2, help="measured completions")
    parser.add_argument("--dialect", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--postgres-url", default=DEFAULT_PG)
    args = parser.parse_args()
    raise_nofile()
    if args.command == "worker":
        anyio.run(worker, args.url)
        return
    with tempfile.TemporaryDirectory(prefix="jct-bench-sessions-") as tmp:
        result = anyio.run(
            measure, args.dialect, args.sessions, args.workers, args.steps, args.rounds, Path(tmp), args.postgres_url
        )
    print(json.dumps(result.as_dict(), indent=1))


if __name__ == "__main__":
    main()
