"""What the claim of either dialect shares: the request, the claimed row's columns, the budget and filter
conditions of claim-next, and the audit rows a claim writes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Self

from sqlalchemy import bindparam, text
from sqlalchemy.ext.asyncio import AsyncConnection

from server.db.records import Asked, HeldBack, IssueId, JsonObject, Record, RunId, TaskId


@dataclass(frozen=True)
class ClaimRequest:
    run_id: str
    actor_id: str
    principal: str
    claim_session: str | None
    actor_kind: str
    executor: dict[str, str]
    lease_seconds: float
    artifact_root_uri: str
    task_id: str | None = None  # claim this task; None = claim the best eligible one
    operation: str | None = None
    repo_prefix: str | None = None
    # With tokens on, the most running claims one principal may hold (JCT_MAX_CLAIMS_PER_AGENT); None: no cap.
    max_claims: int | None = None
    # The SHA-256 of the claim key the caller gets with its run_id (no tokens); None with tokens.
    claim_key: str | None = None


# How many of its mission's decisions a claim of a mission's task carries, newest first.
DECISIONS_SHOWN = 10

# What a claim hands back: the task's columns, the run's attempt and lease, and the briefing
# (latest context packet and constraint snapshot, prefixed), in one flat row.
TASK_COLUMNS = (
    "id",
    "issue_id",
    "trace_id",
    "attempts",
    "objective",
    "operation",
    "target_repo",
    "target_ref",
    "target_path",
    "time_budget_seconds",
    "constraint_snapshot_id",
    "active_run_id",
    "mission_id",
    "touches",
)
PACKET_COLUMNS = (
    "id",
    "version",
    "summary",
    "prior_art",
    "files_of_interest",
    "acceptance_criteria",
    "data",
    "review_feedback",
)
SNAPSHOT_COLUMNS = ("id", "scope", "time_budget_seconds", "allow_network", "allow_secrets", "allowed_paths")
BRIEFING_SQL = ", ".join(
    [f"packet.{c} AS packet_{c}" for c in PACKET_COLUMNS] + [f"snapshot.{c} AS snapshot_{c}" for c in SNAPSHOT_COLUMNS]
)


class Claimed(Record, Asked):
    """A claim as `claim` hands it back: the task's TASK_COLUMNS, the run's attempt and lease, the briefing (the
    latest context packet and the constraint snapshot, None where the task has none) and its mission's
    decisions so far, newest first."""

    id: TaskId
    issue_id: IssueId | None
    trace_id: str
    attempts: int
    objective: str
    constraint_snapshot_id: str | None
    active_run_id: RunId
    mission_id: str | None
    touches: list[str] | None
    attempt: int
    lease_expires_at: datetime
    packet: JsonObject | None
    snapshot: JsonObject | None
    decisions: list[JsonObject]

    @classmethod
    def of_flat(cls, row: dict[str, Any]) -> Self:
        """From the flat row both dialects' statements return (the briefing's columns prefixed)."""
        fields: dict[str, Any] = {}
        packet: dict[str, Any] = {}
        snapshot: dict[str, Any] = {}
        for key, value in row.items():
            if key.startswith("packet_"):
                packet[key.removeprefix("packet_")] = value
            elif key.startswith("snapshot_"):
                snapshot[key.removeprefix("snapshot_")] = value
            else:
                fields[key] = value
        fields["packet"] = packet if packet.get("id") is not None else None
        fields["snapshot"] = snapshot if snapshot.get("id") is not None else None
        return cls.model_validate(fields)


# A mission's budget is spent once what its runs reported reaches either limit (NULL: no limit, never true).
# Both sums move in the transaction of each report (server/db/changes/ Spend).
SPENT = "(m.spent_cost_usd >= m.max_cost_usd OR m.spent_tokens >= m.max_tokens)"

# Not a task of a mission whose budget is spent: such tasks are passed over, never handed out. A scalar subquery,
# not NOT EXISTS: PostgreSQL turns that into a hashed subplan that reads every spent mission on each claim; this is
# one primary-key read per mission task the claim looks at (none for a task of no mission). NULL (no limit) is
# not spent.
WITHIN_BUDGET = (
    f" AND (tasks.mission_id IS NULL OR (SELECT {SPENT} FROM missions m WHERE m.id = tasks.mission_id) IS NOT TRUE)"
)


def _like_prefix(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def next_filters(req: ClaimRequest, *, sqlite: bool) -> tuple[str, dict[str, Any]]:
    """Claim-next's conditions after `status = 'queued'`, from fixed strings only, and their bound values."""
    filters, values = _asked(req.operation, req.repo_prefix, sqlite=sqlite)
    return WITHIN_BUDGET + filters, values


def _asked(operation: str | None, repo_prefix: str | None, *, sqlite: bool) -> tuple[str, dict[str, Any]]:
    """The conditions a claim-next's filters add, and their bound values."""
    filters = ""
    values: dict[str, Any] = {}
    if operation is not None:
        filters += " AND tasks.operation = :operation"
        values["operation"] = operation
    if repo_prefix is None:
        return filters, values
    if sqlite:
        # Not LIKE: SQLite's LIKE ignores ASCII case, PostgreSQL's does not. substr() compares exactly.
        filters += " AND substr(tasks.target_repo, 1, :prefix_length) = :repo_prefix"
        return filters, values | {"prefix_length": len(repo_prefix), "repo_prefix": repo_prefix}
    filters += " AND tasks.target_repo LIKE :repo_prefix ESCAPE '\\'"
    return filters, values | {"repo_prefix": _like_prefix(repo_prefix)}


# What a refused claim names, read only when a claim found nothing: first the active missions whose budget is
# spent (ix_missions_status_created_at_id: the active ones, none to read further in the usual case), then among
# their queued tasks the one the claim would have taken, with its mission and how many of its tasks wait.
_SPENT_MISSIONS = f"SELECT m.id FROM missions m WHERE m.status = 'active' AND {SPENT} LIMIT 1000"
_HELD_BY_BUDGET = """
SELECT m.id, m.title, m.max_cost_usd, m.max_tokens, m.spent_cost_usd, m.spent_tokens,
       (SELECT count(*) FROM tasks w WHERE w.mission_id = m.id AND w.status = 'queued') AS waiting
FROM tasks JOIN missions m ON m.id = tasks.mission_id
WHERE tasks.mission_id IN :spent AND tasks.status = 'queued'{filters}
ORDER BY tasks.priority, tasks.queued_at, tasks.id
LIMIT 1"""


async def held_by_budget(
    conn: AsyncConnection, *, task_id: str | None = None, operation: str | None = None, repo_prefix: str | None = None
) -> HeldBack | None:
    """Why a claim found nothing, when it is a spent budget: the mission (id, title, budget, spending, tasks
    waiting) that holds back the task `task_id`, or else the first queued task the claim-next filters match."""
    spent = [row[0] for row in (await conn.execute(text(_SPENT_MISSIONS))).all()]
    if not spent:
        return None
    if task_id is not None:
        filters, values = " AND tasks.id = :task_id", {"task_id": task_id}
    else:
        filters, values = _asked(operation, repo_prefix, sqlite=conn.dialect.name == "sqlite")
    query = text(_HELD_BY_BUDGET.format(filters=filters)).bindparams(bindparam("spent", expanding=True))
    return HeldBack.maybe((await conn.execute(query, values | {"spent": spent})).mappings().first())


# Queued tasks the walk reads at a time.
WALK_BATCH = 64


class ClaimCapReached(Exception):
    """The principal already holds `held` running claims, `ClaimRequest.max_claims` or more: nothing was claimed."""

    def __init__(self, held: int) -> None:
        super().__init__(f"{held} claims held")
        self.held = held


def audit_row(
    req: ClaimRequest, now: datetime, action: str, kind: str, entity_id: str, before: object, trace_id: str
) -> dict[str, object]:
    if kind == "Task":
        after: dict[str, str] = {"status": "running", "run_id": req.run_id}
    else:
        before, after = {"status": "ready"}, {"status": "running"}
    return {
        "ts": now,
        "actor_kind": req.actor_kind,
        "actor_id": req.actor_id,
        "action": action,
        "entity_kind": kind,
        "entity_id": entity_id,
        "before": before,
        "after": after,
        "trace_id": trace_id,
    }
