"""Telemetry an agent reports about its run (tokens, cost, time): the one rule for checking it, summing it on
the run, and what it adds to the queue's totals.

Each report (jct_report_progress mid-run, jct_complete_task at the end) carries what was spent since the
agent's previous report. The run keeps the sums: numbers are added key by key, any other value is replaced
by the latest one. The four NUMBERS are also added to the queue's totals (jct_queue_stats)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from server.core.text import storable
from server.errors import invalid

NUMBERS = ("tokens_input", "tokens_output", "cost_usd", "duration_seconds")
MAX_CHARS = 16_000


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check(telemetry: Any) -> dict[str, Any] | None:
    """One report, refused whole (INVALID_ARGUMENT) if a known number is negative, not a number, NaN or
    infinite, or if anything in it cannot be stored."""
    if telemetry is None:
        return None
    if not isinstance(telemetry, dict):
        raise invalid("telemetry must be an object.", 'Send e.g. {"tokens_input": 1200, "cost_usd": 0.02}.')
    storable(telemetry, "telemetry")
    for key in NUMBERS:
        value = telemetry.get(key)
        if value is not None and (not _is_number(value) or value < 0):
            raise invalid(f"telemetry.{key} must be a non-negative number.", f"Send {key} as a number, or omit it.")
    if len(json.dumps(telemetry)) > MAX_CHARS:
        raise invalid("telemetry is larger than 16,000 characters.", "Keep telemetry to a few numbers.")
    return telemetry


def add(so_far: Mapping[str, Any] | None, more: Mapping[str, Any]) -> dict[str, Any]:
    """The run's telemetry after one more report: numbers summed, anything else replaced."""
    total = dict(so_far or {})
    for key, value in more.items():
        before = total.get(key)
        total[key] = before + value if _is_number(before) and _is_number(value) else value
    if len(json.dumps(total)) > MAX_CHARS:
        raise invalid(
            "The run's telemetry would pass 16,000 characters with this report.",
            "Report only numbers (tokens_input, tokens_output, cost_usd, duration_seconds), or omit telemetry.",
        )
    return total


def totals_rows(more: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What one report adds to the queue's totals: a row per known number (server/db/bookkeeping.py
    telemetry_deltas)."""
    return [{"key": key, "amount": float(more[key])} for key in NUMBERS if _is_number(more.get(key)) and more[key]]


def shown_totals(sums: Mapping[str, float]) -> dict[str, float]:
    """The queue's totals as jct_queue_stats shows them: every known number, 0 when none was reported."""
    return {key: sums.get(key, 0.0) for key in NUMBERS}


def _amount(telemetry: Mapping[str, Any] | None, key: str) -> float:
    value: Any = (telemetry or {}).get(key)
    return float(value) if _is_number(value) else 0.0


def run_columns(total: Mapping[str, Any] | None) -> dict[str, float]:
    """The run's summed telemetry as the columns costs are summed from in SQL (server/db/tables.py runs)."""
    return {
        "tokens": _amount(total, "tokens_input") + _amount(total, "tokens_output"),
        "cost_usd": _amount(total, "cost_usd"),
        "duration_seconds": _amount(total, "duration_seconds"),
    }


def spend(more: Mapping[str, Any] | None) -> tuple[float, float]:
    """What one report adds to its mission's spending, the sums its budget is checked against: (tokens, cost)."""
    columns = run_columns(more)
    return columns["tokens"], columns["cost_usd"]
