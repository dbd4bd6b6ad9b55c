"""Revising a briefing without a review round: a new context packet version, by an admin or the enqueuer.

A revision copies the latest version and replaces what it is given (summary, prior art, files of interest,
acceptance criteria, data), keeping the review feedback so far. The agent working the task reads it with
jct_get_context; the prover checks the criteria of the version in force at completion."""

from __future__ import annotations

from typing import Any

from sqlalchemy.exc import IntegrityError

from server.core import results as r
from server.core import views
from server.core.audit import AuditAction, audit_row
from server.core.briefings import intake, versions
from server.core.briefings.paths import check_target_path
from server.core.models import Actor, Limits, check_text, parse_id
from server.core.service import Core
from server.db import queries
from server.errors import ErrorCode, JctError, invalid, task_not_found
from server.vocab import TASK_ENDED_UNAPPROVED, EntityKind


async def revise_briefing(
    core: Core,
    actor: Actor,
    task_id: str,
    *,
    summary: str | None = None,
    prior_art: list[str] | None = None,
    files_of_interest: list[str] | None = None,
    acceptance_criteria: list[str] | None = None,
    data: dict[str, Any] | None = None,
) -> r.ContextPacket:
    task_id = parse_id(task_id, "task_id")
    changes: dict[str, Any] = {}
    if summary is not None:
        changes["summary"] = check_text(summary, "summary", Limits.SUMMARY, required=False)
    if prior_art is not None:
        changes["prior_art"] = intake.check_prior_art(prior_art)
    if files_of_interest is not None:
        if not isinstance(files_of_interest, list) or len(files_of_interest) > Limits.PRIOR_ART:
            raise invalid(f"files_of_interest must be a list of at most {Limits.PRIOR_ART} paths.", "Name fewer.")
        changes["files_of_interest"] = [check_target_path(p) for p in files_of_interest]
    if acceptance_criteria is not None:
        changes["acceptance_criteria"] = intake.check_criteria(acceptance_criteria)
    if data is not None:
        changes["data"] = intake.check_data(data)
    if not changes:
        raise invalid(
            "Nothing to revise.", "Give at least one of summary, prior_art, files_of_interest, criteria, data."
        )
    ts = core.now()
    async with core.db.write() as conn:
        task = await queries.get_task(conn, task_id)
        if task is None:
            raise task_not_found(task_id, "Check the task_id.")
        if not actor.admin and task.requested_by != actor.actor_id:
            raise JctError(
                ErrorCode.PERMISSION_DENIED,
                f"Only an admin or the agent that enqueued task {task_id} may revise its briefing.",
                "Ask the enqueuer or an admin, or leave feedback in a review (jct_submit_review needs_changes).",
            )
        if task.status in TASK_ENDED_UNAPPROVED or task.issue_id is None:
            raise invalid(
                f"Task {task_id} is {task.status}" + (" and has no briefing." if task.issue_id is None else "."),
                "Revise the briefing of a task that is still open (queued, blocked, running or in review).",
            )
        try:
            async with conn.begin_nested():
                version = await versions.new_version(conn, task.issue_id, ts, changes=changes)
        except IntegrityError:
            raise JctError(
                ErrorCode.INVALID_ARGUMENT,
                "The briefing got a new version while this revision was made (a review asked for changes); "
                "nothing was changed.",
                "Read it again with jct_get_context and revise that version.",
            ) from None
        after = {"version": version, "revised": sorted(changes)}
        audit = audit_row(
            actor, AuditAction.BRIEFING_REVISED, EntityKind.ISSUE, task.issue_id, None, after, task.trace_id
        )
        await queries.insert_audit(conn, [audit])
        stored = await queries.latest_context_packet(conn, task.issue_id)
    assert stored is not None
    packet = views.context_packet(stored)
    assert packet is not None
    return packet
