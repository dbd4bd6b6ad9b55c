"""Missions as tests plan them: a task of a phase, and jct_create_mission's (or `plan.create_mission`'s)
arguments around phases of such tasks."""

from __future__ import annotations

from typing import Any


def task(key: str, *depends_on: str, **extra: Any) -> dict[str, Any]:
    """A code_change task on myorg/api waiting for the tasks `depends_on` names; `extra` adds or replaces fields."""
    return {
        "key": key,
        "objective": f"Do {key}",
        "operation": "code_change",
        "target_repo": "myorg/api",
        "depends_on": list(depends_on),
        **extra,
    }


def mission(*phases: list[dict[str, Any]], title: str = "Ship it", **extra: Any) -> dict[str, Any]:
    """jct_create_mission's arguments: one phase per list of tasks; `extra`, more arguments (a budget)."""
    return {
        "title": title,
        "goal": "A feature, specified, built and documented",
        "phases": [{"name": f"Phase {n}", "tasks": tasks} for n, tasks in enumerate(phases)],
        **extra,
    }
