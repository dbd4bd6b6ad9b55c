"""Briefing versions: a task's briefing changes by a new version (a context packet), never in place.

A new version copies the latest one's parts, replaces those a revision gives (revise.py), and keeps the review
feedback so far; a review that asks for changes, an operator's requeue with feedback, or the review policy sending
a run back to work (server/core/review/policy.py) adds one round after it.
The agent reads the latest version (jct_get_context); the prover checks the criteria of the one in force.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from functools import partial
from typing import Any

from sqlalchemy import ColumnElement
from sqlalchemy.ext.asyncio import AsyncConnection

from server.core.models import Actor, new_id
from server.db import changes as fenced
from server.db import queries


def next_packet(
    latest: Mapping[str, Any],
    ts: ColumnElement[datetime],
    *,
    changes: Mapping[str, Any] | None = None,
    feedback: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The version after `latest`: its parts with `changes` over them, and `feedback` after its review feedback."""
    earlier = list(latest["review_feedback"] or [])
    packet = {
        "id": new_id(),
        "issue_id": latest["issue_id"],
        "version": int(latest["version"]) + 1,
        "summary": latest["summary"],
        "prior_art": latest["prior_art"],
        "files_of_interest": latest["files_of_interest"],
        "acceptance_criteria": latest["acceptance_criteria"],
        "data": latest["data"],
        "review_feedback": [*earlier, dict(feedback)] if feedback is not None else latest["review_feedback"],
        "created_at": ts,
    }
    return packet | dict(changes or {})


async def new_version(
    conn: AsyncConnection,
    issue_id: str,
    ts: ColumnElement[datetime],
    *,
    changes: dict[str, Any] | None = None,
    feedback: dict[str, Any] | None = None,
) -> int:
    """The issue's next briefing version (next_packet). Its number (a concurrent new version makes the insert
    fail on the version's key)."""
    latest = await queries.latest_context_packet(conn, issue_id)
    assert latest is not None  # every issue starts with version 1
    packet = next_packet(dict(latest), ts, changes=changes, feedback=feedback)
    await queries.insert_context_packet(conn, packet)
    return int(packet["version"])


def feedback_round(
    *, decision: str, reason: str, reviewer: Actor, run_id: str | None, verdict: str, name: str = ""
) -> dict[str, Any]:
    """One round of feedback as a briefing version keeps it (new_version's `feedback`, or feedback_write): a
    review's needs_changes, an operator's requeue (`decision` "requeued"), the merge queue or the review policy
    sending work back. `name`: the one a reviewer gave, else the actor's. results.ReviewFeedback reads it back."""
    return {
        "decision": decision,
        "reason": reason,
        "reviewer": reviewer.actor_id,  # the principal; the name it chose is only self-reported
        "reviewer_name": name or reviewer.name or reviewer.actor_id,
        "run_id": run_id,
        "verdict": verdict,
        "at": datetime.now(UTC).isoformat(),
    }


def feedback_write(issue_id: str, ts: ColumnElement[datetime], entry: Mapping[str, Any]) -> fenced.NewVersion:
    """The same new version as a write of a fenced change (server/db/changes/): a completion sent back."""
    return fenced.NewVersion(issue_id, partial(next_packet, ts=ts, feedback=entry))
