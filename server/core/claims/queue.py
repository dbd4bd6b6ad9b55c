"""The queue: list, claim, cancel, and its statistics (enqueueing: server/core/briefings/intake.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from server.core import results as r
from server.core import telemetry, views
from server.core.git import verified
from server.core.integration import workspace
from server.core.missions import graph
from server.core.models import Actor, Limits, check_text, new_id, parse_enum, parse_id
from server.core.service import Core, check_limit, decode_cursor, encode_cursor
from server.db import claims, counts, holds, integrations, listing, queries
from server.errors import ErrorCode, JctError, invalid, task_not_found
from server.vocab import Operation, Priority, ReviewState, TaskStatus

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
        if task is None:
            raise task_not_found(task_id, "Use jct_list_tasks to find queued tasks.")
        raise JctError(
            ErrorCode.TASK_ALREADY_CLAIMED,
            f"Task {task_id} is no longer queued (current status: {task.status}).",
            "Use jct_claim_next or jct_list_tasks to find another available task.",
        )
    return r.Claim(**await _claimed(core, claimed))


async def claim_next(
    core: Core, actor: Actor, *, operation: str | None = None, repo_prefix: str | None = None
) -> r.ClaimNext:
    op = parse_enum(Operation, operation, "operation").value if operation is not None else None
    if repo_prefix is not None:
        check_text(repo_prefix, "repo_prefix", Limits.REPO, single_line=True)
    claimed = await _claim(core, actor, operation=op, repo_prefix=repo_prefix)
    if claimed is None:
        return r.ClaimNext(claimed=False)
    return r.ClaimNext(claimed=True, **await _claimed(core, claimed))


async def _claim(
    core: Core,
    actor: Actor,
    *,
    task_id: str | None = None,
    operation: str | None = None,
    repo_prefix: str | None = None,
) -> dict[str, Any] | None:
    run_id = new_id()
    request = claims.ClaimRequest(
        run_id=run_id,
        actor_id=actor.actor_id,
        principal=actor.claimant,
        claim_session=actor.session,
        actor_kind=actor.actor_kind,
        executor=actor.executor(),
        lease_seconds=core.settings.lease_seconds,
        artifact_root_uri=core.store.run_dir(run_id).as_uri(),
        task_id=task_id,
        operation=operation,
        repo_prefix=repo_prefix,
        # With tokens on, one principal holds at most JCT_MAX_CLAIMS_PER_AGENT claims at once. (With
        # JCT_AUTH=none every local session shares one principal, so there is no cap.)
        max_claims=core.settings.max_claims_per_agent if core.settings.auth == "token" else None,
    )
    try:
        return await claims.claim(core.db, request)
    except holds.ClaimConflict as conflict:
        raise task_conflicts(conflict) from None
    except claims.ClaimCapReached as reached:
        cap = core.settings.max_claims_per_agent
        raise JctError(
            ErrorCode.PERMISSION_DENIED,
            f"You already hold {reached.held} claims; the limit per agent is {cap} (JCT_MAX_CLAIMS_PER_AGENT).",
            "Complete or release one of your claimed tasks (jct_complete_task / jct_release_task), then claim again.",
        ) from None


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


async def _claimed(core: Core, claimed: dict[str, Any]) -> dict[str, Any]:
    """What a claim returns: the claimed row's fields, and the base commit it recorded (a verifiable task)."""
    fields = _claim_fields(claimed)
    base = await verified.record_base(core, fields["run_id"], claimed["target_repo"], claimed["target_ref"])
    fields["base_commit"] = base
    # An integrable repository: the run's own branch (and worktree) at that base (DESIGN section 16).
    made = await workspace.open_workspace(core, fields["run_id"], claimed["target_repo"], base)
    fields["workspace"] = r.Workspace.model_validate(made) if made is not None else None
    return fields


def _claim_fields(row: dict[str, Any]) -> dict[str, Any]:
    """The flat claim row (task, run, briefing; see server/db/claims.py) as Claim fields."""
    packet = {key.removeprefix("packet_"): value for key, value in row.items() if key.startswith("packet_")}
    snapshot = {key.removeprefix("snapshot_"): value for key, value in row.items() if key.startswith("snapshot_")}
    snapshot_row = snapshot if snapshot["id"] is not None else None
    return {
        "task_id": row["id"],
        "run_id": row["active_run_id"],
        "trace_id": row["trace_id"],
        "objective": row["objective"],
        "operation": row["operation"],
        "target": views.target(row),
        "attempt": row["attempt"],
        "lease_expires_at": row["lease_expires_at"],
        "constraints": views.constraints(snapshot_row, row["time_budget_seconds"]),
        "context_packet": views.context_packet(packet if packet["id"] is not None else None),
        "constraint_snapshot": views.constraint_snapshot(snapshot_row, row["time_budget_seconds"]),
        "mission_id": row["mission_id"],
        "decisions": [r.DecisionView.model_validate(d) for d in row["decisions"]] if row["mission_id"] else None,
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
