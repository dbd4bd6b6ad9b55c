"""Read-only views: a task, a run, its evidence, an artifact's content, the audit trail."""

from __future__ import annotations

from typing import Literal

import anyio

from server.core import results, views
from server.core.briefings import doctrine as doctrine_rule
from server.core.models import parse_enum, parse_id, parse_run_id
from server.core.review import gates
from server.core.service import Core, check_limit, decode_cursor, encode_cursor
from server.db import integrations, missions, outcomes, queries
from server.db.claims import DECISIONS_SHOWN
from server.errors import ErrorCode, JctError, invalid, not_found, task_not_found
from server.vocab import EntityKind

RUN_EVENTS_SHOWN = 50
RUNS_SHOWN = 20
UPSTREAM_SHOWN = 100  # artifacts of the tasks a task depends on, in its briefing

# What an id names, with its view (`find`).
Found = (
    tuple[Literal["task"], results.TaskView]
    | tuple[Literal["run"], results.RunView]
    | tuple[Literal["evidence"], results.EvidencePackDetail]
)


async def get_context(core: Core, task_id: str) -> results.TaskContext:
    task_id = parse_id(task_id, "task_id")
    async with core.db.read() as conn:
        task = await queries.get_task(conn, task_id)
        if task is None:
            raise task_not_found(task_id, "Check the task_id you were given.")
        issue = packet = None
        doctrine: list[results.DoctrineRef] = []
        if task.issue_id is not None:
            issue_row = await queries.get_issue(conn, task.issue_id)
            issue = views.issue(issue_row) if issue_row is not None else None
            packet = await queries.latest_context_packet(conn, task.issue_id)
            doctrine = await doctrine_rule.for_issue(conn, task.issue_id, task.target_repo)
        snapshot_id = task.constraint_snapshot_id
        snapshot = await queries.get_constraint_snapshot(conn, snapshot_id) if snapshot_id else None
        mission_id = task.mission_id
        decisions = await missions.decisions_of(conn, mission_id, DECISIONS_SHOWN) if mission_id else None
        upstream = await missions.artifacts_of_dependencies(conn, task_id, UPSTREAM_SHOWN) if mission_id else []
    return results.TaskContext(
        task_id=task_id,
        issue=issue,
        context_packet=views.context_packet(packet),
        constraint_snapshot=views.constraint_snapshot(snapshot, task.time_budget_seconds),
        doctrine_refs=doctrine,
        mission_id=mission_id,
        decisions=[results.DecisionView.model_validate(d) for d in decisions] if decisions is not None else None,
        step=task.step.stored() if task.step is not None else None,
        dependency_artifacts=[
            results.UpstreamArtifact(
                artifact_id=row["id"],
                title=row["title"],
                type=row["type"],
                task_id=row["task_id"],
                step=(row["step"] or {}).get("step"),
            )
            for row in upstream
        ]
        or None,
    )


async def get_task(core: Core, task_id: str) -> results.TaskView:
    task_id = parse_id(task_id, "task_id")
    async with core.db.read() as conn:
        task = await queries.get_task(conn, task_id)
        if task is None:
            raise task_not_found(task_id)
        runs = await queries.runs_of_task(conn, task_id, RUNS_SHOWN)
        merge = await integrations.of_task(conn, task_id)
        spent = await outcomes.spent_of_task(conn, task_id)
    return results.TaskView(
        task=views.task_detail(task),
        runs=[views.run_summary(run) for run in runs],
        spent=views.spent(spent),
        integration=views.integration(merge) if merge is not None else None,
        review_round=gates.round_of(task.review_rounds, gates.gate_of(task.step, core.settings.max_review_rounds)),
    )


async def get_run(core: Core, run_id: str) -> results.RunView:
    run_id, _key = parse_run_id(run_id)
    async with core.db.read() as conn:
        run = await queries.get_run(conn, run_id)
        if run is None:
            raise not_found(ErrorCode.RUN_NOT_FOUND, "Run", run_id, "Use jct_get_task to list a task's runs.")
        artifacts = await queries.artifacts_of_run(conn, run_id)
        events = await queries.run_events(conn, run_id, RUN_EVENTS_SHOWN)
        pack = await queries.evidence_pack_for_run(conn, run_id)
        merge = (await integrations.of_runs(conn, [run_id])).get(run_id)
    return results.RunView(
        run=views.run_detail(run),
        artifacts=[views.artifact(a) for a in artifacts],
        events=[views.run_event(e) for e in events],
        evidence_pack=views.evidence_summary(pack) if pack is not None else None,
        integration=views.integration(merge) if merge is not None else None,
    )


async def get_evidence(core: Core, run_id: str) -> results.EvidenceView:
    run_id, _key = parse_run_id(run_id)
    async with core.db.read() as conn:
        pack = await queries.evidence_pack_for_run(conn, run_id)
        if pack is None:
            if await queries.get_run(conn, run_id) is None:
                raise not_found(ErrorCode.RUN_NOT_FOUND, "Run", run_id, "Check the run_id.")
            raise JctError(
                ErrorCode.EVIDENCE_PACK_NOT_FOUND,
                f"Run {run_id} has no evidence pack yet.",
                "Evidence is created when the run is completed with jct_complete_task.",
            )
        run = await queries.get_run(conn, run_id)
    detail = views.evidence_detail(pack)
    if run is not None:
        detail.files_changed = run.files_changed
    return results.EvidenceView(evidence_pack=detail)


async def find(core: Core, entity_id: str) -> Found:
    """The task, run or evidence pack `entity_id` names, whichever it is; INVALID_ARGUMENT when none."""
    try:
        return "task", await get_task(core, entity_id)
    except JctError as exc:
        if exc.code is not ErrorCode.TASK_NOT_FOUND:
            raise
    try:
        return "run", await get_run(core, entity_id)
    except JctError as err:
        if err.code is not ErrorCode.RUN_NOT_FOUND:
            raise
    async with core.db.read() as conn:
        pack = await queries.get_evidence_pack(conn, parse_id(entity_id, "id"))
    if pack is None:
        raise JctError(ErrorCode.INVALID_ARGUMENT, f"{entity_id} is not a task, run or evidence pack id.")
    return "evidence", views.evidence_detail(pack)


async def get_artifact(
    core: Core, artifact_id: str, *, offset: int = 0, max_chars: int = 20_000
) -> results.ArtifactContent:
    artifact_id = parse_id(artifact_id, "artifact_id")
    if offset < 0:
        raise invalid(f"offset {offset} is negative.", "Start at 0, or at next_offset from the previous call.")
    if not 1 <= max_chars <= 100_000:
        raise invalid(f"max_chars {max_chars} is outside 1..100000.", "Ask for at most 100,000 characters at a time.")
    async with core.db.read() as conn:
        row = await queries.get_artifact(conn, artifact_id)
    if row is None:
        raise not_found(
            ErrorCode.ARTIFACT_NOT_FOUND, "Artifact", artifact_id, "Use jct_get_run to list a run's artifacts."
        )
    view = views.artifact(row)
    if not row.stored:
        return results.ArtifactContent(artifact=view, offset=0, total_chars=0, truncated=False)
    text, total, more = await anyio.to_thread.run_sync(core.store.read_text, row.uri, offset, max_chars)
    if more:
        rest = total - offset - len(text)
        text += f"\n[... truncated: {rest} more characters; call again with offset={offset + len(text)}]"
    return results.ArtifactContent(
        artifact=view,
        content=text,
        offset=offset,
        total_chars=total,
        truncated=more,
        next_offset=offset + max_chars if more else None,
    )


async def get_audit_trail(
    core: Core, entity_kind: str, entity_id: str, *, limit: int = 50, cursor: str | None = None
) -> results.AuditTrail:
    kind = parse_enum(EntityKind, entity_kind, "entity_kind")
    entity_id = parse_id(entity_id, "entity_id")
    check_limit(limit, 200)
    after_id = None
    if cursor is not None:
        (after_id,) = decode_cursor(cursor, "serial")
    async with core.db.read() as conn:
        rows = await queries.audit_trail(conn, kind.value, entity_id, after_id, limit + 1)
    page = rows[:limit]
    next_cursor = encode_cursor(page[-1]["id"]) if len(rows) > limit else None
    return results.AuditTrail(
        entries=[views.audit_entry(row) for row in page], count=len(page), next_cursor=next_cursor
    )
