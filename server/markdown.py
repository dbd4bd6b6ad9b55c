"""Small Markdown helpers for text that lands in a model's context window, shared by the resources and the
prompts: every cut says where the rest is."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

QUEUE_URI = "jct://queue"
PENDING_REVIEWS_URI = "jct://reviews/pending"


def task_uri(task_id: str) -> str:
    return f"jct://tasks/{task_id}"


def issue_uri(issue_id: str) -> str:
    return f"jct://issues/{issue_id}"


def run_uri(run_id: str) -> str:
    return f"jct://runs/{run_id}"


def evidence_uri(pack_id: str) -> str:
    return f"jct://evidence/{pack_id}"


def artifact_uri(artifact_id: str) -> str:
    return f"jct://artifacts/{artifact_id}"


def clip(text: str, limit: int, pointer: str) -> str:
    """`text` if it fits in `limit` characters, else its start and a note naming where the rest is."""
    text = text.strip()
    if len(text) <= limit:
        return text
    return f"{text[:limit].rstrip()}\n… (truncated, {len(text) - limit:,} more characters; {pointer})"


def line(text: str | None, limit: int = 100) -> str:
    """One line for a title or a list entry: whitespace folded, cut with an ellipsis."""
    folded = " ".join((text or "").split())
    return folded if len(folded) <= limit else folded[: limit - 1].rstrip() + "…"


def headline(text: str | None, limit: int = 100) -> str:
    """The first non-blank line, as a title."""
    first = next((part for part in (text or "").splitlines() if part.strip()), "")
    return line(first, limit)


def fit(lines: Sequence[str], budget: int, pointer: str, *, keep: str = "first") -> list[str]:
    """As many whole lines as fit in `budget` characters (the first or the last ones), then a note."""
    total = sum(len(item) + 1 for item in lines)
    if total <= budget:
        return list(lines)
    ordered = list(lines) if keep == "first" else list(reversed(lines))
    kept: list[str] = []
    used = 0
    for item in ordered:
        if used + len(item) + 1 > budget:
            break
        kept.append(item)
        used += len(item) + 1
    if not kept and ordered:  # one oversized entry: show its start rather than nothing
        kept.append(ordered[0][: max(budget - 1, 0)] + "…")
    dropped = len(lines) - len(kept)
    note = f"… ({dropped} more not shown; {pointer})" if dropped else f"… (cut short; {pointer})"
    return [*kept, note] if keep == "first" else [note, *reversed(kept)]


def stamp(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%SZ") if value is not None else "-"


def duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 90:
        return f"{seconds}s"
    if seconds < 5400:
        return f"{round(seconds / 60)}m"
    if seconds < 172_800:
        return f"{seconds // 3600}h {seconds % 3600 // 60}m"
    return f"{seconds // 86400}d {seconds % 86400 // 3600}h"


def who(executor: Mapping[str, Any] | None) -> str:
    """An executor or reviewer record, as a person would say it: name (actor id, client)."""
    if not executor:
        return "unknown"
    name = str(executor.get("name") or executor.get("actor_id") or "unknown")
    extra = [str(executor.get(key) or "") for key in ("actor_id", "client")]
    shown = ", ".join(dict.fromkeys(part for part in extra if part and part != name))
    return f"{name} ({shown})" if shown else name


def compact_json(value: Any, limit: int, pointer: str) -> str:
    text = json.dumps(value, default=str, sort_keys=True, ensure_ascii=False)
    return clip(text, limit, pointer)


def bullets(items: Sequence[str], each: int = 200) -> list[str]:
    return [f"- {line(item, each)}" for item in items]
