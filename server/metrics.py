"""Prometheus metrics for one server process, served at /metrics.

Each app owns its registry (tests build many apps in one process). Counters and histograms move as
work happens in this process; the queue gauges are read from the database at scrape time, so every
replica reports the same whole-queue figures (aggregate them with max(), not sum()).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST
# Tool calls run from ~1 ms (a fence renewal) to seconds (a complete_task with a large diff).
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.tool_calls = Counter(
            "jct_tool_calls", "Tool calls by tool and outcome (ok, or the error code).", ["tool", "outcome"], registry=r
        )
        self.tool_seconds = Histogram(
            "jct_tool_call_duration_seconds", "Tool call latency in the server.", ["tool"], buckets=LATENCY_BUCKETS,
            registry=r,
        )  # fmt: skip
        self.tasks = Gauge("jct_tasks", "Tasks in the queue by status (whole database).", ["status"], registry=r)
        self.leases_overdue = Gauge(
            "jct_leases_overdue", "Running claims whose lease has expired and await the sweeper.", registry=r
        )
        self.pending_reviews = Gauge("jct_pending_reviews", "Completions awaiting a reviewer.", registry=r)
        self.oldest_queued_age = Gauge(
            "jct_oldest_queued_age_seconds", "Age of the oldest queued task (0 when none is queued).", registry=r
        )
        self.leases_expired = Counter(
            "jct_leases_expired", "Leases expired by this process's sweeper (tasks requeued or failed).", registry=r
        )
        self.sessions = Gauge("jct_open_sessions", "Open MCP sessions by transport.", ["transport"], registry=r)
        self.subscribers = Gauge(
            "jct_subscribed_sessions", "Sessions holding resources/subscribe subscriptions.", registry=r
        )
        self.waiting_claims = Gauge(
            "jct_waiting_claims", "jct_claim_next calls waiting for work in this process.", registry=r
        )
        self.waiter_turns = Counter(
            "jct_waiting_claim_turns",
            "Turns of woken waiting claims: a claim tried, or skipped (one with the same filters found nothing).",
            ["outcome"],
            registry=r,
        )
        self._turns_counted = {"tried": 0, "skipped": 0}
        self.notifications = Counter(
            "jct_notifications", "Notifications sent to legacy subscribers by method and outcome (sent, dropped).",
            ["method", "outcome"], registry=r,
        )  # fmt: skip
        self.fanout_seconds = Histogram(
            "jct_notification_fanout_seconds",
            "From a change reaching this process's feed to the notification being written to a subscriber.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )

    @contextmanager
    def tool_call(self, tool: str) -> Iterator[Callable[[str], None]]:
        """Time a tool call; the body reports its outcome through the yielded function."""
        outcome = ["internal_error"]
        start = time.perf_counter()
        try:
            yield lambda value: outcome.__setitem__(0, value)
        finally:
            self.tool_seconds.labels(tool).observe(time.perf_counter() - start)
            self.tool_calls.labels(tool, outcome[0]).inc()

    def count_turns(self, tried: int, skipped: int) -> None:
        """Bring the turn counters up to the totals the waiters keep (server/core/claims/waiting.py)."""
        for outcome, total in (("tried", tried), ("skipped", skipped)):
            self.waiter_turns.labels(outcome).inc(max(0, total - self._turns_counted[outcome]))
            self._turns_counted[outcome] = max(total, self._turns_counted[outcome])

    def render(self) -> bytes:
        return generate_latest(self.registry)
