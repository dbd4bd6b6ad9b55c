"""A mission's budget (DESIGN section 17): what it may spend, what its runs spent, and what a person does once it
is spent.

Every telemetry report adds to its mission's sums in the report's own transaction (server/db/changes/ Spend),
and the claim compares them with the budget inside its own statement (server/db/claims/request.py WITHIN_BUDGET): a
spent mission's tasks are passed over by claim-next and refused by claim-by-id. What that promises, exactly:
SQLite runs one writer at a time, so no claim that follows the report that spent the budget hands out a task.
PostgreSQL reads at READ COMMITTED, so a claim whose statement began before that report committed may still hand
out one task: at most one per claim in flight at that moment, each as though it had come just before the report.
Runs already under way when the budget is spent keep going, and what they report still counts."""

from __future__ import annotations

import math
from typing import Any

from server.core import results as r
from server.core.audit import AuditAction, audit_row
from server.core.missions.graph import mission_not_found
from server.core.models import Actor, Limits, check_text, parse_id
from server.core.service import Core
from server.db import missions as q
from server.db import queries
from server.db.records import Budgeted, HeldBack, Mission
from server.errors import ErrorCode, JctError, invalid
from server.vocab import EntityKind, MissionStatus

# The largest token budget: what a signed 64-bit column holds, and far past any mission.
MAX_TOKENS = 2**62


def check_budget(max_cost_usd: Any, max_tokens: Any) -> tuple[float | None, int | None]:
    """A budget as given (None: no limit), else INVALID_ARGUMENT saying what to send."""
    cost = None
    if max_cost_usd is not None:
        if isinstance(max_cost_usd, bool) or not isinstance(max_cost_usd, int | float):
            raise invalid(f"max_cost_usd must be a number of US dollars; got {max_cost_usd!r}."[:200], _SEND)
        if not math.isfinite(max_cost_usd) or max_cost_usd < 0:
            raise invalid(f"max_cost_usd must be a finite number, 0 or more; got {max_cost_usd!r}.", _SEND)
        cost = float(max_cost_usd)
    tokens = None
    if max_tokens is not None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int | float):
            raise invalid(f"max_tokens must be a whole number of tokens; got {max_tokens!r}."[:200], _SEND)
        if not math.isfinite(max_tokens) or max_tokens < 0 or max_tokens != int(max_tokens) or max_tokens > MAX_TOKENS:
            raise invalid(f"max_tokens must be a whole number from 0 to {MAX_TOKENS}; got {max_tokens!r}.", _SEND)
        tokens = int(max_tokens)
    return cost, tokens


_SEND = "Send max_cost_usd (e.g. 25.0) and max_tokens (e.g. 2000000) as numbers of 0 or more, or omit them."


def is_spent(mission: Budgeted) -> bool:
    """The claim's test (server/db/claims/request.py SPENT), on a mission read."""
    cost, tokens = mission.max_cost_usd, mission.max_tokens
    return (cost is not None and mission.spent_cost_usd >= cost) or (
        tokens is not None and mission.spent_tokens >= tokens
    )


def detail(mission: Mission) -> r.MissionDetail:
    """The mission's row as its page shows it, with whether its budget is spent."""
    return r.MissionDetail.model_validate({**mission.columns(), "budget_spent": is_spent(mission)})


def spent_text(mission: Budgeted) -> str:
    """Which limit is reached, with the figures: `cost $5.12 of max_cost_usd $5.00`."""
    parts = []
    cost, tokens = mission.max_cost_usd, mission.max_tokens
    if cost is not None and mission.spent_cost_usd >= cost:
        parts.append(f"cost ${mission.spent_cost_usd:.2f} of max_cost_usd ${cost:.2f}")
    if tokens is not None and mission.spent_tokens >= tokens:
        parts.append(f"{int(mission.spent_tokens)} tokens of max_tokens {tokens}")
    return " and ".join(parts)


def raise_hint(mission_id: str) -> str:
    """How a person lifts a spent budget."""
    return (
        f"A person raises the budget (jct mission-budget {mission_id} --max-cost-usd N --max-tokens N) "
        "or cancels the mission (jct_cancel_mission)."
    )


def refusal(mission: HeldBack, task_id: str | None = None) -> JctError:
    """MISSION_BUDGET_SPENT for a claim of a spent mission's task, naming the budget."""
    what = f"Task {task_id} is" if task_id else f"Nothing else is claimable for you: {mission.waiting} task(s) are"
    return JctError(
        ErrorCode.MISSION_BUDGET_SPENT,
        f"{what} held back: mission {mission.id} ({' '.join(mission.title.split())[:60]}) has spent its "
        f"budget ({spent_text(mission)}).",
        raise_hint(mission.id) + " Until then claim other work, or stop.",
    )


async def set_budget(
    core: Core, actor: Actor, mission_id: str, *, max_cost_usd: Any = None, max_tokens: Any = None, clear: bool = False
) -> r.MissionDetail:
    """Set (or, with `clear`, remove) a mission's budget; a limit not given is kept. Claims waiting for work are
    woken (the audit row is CLAIMABLE): tasks a spent budget held back may go."""
    mission_id = parse_id(mission_id, "mission_id")
    cost, tokens = check_budget(max_cost_usd, max_tokens)
    if cost is None and tokens is None and not clear:
        raise invalid("No budget given.", "Give --max-cost-usd, --max-tokens or both (--clear removes the budget).")
    async with core.db.write() as conn:
        mission = await q.get_mission(conn, mission_id, lock=True)
        if mission is None:
            raise mission_not_found(mission_id)
        if mission.status != MissionStatus.ACTIVE:
            raise invalid(f"Mission {mission_id} is {mission.status}.", "Only an active mission's budget matters.")
        before = {"max_cost_usd": mission.max_cost_usd, "max_tokens": mission.max_tokens}
        new_cost = cost if cost is not None else None if clear else mission.max_cost_usd
        new_tokens = tokens if tokens is not None else None if clear else mission.max_tokens
        after = {"max_cost_usd": new_cost, "max_tokens": new_tokens}
        await q.set_budget(conn, mission_id, new_cost, new_tokens)
        row = audit_row(actor, AuditAction.MISSION_BUDGET_SET, EntityKind.MISSION, mission_id, before, after, None)
        await queries.insert_audit(conn, [row])
        updated = await q.get_mission(conn, mission_id)
    assert updated is not None
    return detail(updated)


async def set_summary(core: Core, actor: Actor, mission_id: str, summary: str) -> r.MissionDetail:
    """The mission's closing summary, written by its planner or a person (replaces an earlier one)."""
    mission_id = parse_id(mission_id, "mission_id")
    check_text(summary, "summary", Limits.SUMMARY)
    async with core.db.write() as conn:
        mission = await q.get_mission(conn, mission_id, lock=True)
        if mission is None:
            raise mission_not_found(mission_id)
        await q.set_summary(conn, mission_id, summary)
        after = {"summary": summary[:200]}
        row = audit_row(actor, AuditAction.MISSION_SUMMARIZED, EntityKind.MISSION, mission_id, None, after, None)
        await queries.insert_audit(conn, [row])
        updated = await q.get_mission(conn, mission_id)
    assert updated is not None
    return detail(updated)
