"""What an operator does to the queue by hand (DESIGN section 14): requeue ended work with feedback, change a
task's priority, and the read-only views of who holds what (agents), what is stuck, and the audit log.

MCP tools, the `jct` command and the dashboard each call these, so a rule (who may, what is refused) lives here
once.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any, Protocol

from server.core import results as r
from server.core import views
from server.core.audit import AuditAction, audit_row
from server.core.briefings import versions
from server.core.missions import budget
from server.core.models import Actor, Limits, check_text, parse_enum, parse_id, parse_moment
from server.core.service import Core, check_limit, decode_cursor, encode_cursor
from server.db import integrations, outcomes, queries
from server.db import missions as mission_rows
from server.db import operators as q
from server.errors import invalid, task_not_found
from server.vocab import TASK_ENDED_UNAPPROVED, TASK_OPEN, EntityKind, IssueStatus, MissionStatus, Priority, TaskStatus

# Why a running run is stuck, by the number db/operators.stuck_runs gives it: most urgent first.
RUN_KINDS: tuple[r.StuckKind, ...] = ("lease_overdue", "human_blocker", "over_budget", "no_progress")
CLAIMS_SHOWN = 10  # per agent, soonest lease end first
AGENTS_SHOWN = 200
STUCK_AFTER_MAX = 7 * 86400  # as JCT_STUCK_AFTER_SECONDS
AGENT_STATES: tuple[r.AgentState, ...] = ("working", "waiting", "idle")


async def requeue_task(core: Core, actor: Actor, task_id: str, reason: str, feedback: str | None = None) -> r.Requeued:
    """A failed, cancelled or rejected task back to the queue (blocked if it still waits for a dependency),
    attempts and review rounds reset; `feedback` goes into a new briefing version the next agent reads."""
    task_id = parse_id(task_id, "task_id")
    check_text(reason, "reason", Limits.REASON)
    if feedback is not None:
        check_text(feedback, "feedback", Limits.REASON)
    ts = core.now()
    async with core.db.write() as conn:
        task = await queries.get_task(conn, task_id)
        if task is None:
            raise task_not_found(task_id)
        # Ended without approval (a review rejection leaves the task failed).
        if task.status not in TASK_ENDED_UNAPPROVED:
            raise invalid(
                f"Task {task_id} is {task.status}; only failed, cancelled or rejected tasks can be requeued.",
                "Cancel running work first (jct_cancel_task); use jct_set_priority to move queued work.",
            )
        if task.mission_id is not None:
            row = await mission_rows.get_mission(conn, task.mission_id)
            mission = row.status if row is not None else None
            if mission != MissionStatus.ACTIVE:
                raise invalid(
                    f"Task {task_id} belongs to mission {task.mission_id}, which is {mission}.",
                    "Enqueue the work again as a new task.",
                )
        status = TaskStatus.BLOCKED if int(task.blockers or 0) > 0 or task.waits_for_phase else TaskStatus.QUEUED
        moved = await queries.update_task(
            conn,
            task_id,
            {
                "status": status,
                "attempts": 0,
                "review_rounds": 0,
                "active_run_id": None,
                "claimed_at": None,
                "completed_at": None,
                "error": None,
                "result": None,
                "queued_at": ts,
            },
            status_in=[task.status],
        )
        if moved is None:
            raise invalid(f"Task {task_id} changed while requeueing it.", "Nothing was changed; look again.")
        trace = task.trace_id
        after: dict[str, Any] = {"status": status, "reason": reason}
        audit = [
            audit_row(actor, AuditAction.TASK_REQUEUED, EntityKind.TASK, task_id, {"status": task.status}, after, trace)
        ]
        version = None
        if task.issue_id is not None:
            await queries.update_issue(conn, task.issue_id, {"status": IssueStatus.READY, "updated_at": ts})
            audit.append(
                audit_row(
                    actor,
                    AuditAction.ISSUE_READY,
                    EntityKind.ISSUE,
                    task.issue_id,
                    None,
                    {"status": IssueStatus.READY},
                    trace,
                )
            )
            if feedback is not None:
                # The feedback names the last run and its verdict, as a review's does.
                run = next(iter(await queries.runs_of_task(conn, task_id, 1)), None)
                pack = await queries.evidence_pack_for_run(conn, run.id) if run is not None else None
                entry = versions.feedback_round(
                    decision="requeued",
                    reason=feedback,
                    reviewer=actor,
                    run_id=run.id if run is not None else None,
                    verdict=pack.verdict if pack is not None else "none",
                )
                version = await versions.new_version(conn, task.issue_id, ts, feedback=entry)
        await queries.insert_audit(conn, audit)
    return r.Requeued(task_id=task_id, task_status=status, context_packet_version=version)


async def set_priority(core: Core, actor: Actor, task_id: str, priority: str) -> r.PrioritySet:
    """Change the priority of a task not yet ended; claim-next and the queue listing follow it at once."""
    task_id = parse_id(task_id, "task_id")
    chosen = parse_enum(Priority, priority, "priority")
    async with core.db.write() as conn:
        task = await queries.get_task(conn, task_id)
        if task is None:
            raise task_not_found(task_id)
        if (
            task.status not in TASK_OPEN
            or await queries.update_task(conn, task_id, {"priority": chosen.value}, status_in=[task.status]) is None
        ):
            raise invalid(
                f"Task {task_id} is {task.status}; only queued, blocked or running tasks have a priority to set.",
                "Requeue ended work with jct_requeue_task first.",
            )
        before = {"priority": task.priority}
        after = {"priority": chosen.value, "run_id": task.active_run_id} if task.active_run_id else None
        after = after or {"priority": chosen.value}
        row = audit_row(actor, AuditAction.TASK_PRIORITY_SET, EntityKind.TASK, task_id, before, after, task.trace_id)
        await queries.insert_audit(conn, [row])
    return r.PrioritySet(task_id=task_id, priority=chosen, previous=Priority(task.priority))


async def list_agents(
    core: Core, *, active_within_seconds: int = 3600, state: r.AgentState | None = None
) -> r.AgentList:
    """Per agent that ran something within the window, still holds a claim, or waits in jct_claim_next on this
    server process: its principal, its state, its claims with their lease ends, when it was last seen (a claim,
    an end, or a lease renewal: every call renews), runs done and failed. `state` keeps only the agents in it."""
    if not 1 <= active_within_seconds <= 30 * 86400:
        raise invalid(
            f"active_within_seconds {active_within_seconds} is outside 1..2592000.",
            "Use a window between one second and 30 days.",
        )
    if state is not None and state not in AGENT_STATES:
        raise invalid(f"state {state!r} is not one of {', '.join(AGENT_STATES)}.", "Leave it out for every agent.")
    waiting = set(core.waiters.waiting_agents())
    lease = timedelta(seconds=core.settings.lease_seconds)
    async with core.db.read() as conn:
        now = await q.clock(conn, core.now())
        totals = await q.agent_totals(conn, now - timedelta(seconds=active_within_seconds), AGENTS_SHOWN)
        names = [row.agent for row in totals]
        held = await q.claims_held(conn, names) if names else []
        soonest = await q.soonest_claims(conn, names, CLAIMS_SHOWN) if names else []
    counted = {row.agent: row.held for row in held}
    # A lease is renewed to a full lease on every call: the latest end, less a lease, is the agent's last call.
    renewed = {row.agent: row.last_lease_end - lease for row in held if row.last_lease_end is not None}
    claims: dict[str, list[r.HeldClaim]] = {}
    for claim in soonest:
        claims.setdefault(claim.agent, []).append(
            r.HeldClaim(
                task_id=claim.task_id,
                run_id=claim.run_id,
                objective=_clip(claim.objective, 200),
                lease_expires_at=claim.lease_expires_at,
            )
        )
    agents = []
    # An agent waiting for its first claim has no run yet: it is listed all the same.
    known = {row.agent for row in totals}
    for row in [*totals, *map(q.AgentTotals.waiting, sorted(waiting - known))]:
        seen = [moment for moment in (row.last_started, row.last_ended, renewed.get(row.agent)) if moment]
        holding = counted.get(row.agent, 0)
        now_in: r.AgentState = "working" if holding else "waiting" if row.agent in waiting else "idle"
        if state is not None and now_in != state:
            continue
        agents.append(
            r.AgentView(
                agent=row.agent,
                principal=row.principal or row.agent,
                state=now_in,
                claims_held=holding,
                claims=claims.get(row.agent, []),
                last_seen=max(seen) if seen else None,
                done=row.done,
                failed=row.failed,
                spent=views.spent(row),
            )
        )
    agents.sort(key=lambda agent: agent.last_seen or datetime.min.replace(tzinfo=UTC), reverse=True)
    return r.AgentList(agents=agents, count=len(agents))


async def list_stuck(core: Core, *, limit: int = 50, stuck_after_seconds: int | None = None) -> r.StuckList:
    """Work that needs a person: running past its time budget, silent for `stuck_after_seconds` (default
    JCT_STUCK_AFTER_SECONDS), holding a lease that has passed, flagged for a human, blocked by a dependency that
    failed, or held back by its mission's spent budget; each with the reason and the action to take. The most
    urgent kinds come first."""
    check_limit(limit, 200)
    if stuck_after_seconds is None:
        stuck_after_seconds = core.settings.stuck_after_seconds
    elif not 1 <= stuck_after_seconds <= STUCK_AFTER_MAX:
        raise invalid(
            f"stuck_after_seconds {stuck_after_seconds} is outside 1..{STUCK_AFTER_MAX}.",
            "Use a silence between one second and 7 days, or leave it out for JCT_STUCK_AFTER_SECONDS.",
        )
    silent = timedelta(seconds=stuck_after_seconds)
    async with core.db.read() as conn:
        now = await q.clock(conn, core.now())
        running = await q.stuck_runs(conn, now, now - silent, limit)
        humans = await q.human_blocked_reviews(conn, limit)
        failed = await q.failed_dependencies(conn, limit)
        held = await integrations.waiting_with_reason(conn, limit)
        spent = await outcomes.spent_missions(conn, limit)
    # The runs come most urgent first; finished runs awaiting a person go after the running ones that do.
    urgent = [_running_item(run, now) for run in running if RUN_KINDS[run.kind] in ("lease_overdue", "human_blocker")]

    def described() -> Iterator[r.StuckItem]:
        yield from urgent
        yield from (_human_item(pack) for pack in humans)
        yield from (_integration_item(row) for row in held)
        yield from (_budget_item(row) for row in spent)
        yield from (_running_item(run, now) for run in running[len(urgent) :])
        yield from (_dependency_item(row) for row in failed)

    items = list(islice(described(), limit))
    return r.StuckList(items=items, count=len(items))


def _running_item(run: q.StuckRun, now: datetime) -> r.StuckItem:
    kind = RUN_KINDS[run.kind]
    # Since when: the lease's end, the budget's end, or the last sign of life.
    since = {"lease_overdue": run.lease_expires_at, "over_budget": run.budget_ends_at}.get(kind) or run.last
    match kind:
        case "lease_overdue":
            reason = f"Its lease ended at {_at(since)} and the run has not been expired yet."
            action = "The sweeper requeues it shortly; if it stays, check that a JCT server process is running."
        case "human_blocker":
            reason = "The agent reported a blocker only a person can lift."
            action = "Read the blocker on the run (jct_get_run), answer the agent, or cancel the task."
        case "over_budget":
            reason = f"Running past its time budget of {run.time_budget_seconds}s since {_at(since)}."
            action = (
                "Ask its agent for status; if it is lost, cancel it (jct_cancel_task) and requeue it with feedback "
                "(jct_requeue_task)."
            )
        case _:
            reason = f"No progress reported since {_at(since)} ({int((now - since).total_seconds())}s)."
            action = "Check on its agent; cancel and requeue with feedback if it has stalled."
    return _stuck(kind, run, since, reason, action, TaskStatus.RUNNING, run)


def _human_item(pack: q.BlockedReview) -> r.StuckItem:
    reason = "Finished with a blocker only a person can lift; never approved automatically."
    action = f"Review evidence pack {pack.evidence_pack_id} (jct_submit_review)."
    return _stuck("human_blocker", pack, pack.ended_at, reason, action, TaskStatus.COMPLETED, pack)


def _integration_item(row: integrations.Waiting) -> r.StuckItem:
    reason = f"Approved work waits to be merged into {row.ref}: {row.waiting}."
    action = "Do what the reason says (commit or stash the checkout's changes, remove a stale lock); JCT retries."
    return _stuck("integration_waiting", row, row.queued_at, reason, action, TaskStatus.COMPLETED, row)


def _dependency_item(row: q.FailedDependency) -> r.StuckItem:
    dependency = row.dependency_id
    reason = f"Waits for task {dependency}, which is {row.dependency_status}."
    action = f"Requeue {dependency} (jct_requeue_task) or cancel this task (jct_cancel_task)."
    item = _stuck("failed_dependency", row, row.queued_at, reason, action, TaskStatus.BLOCKED)
    item.dependency_id = dependency
    return item


def _budget_item(row: outcomes.SpentMission) -> r.StuckItem:
    spent, hint = budget.spent_text(row), budget.raise_hint(row.id)
    reason = f"Mission {row.id} has spent its budget ({spent}): {row.waiting} queued task(s) are not handed out."
    first = q.StuckTask(task_id=row.first_task_id, objective=row.objective)
    item = _stuck("mission_budget_spent", first, row.queued_at, reason, hint, TaskStatus.QUEUED)
    item.mission_id = row.id
    return item


THROUGHPUT_PAGE = 500


async def throughput(core: Core, *, window_seconds: int = 3600, buckets: int = 12) -> r.Throughput:
    """Tasks completed and failed in each of `buckets` intervals of the last `window_seconds`. Each action's
    rows are walked newest first a page at a time and the walk stops at the window's start, so the cost is
    what ended within the window, never the size of the log."""
    size = window_seconds // buckets
    counts = {AuditAction.TASK_COMPLETED: [0] * buckets, AuditAction.TASK_FAILED: [0] * buckets}
    async with core.db.read() as conn:
        now = await q.clock(conn, core.now())
        start = now - timedelta(seconds=window_seconds)
        for action, series in counts.items():
            before = None
            while True:
                rows = await q.recent_of_action(conn, action.value, before, THROUGHPUT_PAGE)
                for _, ts in rows:
                    if ts >= start:
                        series[min(buckets - 1, int((ts - start).total_seconds()) // size)] += 1
                if len(rows) < THROUGHPUT_PAGE or rows[-1][1] < start:
                    break
                before = rows[-1][0]
    return r.Throughput(
        bucket_seconds=size, completed=counts[AuditAction.TASK_COMPLETED], failed=counts[AuditAction.TASK_FAILED]
    )


class _Task(Protocol):
    """A stuck item's task as a row names it."""

    @property
    def task_id(self) -> str: ...
    @property
    def objective(self) -> str: ...


class _Run(Protocol):
    """A stuck item's run and its agent, as a row names them."""

    @property
    def run_id(self) -> str: ...
    @property
    def actor_id(self) -> str: ...


def _stuck(
    kind: r.StuckKind,
    task: _Task,
    since: datetime,
    reason: str,
    action: str,
    status: TaskStatus,
    run: _Run | None = None,
) -> r.StuckItem:
    """A stuck item from a row JCT read itself (its task, and its run and agent when it has one): built without
    validating again (a busy queue has thousands)."""
    return r.StuckItem.model_construct(
        kind=kind,
        task_id=task.task_id,
        objective=_clip(task.objective, 200),
        run_id=run.run_id if run is not None else None,
        agent=run.actor_id if run is not None else None,
        since=since,
        reason=reason,
        action=action,
        task_status=status,
        dependency_id=None,
    )


def _at(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


async def search_audit(
    core: Core,
    *,
    actor_id: str | None = None,
    action: str | None = None,
    entity_kind: str | None = None,
    since: str | None = None,
    until: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> r.AuditTrail:
    """Audit rows matching every filter given, newest first, a keyset page at a time."""
    check_limit(limit, 200)
    if actor_id is not None:
        check_text(actor_id, "actor_id", 256, single_line=True)
    if action is not None:
        action = parse_enum(AuditAction, action, "action").value
    kind = parse_enum(EntityKind, entity_kind, "entity_kind").value if entity_kind is not None else None
    start, end = parse_moment(since, "since"), parse_moment(until, "until")
    before_id = None
    if cursor is not None:
        (before_id,) = decode_cursor(cursor, "serial")
    async with core.db.read() as conn:
        rows = await q.search_audit(
            conn,
            actor_id=actor_id,
            action=action,
            entity_kind=kind,
            since=start,
            until=end,
            before_id=before_id,
            limit=limit + 1,
        )
    page = rows[:limit]
    next_cursor = encode_cursor(page[-1]["id"]) if len(rows) > limit else None
    return r.AuditTrail(entries=[views.audit_entry(row) for row in page], count=len(page), next_cursor=next_cursor)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
