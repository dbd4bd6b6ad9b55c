"""The queue: list, claim, cancel, and its statistics (enqueueing: server/core/briefings/intake.py)."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

import anyio
import anyio.lowlevel

from server.core import results as r
from server.core import telemetry, views
from server.core.claims import work
from server.core.git import verified
from server.core.integration import workspace
from server.core.missions import budget, graph
from server.core.models import (
    Actor,
    Limits,
    check_text,
    key_hash,
    new_claim_key,
    new_id,
    parse_enum,
    parse_id,
    run_handle,
)
from server.core.service import Core, check_limit, decode_cursor, encode_cursor
from server.db import claims, counts, holds, integrations, listing, queries
from server.errors import ErrorCode, JctError, invalid, task_not_found
from server.vocab import Operation, Priority, ReviewState, TaskStatus

log = logging.getLogger(__name__)

LISTABLE_STATUSES = (*(status.value for status in TaskStatus), "all")


# --- list --------------------------------------------------------------------------------


async def list_tasks(
    core: Core,
    *,
    status: str = "queued",
    operation: str | None = None,
    limit: int = 10,
    cursor: str | None = None,
    repo: str | None = None,
    mission_id: str | None = None,
) -> r.TaskList:
    """Tasks in claim order, a keyset page at a time; `repo` (a prefix of target_repo) and `mission_id` narrow
    it further (the dashboard's queue filters)."""
    if status not in LISTABLE_STATUSES:
        raise invalid(f"status {status!r} is not one of: {', '.join(LISTABLE_STATUSES)}.", "Use one of those.")
    op = parse_enum(Operation, operation, "operation").value if operation is not None else None
    if repo is not None:
        check_text(repo, "repo", Limits.REPO, single_line=True)
    if mission_id is not None:
        mission_id = parse_id(mission_id, "mission_id")
    check_limit(limit)
    after = None
    if cursor is not None:
        priority, queued_at, task_id = decode_cursor(cursor, "priority", "time", "id")
        after = (priority, queued_at, task_id)
    statuses = [s.value for s in TaskStatus] if status == "all" else [status]
    async with core.db.read() as conn:
        rows = await listing.list_tasks(conn, statuses, op, after, limit + 1, repo=repo, mission_id=mission_id)
    page = rows[:limit]
    next_cursor = None
    if len(rows) > limit:
        last = page[-1]
        next_cursor = encode_cursor(last["priority"], last["queued_at"].isoformat(), last["id"])
    return r.TaskList(tasks=[views.task_summary(row) for row in page], count=len(page), next_cursor=next_cursor)


# --- claim -------------------------------------------------------------------------------


async def claim_task(core: Core, actor: Actor, task_id: str) -> r.Claim:
    task_id = parse_id(task_id, "task_id")
    claimed = await _claim(core, actor, task_id=task_id)
    if claimed is None:
        async with core.db.read() as conn:
            task = await queries.get_task(conn, task_id)
            if task is not None and task.status == TaskStatus.BLOCKED:
                raise await graph.blocked(conn, task)
            if task is not None and task.status == TaskStatus.QUEUED:
                spent = await claims.held_by_budget(conn, task_id=task_id)
                if spent is not None:
                    raise budget.refusal(spent, task_id)
        if task is None:
            raise task_not_found(task_id, "Use jct_list_tasks to find queued tasks.")
        raise JctError(
            ErrorCode.TASK_ALREADY_CLAIMED,
            f"Task {task_id} is no longer queued (current status: {task.status}).",
            "Use jct_claim_next or jct_list_tasks to find another available task.",
        )
    return r.Claim(**await _claimed(core, claimed))


async def claim_next(
    core: Core,
    actor: Actor,
    *,
    operation: str | None = None,
    repo_prefix: str | None = None,
    wait_seconds: float = 0.0,
    progress: Progress | None = None,
) -> r.ClaimNext:
    """The best eligible task; with `wait_seconds`, the first that becomes eligible within that long (DESIGN
    section 17, server/core/claims/waiting.py), `progress` called every PROGRESS_SECONDS meanwhile."""
    op = parse_enum(Operation, operation, "operation").value if operation is not None else None
    if repo_prefix is not None:
        check_text(repo_prefix, "repo_prefix", Limits.REPO, single_line=True)
    wait = check_wait(wait_seconds, core.settings.claim_wait_max_seconds)
    waiters = core.waiters
    if not wait or waiters.stopped():
        claimed = await _claim_next_once(core, actor, op, repo_prefix)
        return claimed if claimed is not None else await _nothing(core, op, repo_prefix)
    filters = (op, repo_prefix)
    # With tokens on, a principal may have as many calls waiting (in this process) as it may hold claims.
    limit = core.settings.max_claims_per_agent if core.settings.auth == "token" else None
    with waiters.entered(actor.claimant, filters, limit, actor.actor_id):
        start = anyio.current_time()
        deadline, told = start + wait, start - PROGRESS_SECONDS
        seen = waiters.generation
        claimed = await _claim_next_once(core, actor, op, repo_prefix)
        while claimed is None:
            now = anyio.current_time()
            if now >= deadline:
                return await _nothing(core, op, repo_prefix)
            if now - told >= PROGRESS_SECONDS:  # as the wait begins, then every PROGRESS_SECONDS, woken or not
                told = now
                await _still_waiting(progress, now - start, wait)
            with anyio.move_on_after(min(deadline, told + PROGRESS_SECONDS) - anyio.current_time()):
                await waiters.woken(seen)
            if waiters.stopped():
                return r.ClaimNext(claimed=False)
            if waiters.generation == seen:
                continue
            seen = waiters.generation
            # Waiters with these filters take turns for the claim itself, not for the workspace made after it.
            row = await waiters.take_turn(filters, partial(_claim_row, core, actor, op, repo_prefix))
            claimed = await _hand_over(core, actor, row) if row is not None else None
        return claimed


async def _nothing(core: Core, operation: str | None, repo_prefix: str | None) -> r.ClaimNext:
    """claimed: false, unless what the filters would have matched is held back by a spent mission budget: then
    MISSION_BUDGET_SPENT names it (a spent mission's tasks never wake a waiting claim: the claim passes them over,
    so a woken waiter finds nothing and sleeps until a later change)."""
    async with core.db.read() as conn:
        spent = await claims.held_by_budget(conn, operation=operation, repo_prefix=repo_prefix)
    if spent is not None:
        raise budget.refusal(spent)
    return r.ClaimNext(claimed=False)


# How often a waiting claim tells its client it is still waiting (a progress notification, where the client
# asked for them with a progressToken): some clients give up on a call that is silent for long.
PROGRESS_SECONDS = 10.0

Progress = Callable[[float, float], Awaitable[None]]


async def _still_waiting(progress: Progress | None, waited: float, wait: float) -> None:
    """Tell the caller it is waiting: seconds waited, of `wait`."""
    if progress is not None:
        # A client slow to read its notifications delays its own call, by this much at most.
        with anyio.move_on_after(PROGRESS_SECONDS):
            await progress(round(waited, 1), wait)


def check_wait(wait_seconds: float, cap: float) -> float:
    """`wait_seconds` as a number of seconds from 0 to the cap, else INVALID_ARGUMENT."""
    if (
        isinstance(wait_seconds, bool)
        or not isinstance(wait_seconds, int | float)
        or not math.isfinite(wait_seconds)
        or not 0 <= wait_seconds <= cap
    ):
        raise invalid(
            f"wait_seconds must be a number of seconds from 0 to {cap:g} (JCT_CLAIM_WAIT_MAX_SECONDS); "
            f"got {wait_seconds!r}."[:300],
            f"Pass wait_seconds between 0 and {cap:g}, and call again if it returns claimed: false.",
        )
    return float(wait_seconds)


async def _claim_next_once(
    core: Core, actor: Actor, operation: str | None, repo_prefix: str | None
) -> r.ClaimNext | None:
    """One claim-next, or None."""
    row = await _claim_row(core, actor, operation, repo_prefix)
    return await _hand_over(core, actor, row) if row is not None else None


async def _claim_row(core: Core, actor: Actor, operation: str | None, repo_prefix: str | None) -> Handed | None:
    # Shielded: a claim, once begun, commits and comes back here, so `_hand_over` knows of it.
    with anyio.CancelScope(shield=True):
        row = await _claim(core, actor, operation=operation, repo_prefix=repo_prefix)
    return row


async def _hand_over(core: Core, actor: Actor, claimed: Handed) -> r.ClaimNext:
    """The claim's result. A claim whose call was cancelled once the claim had committed (its client went away
    meanwhile) is released again at once, so no task stays claimed for a caller that never hears of it."""
    try:
        await anyio.lowlevel.checkpoint()  # raises if the call was cancelled while the claim ran
        return r.ClaimNext(claimed=True, **await _claimed(core, claimed))
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            try:
                await work.release_task(core, actor, claimed.row.id, GONE, run_id=claimed.run_handle)
            except Exception:  # the database went away too: the lease lapses and the sweeper requeues the task
                log.warning(
                    "could not release task %s claimed for a call that went away", claimed.row.id, exc_info=True
                )
        raise


# The reason a claim is released with when its caller went away before it heard of the claim.
GONE = "The jct_claim_next call was cancelled (its client went away) before it could hand over this claim."


@dataclass(frozen=True)
class Handed:
    """A claim made for a caller: the claimed row, and the run_id the caller is given (with its claim key
    when it has no token)."""

    row: claims.Claimed
    run_handle: str


async def _claim(
    core: Core,
    actor: Actor,
    *,
    task_id: str | None = None,
    operation: str | None = None,
    repo_prefix: str | None = None,
) -> Handed | None:
    run_id = new_id()
    # Nothing proves who a caller without a token is: its run_id carries a key only this result hands out.
    key = None if actor.authenticated else new_claim_key()
    request = claims.ClaimRequest(
        run_id=run_id,
        actor_id=actor.actor_id,
        principal=actor.claimant,
        claim_session=actor.session,
        actor_kind=actor.actor_kind,
        executor=actor.executor(),
        lease_seconds=core.holdings.lease_seconds(),
        artifact_root_uri=core.store.run_dir(run_id).as_uri(),
        task_id=task_id,
        operation=operation,
        repo_prefix=repo_prefix,
        # With tokens on, one principal holds at most JCT_MAX_CLAIMS_PER_AGENT claims at once. (With
        # JCT_AUTH=none every local session shares one principal, so there is no cap.)
        max_claims=core.settings.max_claims_per_agent if core.settings.auth == "token" else None,
        claim_key=key_hash(key) if key is not None else None,
    )
    try:
        row = await claims.claim(core.db, request)
    except holds.ClaimConflict as conflict:
        raise task_conflicts(conflict) from None
    except claims.ClaimCapReached as reached:
        cap = core.settings.max_claims_per_agent
        raise JctError(
            ErrorCode.PERMISSION_DENIED,
            f"You already hold {reached.held} claims; the limit per agent is {cap} (JCT_MAX_CLAIMS_PER_AGENT).",
            "Complete or release one of your claimed tasks (jct_complete_task / jct_release_task), then claim again.",
        ) from None
    if row is None:
        return None
    core.holdings.hold(run_id)  # renewed while the connection it was claimed through lives
    return Handed(row, run_handle(run_id, key))


# The overlapping pairs a TASK_CONFLICTS message names at most.
PAIRS_SHOWN = 5


def task_conflicts(refused: holds.ClaimConflict) -> JctError:
    """TASK_CONFLICTS for a claim by id of a task whose touches overlap a holder's, naming it and the paths."""
    holder, pairs = refused.conflict.holder, refused.conflict.pairs
    shown = "; ".join(f"{mine} overlaps {theirs}" for mine, theirs in pairs[:PAIRS_SHOWN])
    more = f" (and {len(pairs) - PAIRS_SHOWN} more)" if len(pairs) > PAIRS_SHOWN else ""
    return JctError(
        ErrorCode.TASK_CONFLICTS,
        f"Task {refused.task_id} waits for task {holder}, which holds files it touches on the same repository "
        f"(it is running, or its work awaits review or merging): {shown}{more}.",
        f"Claim another task with jct_claim_next, or claim this one once task {holder} is merged or has ended "
        "(jct_get_task shows where it stands).",
    )


async def _claimed(core: Core, claimed: Handed) -> dict[str, Any]:
    """What a claim returns: the claimed row's fields, and the base commit it recorded (a verifiable task)."""
    row = claimed.row
    fields = _claim_fields(claimed)
    run_id = row.active_run_id
    place, base = await verified.base_of(core, run_id, row.target_repo, row.target_ref)
    made = None
    if place is not None and base is not None:
        # An integrable repository: the run's own branch (and worktree) at that base (DESIGN section 16).
        if place.writable:
            carry = await workspace.carried(core, place, row.id, run_id)
            made = await workspace.open_workspace(core, place, run_id, base, carry)
            if made is not None:
                base = made["base_commit"]
        async with core.db.write() as conn:  # both in one write
            await queries.update_run_columns(conn, run_id, {"base_commit": base, "workspace": made})
    fields["base_commit"] = base
    fields["workspace"] = r.Workspace.model_validate(made) if made is not None else None
    return fields


def _claim_fields(claimed: Handed) -> dict[str, Any]:
    """The claimed row (task, run, briefing) as Claim fields."""
    row = claimed.row
    return {
        "task_id": row.id,
        "run_id": claimed.run_handle,
        "trace_id": row.trace_id,
        "objective": row.objective,
        "operation": row.operation,
        "target": r.Target(repo=row.target_repo, ref=row.target_ref, path=row.target_path, touches=row.touches),
        "attempt": row.attempt,
        "lease_expires_at": row.lease_expires_at,
        "constraints": views.constraints(row.snapshot, row.time_budget_seconds),
        "context_packet": views.context_packet(row.packet),
        "constraint_snapshot": views.constraint_snapshot(row.snapshot, row.time_budget_seconds),
        "mission_id": row.mission_id,
        "decisions": [r.DecisionView.model_validate(d) for d in row.decisions] if row.mission_id else None,
    }


# --- stats -------------------------------------------------------------------------------


async def queue_stats(core: Core) -> r.QueueStats:
    """Every figure is read from an index or the trigger-kept counts: flat however many tasks exist."""
    async with core.db.read() as conn:
        tallies, summed = await listing.counts(conn)
        spent, spent_rows = await counts.telemetry_totals(conn)
        expired = await queries.count_expired_leases(conn, core.now())
        oldest = await listing.oldest_queued_at(conn, [p.value for p in Priority])
        merging = await integrations.counts(conn)
    if summed > FOLD_AFTER_ROWS or spent_rows > FOLD_AFTER_ROWS:
        # Nobody has folded the counts for a while (the sweeper does it every pass): fold them now.
        await fold_counts(core)
    age = (datetime.now(UTC) - oldest).total_seconds() if oldest is not None else None
    full = {status.value: tallies.get(("task", status.value), 0) for status in TaskStatus}
    pending = tallies.get(("review", ReviewState.PENDING), 0)
    return r.QueueStats(
        counts=full,
        merge_queue=merging,
        expired_leases=expired,
        oldest_queued_age_seconds=age,
        pending_reviews=pending,
        telemetry_totals=telemetry.shown_totals(spent),
    )


# Delta rows queue_stats sums before it folds them itself.
FOLD_AFTER_ROWS = 5_000


async def fold_counts(core: Core) -> None:
    """Fold the trigger-written count deltas into one row per count (server/db/counts.py)."""
    async with core.db.write() as conn:
        await counts.fold_count_deltas(conn)
