"""The queue: enqueue behind the policy gate, list, claim, release, cancel, and its statistics."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from functools import partial
from typing import Any

from sqlalchemy import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from server.core import results as r
from server.core import views
from server.core.audit import AuditAction, audit_row
from server.core.models import Actor, Limits, check_text, new_id, parse_enum, parse_id
from server.core.service import Core, check_limit, decode_cursor, encode_cursor
from server.db import claims, counts, listing, queries
from server.errors import ErrorCode, JctError, invalid
from server.vocab import EntityKind, IssueStatus, Operation, Priority, ReviewState, RunStatus, TaskStatus

MIN_BUDGET, MAX_BUDGET = 30, 86_400
LISTABLE_STATUSES = (*(status.value for status in TaskStatus), "all")


# --- enqueue -----------------------------------------------------------------------------


async def enqueue_task(
    core: Core,
    actor: Actor,
    *,
    objective: str,
    operation: str,
    target_repo: str,
    target_ref: str = "main",
    target_path: str = "",
    time_budget_seconds: int = 3600,
    priority: str = "P2",
    acceptance_criteria: list[str] | None = None,
    context_summary: str | None = None,
    idempotency_key: str | None = None,
    create_cwom: bool = True,
) -> r.Enqueued:
    request = _gate(
        core,
        objective=objective,
        operation=operation,
        target_repo=target_repo,
        target_ref=target_ref,
        target_path=target_path,
        time_budget_seconds=time_budget_seconds,
        priority=priority,
        acceptance_criteria=acceptance_criteria or [],
        context_summary=context_summary or "",
        create_cwom=create_cwom,
    )
    if idempotency_key is not None:
        check_text(idempotency_key, "idempotency_key", Limits.IDEMPOTENCY_KEY, single_line=True)
    request_hash = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()

    async with core.db.write() as conn:
        if idempotency_key is not None:
            existing = await queries.get_task_by_idempotency_key(conn, actor.claimant, idempotency_key)
            if existing is not None:
                return _duplicate(existing, request_hash)
        task, issue, packet, snapshot, audit = _bundle(core, actor, request, idempotency_key, request_hash)
        inserted = await queries.insert_task_bundle(conn, task, issue, packet, snapshot, audit)
        if not inserted:
            assert idempotency_key is not None
            winner = await queries.get_task_by_idempotency_key(conn, actor.claimant, idempotency_key)
            assert winner is not None
            return _duplicate(winner, request_hash)
    return r.Enqueued(
        task_id=task["id"], trace_id=task["trace_id"], status=TaskStatus.QUEUED, cwom_issue_id=task["issue_id"]
    )


def _gate(core: Core, **fields: Any) -> dict[str, Any]:
    """The policy gate: every rule a task must meet before it is stored. Returns the normalised request."""
    operation = parse_enum(Operation, fields["operation"], "operation")
    priority = parse_enum(Priority, fields["priority"], "priority")
    budget = fields["time_budget_seconds"]
    if not MIN_BUDGET <= budget <= MAX_BUDGET:
        raise JctError(
            ErrorCode.BUDGET_OUT_OF_RANGE,
            f"time_budget_seconds {budget} is outside {MIN_BUDGET}..{MAX_BUDGET}.",
            f"Pick a budget between {MIN_BUDGET} seconds and {MAX_BUDGET} (24 hours).",
        )
    objective = check_text(fields["objective"], "objective", Limits.OBJECTIVE).strip()
    repo = check_text(fields["target_repo"], "target_repo", Limits.REPO, single_line=True).strip()
    allowed = core.settings.allowed_repo_prefixes
    if allowed and not any(repo.startswith(prefix) for prefix in allowed):
        raise JctError(
            ErrorCode.REPO_NOT_ALLOWED,
            f"Repository {repo!r} is not under an allowed prefix.",
            f"Use a repository starting with one of: {', '.join(allowed)} (JCT_ALLOWED_REPO_PREFIXES).",
        )
    ref = check_text(fields["target_ref"], "target_ref", Limits.REF, single_line=True).strip()
    if " " in ref:
        raise invalid(f"target_ref {ref!r} contains spaces.", "Pass a branch, tag or commit name.")
    path = _check_target_path(fields["target_path"])
    criteria = fields["acceptance_criteria"]
    if len(criteria) > Limits.CRITERIA:
        raise invalid(f"{len(criteria)} acceptance criteria; the limit is {Limits.CRITERIA}.", "Merge or trim them.")
    criteria = [check_text(c, f"acceptance_criteria[{i}]", Limits.CRITERION).strip() for i, c in enumerate(criteria)]
    summary = check_text(fields["context_summary"], "context_summary", Limits.SUMMARY, required=False)
    return {
        "objective": objective,
        "operation": operation.value,
        "target_repo": repo,
        "target_ref": ref,
        "target_path": path,
        "time_budget_seconds": budget,
        "priority": priority.value,
        "acceptance_criteria": criteria,
        "context_summary": summary,
        "create_cwom": fields["create_cwom"],
    }


def _check_target_path(path: str) -> str:
    check_text(path, "target_path", Limits.PATH, required=False, single_line=True)
    normalised = path.strip().removeprefix("./")
    if normalised.startswith(("/", "\\")) or ":" in normalised[:3]:
        raise invalid(f"target_path {path!r} is absolute.", "Give a path relative to the repository root.")
    if ".." in normalised.replace("\\", "/").split("/"):
        raise invalid(f"target_path {path!r} contains '..'.", "Give a path inside the repository, without '..'.")
    return normalised


def _bundle(
    core: Core, actor: Actor, req: dict[str, Any], key: str | None, request_hash: str
) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None, dict[str, Any] | None, list[dict[str, Any]]]:
    now = datetime.now(UTC)
    ts = core.now()
    task_id, trace_id = new_id(), new_id()
    issue = packet = snapshot = None
    audit = []
    if req["create_cwom"]:
        issue_id, snapshot_id = new_id(), new_id()
        title = req["objective"].splitlines()[0][: Limits.TITLE]
        issue = {
            "id": issue_id,
            "title": title,
            "type": req["operation"],
            "priority": req["priority"],
            "status": IssueStatus.READY,
            "acceptance_criteria": req["acceptance_criteria"],
            "created_at": ts,
            "updated_at": ts,
        }
        packet = {
            "id": new_id(),
            "issue_id": issue_id,
            "version": 1,
            "summary": req["context_summary"],
            "prior_art": [],
            "files_of_interest": [req["target_path"]] if req["target_path"] else [],
            "acceptance_criteria": req["acceptance_criteria"],
            "data": {},
            "review_feedback": None,
            "created_at": ts,
        }
        snapshot = {
            "id": snapshot_id,
            "issue_id": issue_id,
            "scope": "run",
            "time_budget_seconds": req["time_budget_seconds"],
            "allow_network": False,
            "allow_secrets": False,
            "allowed_paths": [req["target_path"]] if req["target_path"] else [],
            "created_at": ts,
        }
        ready = {"status": IssueStatus.READY}
        audit.append(audit_row(actor, AuditAction.ISSUE_CREATED, EntityKind.ISSUE, issue_id, None, ready, trace_id))
    task = {
        "id": task_id,
        "operation": req["operation"],
        "objective": req["objective"],
        "target_repo": req["target_repo"],
        "target_ref": req["target_ref"],
        "target_path": req["target_path"],
        "priority": req["priority"],
        "time_budget_seconds": req["time_budget_seconds"],
        "status": TaskStatus.QUEUED,
        "attempts": 0,
        "max_attempts": core.settings.max_attempts,
        "idempotency_key": key,
        # Keys are per principal: one principal's key says nothing about another's tasks.
        "idempotency_scope": actor.claimant if key is not None else None,
        "request_hash": request_hash,
        "trace_id": trace_id,
        "issue_id": issue["id"] if issue else None,
        "constraint_snapshot_id": snapshot["id"] if snapshot else None,
        "requested_by": actor.actor_id,
        "queued_at": ts if not core.db.is_sqlite else now,
    }
    after = {"status": TaskStatus.QUEUED, "priority": req["priority"], "operation": req["operation"]}
    audit.insert(0, audit_row(actor, AuditAction.TASK_ENQUEUED, EntityKind.TASK, task_id, None, after, trace_id))
    return task, issue, packet, snapshot, audit


def _duplicate(existing: RowMapping, request_hash: str) -> r.Enqueued:
    if existing["request_hash"] != request_hash:
        raise JctError(
            ErrorCode.IDEMPOTENCY_CONFLICT,
            f"idempotency_key was already used for task {existing['id']} with a different payload.",
            "Use a new idempotency_key for a different task, or resend the original payload unchanged.",
        )
    return r.Enqueued(
        task_id=existing["id"],
        trace_id=existing["trace_id"],
        status=existing["status"],
        cwom_issue_id=existing["issue_id"],
        duplicate=True,
    )


# --- list --------------------------------------------------------------------------------


async def list_tasks(
    core: Core, *, status: str = "queued", operation: str | None = None, limit: int = 10, cursor: str | None = None
) -> r.TaskList:
    if status not in LISTABLE_STATUSES:
        raise invalid(f"status {status!r} is not one of: {', '.join(LISTABLE_STATUSES)}.", "Use one of those.")
    op = parse_enum(Operation, operation, "operation").value if operation is not None else None
    check_limit(limit)
    after = None
    if cursor is not None:
        priority, queued_at, task_id = decode_cursor(cursor, "priority", "time", "id")
        after = (priority, queued_at, task_id)
    statuses = [s.value for s in TaskStatus] if status == "all" else [status]
    async with core.db.read() as conn:
        rows = await listing.list_tasks(conn, statuses, op, after, limit + 1)
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
        if task is None:
            raise JctError(
                ErrorCode.TASK_NOT_FOUND, f"Task {task_id} does not exist.", "Use jct_list_tasks to find queued tasks."
            )
        raise JctError(
            ErrorCode.TASK_ALREADY_CLAIMED,
            f"Task {task_id} is no longer queued (current status: {task['status']}).",
            "Use jct_claim_next or jct_list_tasks to find another available task.",
        )
    return r.Claim(**_claim_fields(claimed))


async def claim_next(
    core: Core, actor: Actor, *, operation: str | None = None, repo_prefix: str | None = None
) -> r.ClaimNext:
    op = parse_enum(Operation, operation, "operation").value if operation is not None else None
    if repo_prefix is not None:
        check_text(repo_prefix, "repo_prefix", Limits.REPO, single_line=True)
    claimed = await _claim(core, actor, operation=op, repo_prefix=repo_prefix)
    if claimed is None:
        return r.ClaimNext(claimed=False)
    return r.ClaimNext(claimed=True, **_claim_fields(claimed))


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
    )
    if core.db.is_sqlite and core.settings.auth != "token":
        # BEGIN IMMEDIATE, the claim and COMMIT as one call on aiosqlite's thread (server/db/claims.py).
        return await core.db.write_in_one_call(partial(claims.claim_on_sqlite_thread, req=request))
    claim = claims.claim_sqlite if core.db.is_sqlite else claims.claim_postgres
    async with core.db.write() as conn:
        if core.settings.auth == "token":
            await _check_claim_cap(core, conn, actor)
        return await claim(conn, request)


async def _check_claim_cap(core: Core, conn: AsyncConnection, actor: Actor) -> None:
    """With tokens on, one principal holds at most JCT_MAX_CLAIMS_PER_AGENT claims at once.
    (With JCT_AUTH=none every local session shares one principal, so there is no cap.)"""
    if not core.db.is_sqlite:
        await queries.lock_principal(conn, actor.actor_id)
    held = await queries.count_running_claims(conn, actor.actor_id)
    cap = core.settings.max_claims_per_agent
    if held >= cap:
        raise JctError(
            ErrorCode.PERMISSION_DENIED,
            f"You already hold {held} claims; the limit per agent is {cap} (JCT_MAX_CLAIMS_PER_AGENT).",
            "Complete or release one of your claimed tasks (jct_complete_task / jct_release_task), then claim again.",
        )


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
        "constraints": views.constraints(snapshot_row, row),
        "context_packet": views.context_packet(packet if packet["id"] is not None else None),
        "constraint_snapshot": views.constraint_snapshot(snapshot_row, row),
    }


# --- cancel ------------------------------------------------------------------------------


CANCEL_ROUNDS = 5


async def cancel_task(core: Core, actor: Actor, task_id: str, reason: str) -> r.Cancelled:
    """Cancel a queued or running task, and its running run.

    Locks are taken run first, then task: the order the fence and the sweeper use, so cancel
    never deadlocks with a complete, release or expiry of the same task. A claim that commits
    between the two steps makes the guarded task update miss; the next round cancels its run too.
    """
    task_id = parse_id(task_id, "task_id")
    check_text(reason, "reason", Limits.REASON)
    ts = core.now()
    async with core.db.write() as conn:
        cancelled_runs: list[str] = []
        before: RowMapping | None = None
        task: RowMapping | None = None
        for _ in range(CANCEL_ROUNDS):
            cancelled_runs += await queries.cancel_running_runs(conn, task_id, ts)
            before = await queries.get_task(conn, task_id)
            if before is None:
                raise JctError(ErrorCode.TASK_NOT_FOUND, f"Task {task_id} does not exist.", "Check the task_id.")
            task = await queries.cancel_task_row(
                conn,
                task_id,
                {
                    "status": TaskStatus.CANCELLED,
                    "active_run_id": None,
                    "completed_at": ts,
                    "error": f"cancelled: {reason}",
                },
                known_runs=cancelled_runs,
            )
            if task is not None or before["status"] not in (TaskStatus.QUEUED, TaskStatus.RUNNING):
                break
        if task is None:
            status = before["status"] if before is not None else "changing"
            raise invalid(
                f"Task {task_id} is {status}; only queued or running tasks can be cancelled.",
                "Nothing to do: the task has already ended.",
            )
        audit = [
            audit_row(
                actor,
                AuditAction.TASK_CANCELLED,
                EntityKind.TASK,
                task_id,
                {"status": TaskStatus.RUNNING if cancelled_runs else TaskStatus.QUEUED},
                {"status": TaskStatus.CANCELLED, "reason": reason},
                task["trace_id"],
            )
        ]
        for run_id in cancelled_runs:
            moved = ({"status": RunStatus.RUNNING}, {"status": RunStatus.CANCELLED})
            audit.append(audit_row(actor, AuditAction.RUN_CANCELLED, EntityKind.RUN, run_id, *moved, None))
        if task["issue_id"] is not None:
            cancelled = {"status": IssueStatus.CANCELLED}
            await queries.update_issue(conn, task["issue_id"], {**cancelled, "updated_at": ts})
            audit.append(
                audit_row(actor, AuditAction.ISSUE_CANCELLED, EntityKind.ISSUE, task["issue_id"], None, cancelled, None)
            )
        await queries.insert_audit(conn, audit)
    return r.Cancelled(
        task_id=task_id, task_status=TaskStatus.CANCELLED, run_id=cancelled_runs[-1] if cancelled_runs else None
    )


# --- stats -------------------------------------------------------------------------------


async def queue_stats(core: Core) -> r.QueueStats:
    """Every figure is read from an index or the trigger-kept counts: flat however many tasks exist."""
    async with core.db.read() as conn:
        tallies, summed = await listing.counts(conn)
        expired = await queries.count_expired_leases(conn, core.now())
        oldest = await listing.oldest_queued_at(conn, [p.value for p in Priority])
    if summed > FOLD_AFTER_ROWS:
        # Nobody has folded the counts for a while (the sweeper does it every pass): fold them now.
        await fold_counts(core)
    age = (datetime.now(UTC) - oldest).total_seconds() if oldest is not None else None
    full = {status.value: tallies.get(("task", status.value), 0) for status in TaskStatus}
    pending = tallies.get(("review", ReviewState.PENDING), 0)
    return r.QueueStats(counts=full, expired_leases=expired, oldest_queued_age_seconds=age, pending_reviews=pending)


# Delta rows queue_stats sums before it folds them itself.
FOLD_AFTER_ROWS = 5_000


async def fold_counts(core: Core) -> None:
    """Fold the trigger-written count deltas into one row per count (server/db/counts.py)."""
    async with core.db.write() as conn:
        await counts.fold_count_deltas(conn, sqlite=core.db.is_sqlite)
