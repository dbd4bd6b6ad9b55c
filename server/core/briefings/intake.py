"""Putting work on the queue: the policy gate every task passes, and the rows one task is stored as."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import Field

from server.core import results as r
from server.core.audit import AuditAction, audit_row
from server.core.briefings import doctrine
from server.core.briefings.paths import check_target_path, check_touches, default_touches
from server.core.git import gitcli
from server.core.git.repos import looks_local
from server.core.missions import graph
from server.core.models import Actor, Limits, check_text, new_id, parse_enum
from server.core.service import Core
from server.core.text import storable
from server.db import queries
from server.db.records import Asked, Task
from server.errors import ErrorCode, JctError, invalid
from server.vocab import EntityKind, IssueStatus, Operation, Priority, TaskStatus


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
    mission_id: str | None = None,
    phase: int | None = None,
    depends_on: list[str] | None = None,
    doctrine_refs: list[str] | None = None,
    prior_art: list[str] | None = None,
    data: dict[str, Any] | None = None,
    touches: list[str] | None = None,
) -> r.Enqueued:
    """A task on the queue, behind the policy gate; with `mission_id`, one of that mission's (DESIGN 11)."""
    deps = graph.check_placement(mission_id, phase, depends_on)
    request = gate(
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
        doctrine=doctrine_refs,
        prior_art=prior_art,
        data=data,
        touches=touches,
    )
    if idempotency_key is not None:
        check_text(idempotency_key, "idempotency_key", Limits.IDEMPOTENCY_KEY, single_line=True)
    placement = {"mission_id": mission_id, "phase": phase, "depends_on": deps} if mission_id is not None else {}
    request_hash = hashlib.sha256(json.dumps({**request.hashed(), **placement}, sort_keys=True).encode()).hexdigest()

    async with core.db.write() as conn:
        if idempotency_key is not None:
            existing = await queries.get_task_by_idempotency_key(conn, actor.claimant, idempotency_key)
            if existing is not None:
                return _duplicate(existing, request_hash)
        rows = bundle(core, actor, request, idempotency_key, request_hash)
        dependencies: list[tuple[str, str]] = []
        if mission_id is not None:
            dependencies, reblocked = await graph.place(core, conn, rows.task, mission_id, phase, deps)
            rows.audit[0]["after"] = {**rows.audit[0]["after"], "status": rows.task["status"], "mission_id": mission_id}
            rows.audit.extend(graph.reblocked_audit(actor, rows.task["id"], reblocked))
        inserted = await queries.insert_task_bundle(conn, rows)
        if not inserted:
            assert idempotency_key is not None
            winner = await queries.get_task_by_idempotency_key(conn, actor.claimant, idempotency_key)
            assert winner is not None
            return _duplicate(winner, request_hash)
        await graph.store_dependencies(conn, dependencies)
        if rows.issue is not None:
            await doctrine.link(conn, [(rows.issue["id"], request.doctrine)])
    task = rows.task
    return r.Enqueued(
        task_id=task["id"], trace_id=task["trace_id"], status=task["status"], cwom_issue_id=task["issue_id"]
    )


class Gated(Asked):
    """A task request through the policy gate, normalised: what its rows are built from."""

    objective: str
    priority: str
    acceptance_criteria: list[str]
    context_summary: str
    create_cwom: bool
    doctrine: list[str] = Field(default_factory=list)
    prior_art: list[str] = Field(default_factory=list)
    data: dict[str, Any] = Field(default_factory=dict)
    touches: list[str] | None = None  # None: not declared (its target_path's)

    def hashed(self) -> dict[str, Any]:
        """The request as its idempotency hash reads it: every field, doctrine, prior_art, data and touches only
        when given, so a request without them hashes as it always did (stored keys stay valid)."""
        absent = {name for name in ("doctrine", "prior_art", "data") if not getattr(self, name)}
        return self.model_dump(exclude=absent | ({"touches"} if self.touches is None else set()))


def gate(core: Core, **fields: Any) -> Gated:
    """The policy gate: every rule a task must meet before it is stored. Returns the normalised request."""
    operation = parse_enum(Operation, fields["operation"], "operation")
    priority = parse_enum(Priority, fields["priority"], "priority")
    budget = check_time_budget(fields["time_budget_seconds"])
    objective = check_text(fields["objective"], "objective", Limits.OBJECTIVE).strip()
    repo = check_text(fields["target_repo"], "target_repo", Limits.REPO, single_line=True).strip()
    allowed = core.settings.allowed_repo_prefixes
    if allowed and not any(repo.startswith(prefix) for prefix in allowed):
        raise JctError(
            ErrorCode.REPO_NOT_ALLOWED,
            f"Repository {repo!r} is not under an allowed prefix.",
            f"Use a repository starting with one of: {', '.join(allowed)} (JCT_ALLOWED_REPO_PREFIXES).",
        )
    if core.settings.auth == "token" and looks_local(repo):
        raise JctError(
            ErrorCode.REPO_NOT_ALLOWED,
            f"target_repo {repo!r} is a path on the server's disk; with tokens on, JCT reads only the "
            "repositories configured in JCT_REPOS.",
            "Name the repository as the team's prefix plus its name (e.g. myorg/api), as JCT_REPOS configures it.",
        )
    ref = check_text(fields["target_ref"], "target_ref", Limits.REF, single_line=True).strip()
    if " " in ref:
        raise invalid(f"target_ref {ref!r} contains spaces.", "Pass a branch, tag or commit name.")
    # The ref JCT resolves at claim: one git accepts as a ref, never an option or a range, refused here rather
    # than stored and found unusable at claim (where verification would be silently off for the run).
    ref = gitcli.check_ref(ref, "target_ref")
    path = check_target_path(fields["target_path"])
    criteria = check_criteria(fields["acceptance_criteria"])
    summary = check_text(fields["context_summary"], "context_summary", Limits.SUMMARY, required=False)
    refs = doctrine.check_refs(fields.get("doctrine"))
    if refs and not fields["create_cwom"]:
        raise invalid("doctrine needs the issue (create_cwom=true).", "Keep create_cwom true, or drop doctrine.")
    touches = fields.get("touches")
    return Gated(
        objective=objective,
        operation=operation.value,
        target_repo=repo,
        target_ref=ref,
        target_path=path,
        time_budget_seconds=budget,
        priority=priority.value,
        acceptance_criteria=criteria,
        context_summary=summary,
        create_cwom=fields["create_cwom"],
        doctrine=refs,
        prior_art=check_prior_art(fields.get("prior_art")),
        data=check_data(fields.get("data")),
        touches=check_touches(touches) if touches is not None else None,
    )


def check_time_budget(budget: object) -> int:
    """A task's time budget: whole seconds (a mission's tasks come as plain JSON, where 600.0 is whole too), within
    Limits.MIN_BUDGET..MAX_BUDGET."""
    if isinstance(budget, float) and budget.is_integer():
        budget = int(budget)
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise invalid(
            f"time_budget_seconds must be a whole number of seconds; got {budget!r}."[:300], "Send e.g. 3600."
        )
    if not Limits.MIN_BUDGET <= budget <= Limits.MAX_BUDGET:
        raise JctError(
            ErrorCode.BUDGET_OUT_OF_RANGE,
            f"time_budget_seconds {budget} is outside {Limits.MIN_BUDGET}..{Limits.MAX_BUDGET}.",
            f"Pick a budget between {Limits.MIN_BUDGET} seconds and {Limits.MAX_BUDGET} (24 hours).",
        )
    return budget


def check_prior_art(prior_art: object) -> list[str]:
    """Earlier work the agent should know of (links, commits, issues), one line each."""
    if prior_art is None:
        return []
    if not isinstance(prior_art, list):
        raise invalid("prior_art must be a list of texts.", 'Send e.g. ["PR #12 tried this and was reverted"].')
    if len(prior_art) > Limits.PRIOR_ART:
        raise invalid(f"prior_art has {len(prior_art)} entries; the limit is {Limits.PRIOR_ART}.", "Keep what matters.")
    return [check_text(p, f"prior_art[{i}]", Limits.PRIOR_ART_ITEM).strip() for i, p in enumerate(prior_art)]


def check_criteria(criteria: object) -> list[str]:
    """The checkable statements a task is done by, one text each."""
    if not isinstance(criteria, list):
        raise invalid("acceptance_criteria must be a list of texts.", 'Send e.g. ["GET /health returns 200"].')
    if len(criteria) > Limits.CRITERIA:
        raise invalid(f"{len(criteria)} acceptance criteria; the limit is {Limits.CRITERIA}.", "Merge or trim them.")
    return [check_text(c, f"acceptance_criteria[{i}]", Limits.CRITERION).strip() for i, c in enumerate(criteria)]


def check_data(data: object) -> dict[str, Any]:
    """Structured facts for the briefing: a JSON object JCT can store, at most Limits.DATA_CHARS as JSON."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise invalid("data must be a JSON object.", 'Send e.g. {"endpoint": "/signup", "status": 400}.')
    storable(data, "data")
    if len(json.dumps(data)) > Limits.DATA_CHARS:
        raise invalid(f"data is larger than {Limits.DATA_CHARS:,} characters as JSON.", "Keep data to a few facts.")
    return data


def bundle(
    core: Core,
    actor: Actor,
    req: Gated,
    key: str | None,
    request_hash: str | None,
    *,
    task_id: str | None = None,
) -> queries.TaskBundle:
    """The rows a gated request is stored as (a queued task; missions make theirs blocked where they wait)."""
    ts = core.now()
    task_id, trace_id = task_id or new_id(), new_id()
    issue = packet = snapshot = None
    audit = []
    if req.create_cwom:
        issue_id, snapshot_id = new_id(), new_id()
        title = req.objective.splitlines()[0][: Limits.TITLE]
        issue = {
            "id": issue_id,
            "title": title,
            "type": req.operation,
            "priority": req.priority,
            "status": IssueStatus.READY,
            "acceptance_criteria": req.acceptance_criteria,
            "created_at": ts,
            "updated_at": ts,
        }
        packet = {
            "id": new_id(),
            "issue_id": issue_id,
            "version": 1,
            "summary": req.context_summary,
            "prior_art": req.prior_art,
            "files_of_interest": [req.target_path] if req.target_path else [],
            "acceptance_criteria": req.acceptance_criteria,
            "data": req.data,
            "review_feedback": None,
            "created_at": ts,
        }
        snapshot = {
            "id": snapshot_id,
            "issue_id": issue_id,
            "scope": "run",
            "time_budget_seconds": req.time_budget_seconds,
            "allow_network": False,
            "allow_secrets": False,
            "allowed_paths": [req.target_path] if req.target_path else [],
            "created_at": ts,
        }
        ready = {"status": IssueStatus.READY}
        audit.append(audit_row(actor, AuditAction.ISSUE_CREATED, EntityKind.ISSUE, issue_id, None, ready, trace_id))
    task = {
        "id": task_id,
        "operation": req.operation,
        "objective": req.objective,
        "target_repo": req.target_repo,
        "target_ref": req.target_ref,
        "target_path": req.target_path,
        "priority": req.priority,
        "time_budget_seconds": req.time_budget_seconds,
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
        "queued_at": ts,
        # Declared (an empty list: none), else its target_path's.
        "touches": (req.touches or None) if req.touches is not None else default_touches(req.target_path),
    }
    after = {"status": TaskStatus.QUEUED, "priority": req.priority, "operation": req.operation}
    audit.insert(0, audit_row(actor, AuditAction.TASK_ENQUEUED, EntityKind.TASK, task_id, None, after, trace_id))
    return queries.TaskBundle(task, issue, packet, snapshot, audit)


def _duplicate(existing: Task, request_hash: str) -> r.Enqueued:
    if existing.request_hash != request_hash:
        raise JctError(
            ErrorCode.IDEMPOTENCY_CONFLICT,
            f"idempotency_key was already used for task {existing.id} with a different payload.",
            "Use a new idempotency_key for a different task, or resend the original payload unchanged.",
        )
    return r.Enqueued(
        task_id=existing.id,
        trace_id=existing.trace_id,
        status=existing.status,
        cwom_issue_id=existing.issue_id,
        duplicate=True,
    )
