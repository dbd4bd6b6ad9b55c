"""Quality gates (DESIGN section 12): who may approve a task's work, and how many rounds of changes it gets.

The rule, in one place:

- `review: auto` (and every task outside a workflow): the review policy may approve (JCT_REVIEW_AUTO_APPROVE,
  `prover.auto_approves`); `agent`: never automatically, and any reviewer but the agent that did the work;
  `human`: never automatically, and only a person (a principal whose token has no worker role, or the `jct`
  command line).
- A review that asks for changes is a round, whoever asks (a person, an agent, or the automatic rework). A task
  gets `max_rounds` of them (its step's `gate.max_rounds`, else JCT_MAX_REVIEW_ROUNDS): the last one fails it
  with `quality_gate_exhausted`, which blocks what depends on it. So with `max_rounds: 2` the first review
  asking for changes sends the work back (round 1 of 2), the second ends the task (round 2 of 2).
- An admin may still approve, with an `override_reason` the audit log keeps: past a gate's reviewer rule, or
  the work of a task whose rounds ran out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from server.core.models import Actor
from server.db.records import Review, Step
from server.errors import ErrorCode, JctError
from server.vocab import TaskStatus

EXHAUSTED = "quality_gate_exhausted"


@dataclass(frozen=True)
class Gate:
    """A task's gate with its rounds settled (its step's `max_rounds`, else JCT_MAX_REVIEW_ROUNDS)."""

    review: Review
    max_rounds: int


def gate_of(step: Step | None, default_rounds: int) -> Gate:
    if step is None:
        return Gate("auto", default_rounds)
    gate = step.gate
    return Gate(gate.review, default_rounds if gate.max_rounds is None else gate.max_rounds)


def check_reviewer(gate: Gate, actor: Actor, executor: str, override_reason: str | None) -> None:
    """REVIEW_NOT_ALLOWED when the gate does not let this actor decide (an admin's override always may)."""
    if override_reason is not None:
        return
    if gate.review == "agent" and actor.actor_id == executor:
        raise JctError(
            ErrorCode.REVIEW_NOT_ALLOWED,
            "This workflow step's gate is review: agent, and you did the work: another reviewer must decide.",
            "Ask another agent or a person to review it (jct_list_pending_reviews shows it to them).",
        )
    if gate.review == "human" and actor.actor_kind != "human":
        raise JctError(
            ErrorCode.REVIEW_NOT_ALLOWED,
            "This workflow step's gate is review: human: only a person decides it.",
            "Leave it for a person: `jct review ID approve --reason ...` on the server, or a reviewer token.",
        )


def check_override(actor: Actor, decision: str, override_reason: str | None) -> None:
    if override_reason is None:
        return
    if not actor.admin:
        raise JctError(
            ErrorCode.REVIEW_NOT_ALLOWED,
            "Only an admin may approve past a quality gate (override_reason).",
            "Leave out override_reason, or ask an admin.",
        )
    if decision != "approved":
        raise JctError(
            ErrorCode.INVALID_ARGUMENT,
            f"override_reason goes with decision 'approved', not {decision!r}.",
            "Leave out override_reason for this decision.",
        )


def exhausted(error: str | None) -> bool:
    """The task failed (with `error`) because its rounds of changes ran out (an admin may still approve its
    last work)."""
    return (error or "").startswith(EXHAUSTED)


def exhausted_error(rounds: int, gate: Gate, reason: str) -> str:
    return f"{EXHAUSTED}: review asked for changes {rounds} times, round {rounds} of {gate.max_rounds}: {reason}"


def ends_task(review_rounds: int, gate: Gate) -> bool:
    """Whether one more review asking for changes is the task's last round (it fails rather than going back)."""
    return review_rounds + 1 >= gate.max_rounds


def round_of(review_rounds: int, gate: Gate) -> str:
    """Where a task stands in its rounds of changes, as the briefing, the dashboard and the CLI say it."""
    left = gate.max_rounds - review_rounds
    if left <= 0:
        return f"review round {review_rounds} of {gate.max_rounds}: the rounds are used up"
    if left == 1:
        return f"review round {review_rounds} of {gate.max_rounds}: the next review asking for changes fails the task"
    return f"review round {review_rounds} of {gate.max_rounds}"


def another_round(review_rounds: int, gate: Gate, reason: str) -> tuple[TaskStatus, dict[str, Any]]:
    """One more round of changes (a reviewer's needs_changes, or the merge queue's conflict or failed check): the
    task's new status and the values that make it. Queued again with its claim times cleared, or, at the gate's
    last round, failed with the exhausted error (a mission blocker; an admin may still approve)."""
    rounds = review_rounds + 1
    if ends_task(review_rounds, gate):
        error = exhausted_error(rounds, gate, reason)
        return TaskStatus.FAILED, {"status": TaskStatus.FAILED, "error": error, "review_rounds": rounds, "merge": None}
    values = {"status": TaskStatus.QUEUED, "completed_at": None, "claimed_at": None, "review_rounds": rounds}
    return TaskStatus.QUEUED, values | {"merge": None}
