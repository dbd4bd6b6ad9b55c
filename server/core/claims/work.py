"""Work on a claimed task: read the briefing, report artifacts and progress, complete or release.

Every call that changes something passes the fence first (the rule: server/core/claims/leases.py): the caller's
run must be the task's active run with a live lease. Passing it renews the lease. The fence, the facts a change
reads and its writes are one transaction: `changes.apply` (server/db/changes/).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
from sqlalchemy.ext.asyncio import AsyncConnection

from server import uris
from server.core import results
from server.core import telemetry as usage
from server.core.audit import AuditAction, audit_row
from server.core.claims import events, leases
from server.core.git import verified
from server.core.models import Actor, Limits, check_text, new_id, parse_enum, parse_id
from server.core.service import Core
from server.core.tracestore import Staged
from server.db import changes, queries
from server.db.leases import Fence
from server.db.records import Task
from server.errors import ErrorCode, JctError, invalid, task_not_found
from server.vocab import ArtifactType, EntityKind, EventKind, IssueStatus, RunStatus, TaskStatus

# --- the fence ---------------------------------------------------------------------------


async def task_row(conn: AsyncConnection, task_id: str) -> Task:
    task = await queries.get_task(conn, task_id)
    if task is None:
        raise task_not_found(task_id, "Check the task_id you were given at claim.")
    return task


async def refused(core: Core, fence: Fence) -> JctError:
    async with core.db.read() as conn:
        return await leases.refusal(core, conn, fence)


# --- report ------------------------------------------------------------------------------


async def report_artifact(
    core: Core,
    actor: Actor,
    task_id: str,
    *,
    title: str,
    artifact_type: str,
    content: str | None = None,
    uri: str | None = None,
    media_type: str = "text/plain",
    run_id: str | None = None,
) -> results.ArtifactReported:
    task_id = parse_id(task_id, "task_id")
    fence = leases.fence_for(core, actor, task_id, run_id)
    _check_title(title)
    kind = parse_enum(ArtifactType, artifact_type, "artifact_type")
    _check_media_type(media_type)
    if (content is None) == (uri is None):
        raise invalid(
            "Give exactly one of content or uri.", "Send small outputs as content, large or remote ones as uri."
        )
    data = None
    if content is not None:
        data = content.encode("utf-8", errors="replace")
        if len(data) > core.settings.max_artifact_bytes:
            raise JctError(
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"content is {len(data)} bytes; the limit is {core.settings.max_artifact_bytes} "
                "(JCT_MAX_ARTIFACT_BYTES).",
                "Report the most relevant part, split it into several artifacts, or store it elsewhere and pass uri.",
            )
    if uri is not None:
        _check_uri(uri)
    if kind is ArtifactType.COMMIT and core.repos.place_of_any():
        sha = await _verified_commit(core, fence, content if uri is None else None)
        if sha is not None:
            data = sha.encode()  # the commit it names, pinned: a branch may move on
    ts = core.now()
    artifact_id = new_id()
    staged: Staged | None = None

    def decide(facts: changes.Facts) -> tuple[list[changes.Write], results.ArtifactReported]:
        run = facts.run
        if data is not None:
            _check_run_bytes(core, facts.stored_bytes, len(data))
        size = digest = None
        stored_uri = uri
        if staged is not None:
            stored = core.store.place(run.id, staged)  # off the event loop (server/db/changes/)
            stored_uri, size, digest = stored.uri, stored.size_bytes, stored.sha256
        assert stored_uri is not None
        artifact = {
            "id": artifact_id,
            "run_id": run.id,
            "task_id": task_id,
            "title": title,
            "type": kind.value,
            "media_type": media_type,
            "uri": stored_uri,
            "stored": data is not None,
            "size_bytes": size,
            "sha256": digest,
            "created_at": ts,
        }
        after = {"run_id": run.id, "type": kind.value, "title": title, "size_bytes": size}
        audit = [audit_row(actor, AuditAction.ARTIFACT_REPORTED, EntityKind.ARTIFACT, artifact_id, None, after, None)]
        reported = results.ArtifactReported(
            artifact_id=artifact_id,
            task_id=task_id,
            run_id=run.id,
            title=title,
            type=kind.value,
            uri=uris.artifact(artifact_id) if data is not None else stored_uri,
            size_bytes=size,
            sha256=digest,
            lease_expires_at=run.lease_expires_at,
        )
        return [changes.insert_artifact(artifact), changes.insert_audit(audit)], reported

    try:
        if data is not None:  # its fsync here, outside the write lock; the transaction renames it (tracestore.py)
            staged = await anyio.to_thread.run_sync(core.store.stage, title, data)
        # Only a stored artifact's decide touches the disk (it renames the staged file into the run).
        changed = await changes.apply(core.db, fence, decide, blocking=data is not None)
    finally:
        if staged is not None:
            core.store.discard(staged)  # one unlink, and none once placed
    if changed is None:
        raise await refused(core, fence)
    core.holdings.hold(changed.result.run_id)  # a run named from another connection is held by this one now
    return changed.result


async def _verified_commit(core: Core, fence: Fence, content: str | None) -> str | None:
    """A commit artifact of a verifiable task: the commit it names, read in the repository and checked
    against the run's base commit (server/core/git/verified.py). None when the task is not verifiable."""
    async with core.db.read() as conn:
        task = await queries.get_task(conn, fence.task_id)
        run = await leases.open_run(core, conn, fence)
    if task is None or run is None:
        return None  # the fenced change refuses it and says why
    return await verified.verify_commit(core, task, run, content)


def _check_run_bytes(core: Core, stored: int, adding: int) -> None:
    cap = core.settings.max_run_artifact_bytes
    if stored + adding > cap:
        raise JctError(
            ErrorCode.PAYLOAD_TOO_LARGE,
            f"This run has stored {stored} bytes of artifacts; {adding} more would pass its limit of {cap} "
            "(JCT_MAX_RUN_ARTIFACT_BYTES). Nothing was recorded.",
            "Report only what a reviewer needs (a diff, a test summary), or store large outputs elsewhere and "
            "pass uri.",
        )


def _check_title(title: str) -> None:
    check_text(title, "title", Limits.TITLE, single_line=True)
    stripped = title.strip()
    if ".." in stripped or stripped.startswith(("/", "\\", "~")):
        raise invalid(
            f"title {title[:80]!r} looks like a path.", "Titles are names, e.g. 'Code changes' or 'Test log'."
        )


def _check_media_type(media_type: str) -> None:
    check_text(media_type, "media_type", Limits.MEDIA_TYPE, single_line=True)
    main, sep, sub = media_type.partition("/")
    if not sep or not main or not sub or " " in media_type:
        raise invalid(f"media_type {media_type!r} is not a MIME type.", "Use e.g. text/plain or text/x-diff.")


def _check_uri(uri: str) -> None:
    check_text(uri, "uri", Limits.URI, single_line=True)
    parts = urlsplit(uri)
    if not parts.scheme or parts.scheme.lower() == "file" or (not parts.netloc and parts.scheme not in ("urn",)):
        raise invalid(
            f"uri {uri[:80]!r} is not a remote URI (file:// and bare paths are refused).",
            "Send the content inline, or a URI such as https://... that others can reach.",
        )


async def report_progress(
    core: Core,
    actor: Actor,
    task_id: str,
    *,
    message: str,
    progress: int | None = None,
    kind: str = "progress",
    run_id: str | None = None,
    data: object = None,
    telemetry: object = None,
) -> results.ProgressReported:
    task_id = parse_id(task_id, "task_id")
    fence = leases.fence_for(core, actor, task_id, run_id)
    check_text(message, "message", Limits.MESSAGE)
    event_kind = parse_enum(EventKind, kind, "kind")
    if progress is not None and not 0 <= progress <= 100:
        raise invalid(f"progress {progress} is outside 0..100.", "Give a percentage from 0 to 100, or omit it.")
    checked = events.check_data(event_kind, message, data)
    spent = usage.check(telemetry)
    ts = core.now()

    def decide(facts: changes.Facts) -> tuple[list[changes.Write], results.ProgressReported]:
        run = facts.run
        lease = run.lease_expires_at
        assert lease is not None  # the fence has just renewed it
        event = {
            "run_id": run.id,
            "kind": event_kind.value,
            "message": message,
            "progress": progress,
            "data": checked,
            "created_at": ts,
        }
        after = {
            "kind": event_kind.value,
            "progress": progress,
            "lease_expires_at": lease.isoformat(),
        }
        audit = [audit_row(actor, AuditAction.RUN_PROGRESS, EntityKind.RUN, run.id, None, after, None)]
        reported = results.ProgressReported(event_id=0, task_id=task_id, run_id=run.id, lease_expires_at=lease)
        writes: list[changes.Write] = [changes.insert_run_event(event), changes.insert_audit(audit)]
        # One update of the run at most: PostgreSQL runs the writes as one statement, in which a row is
        # updated once.
        run_values: dict[str, Any] = {}
        if spent:
            # Summed on the run under the fence's row lock, so two reports cannot lose one another.
            run_values["telemetry"] = total = usage.add(run.telemetry, spent)
            run_values |= usage.run_columns(total)
            if rows := usage.totals_rows(spent):
                writes.append(changes.insert_telemetry_deltas(rows))
            if facts.mission_id:
                # The mission's spending, which its budget is checked against, in the same transaction.
                writes.append(changes.Spend(facts.mission_id, *usage.spend(spent)))
        if events.needs_a_person(event_kind, checked):
            # Only a person lifts it: the run is never approved automatically (server/core/review/prover.py).
            run_values["requires_human"] = True
        if run_values:
            writes.append(changes.update_run(run.id, run_values, status_in=(RunStatus.RUNNING,)))
        return writes, reported

    # A note may be lost without harm (a database crash within a fraction of a second of it): no WAL flush is
    # waited for. One that asks for a person is kept as durably as a claim.
    durable = events.needs_a_person(event_kind, checked)
    changed = await changes.apply(core.db, fence, decide, durable=durable, blocking=False)
    if changed is None:
        raise await refused(core, fence)
    assert changed.inserted_id is not None
    core.holdings.hold(changed.result.run_id)
    return changed.result.model_copy(update={"event_id": changed.inserted_id})


# --- release -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Release:
    """What giving a claim back writes, by its agent (release_task) or by an operator (server/core/operators/
    claims.py): the run released, the task back in the queue with no attempt counted, its issue ready."""

    run: dict[str, Any]
    task: dict[str, Any]
    issue: dict[str, Any] | None
    audit: list[dict[str, Any]]

    @classmethod
    def of(
        cls, actor: Actor, task_id: str, run_id: str, issue_id: str | None, reason: str, ts: Any, trace: str | None
    ) -> Release:
        running = {"status": RunStatus.RUNNING}
        audit = [
            audit_row(
                actor,
                AuditAction.TASK_RELEASED,
                EntityKind.TASK,
                task_id,
                {"status": TaskStatus.RUNNING, "run_id": run_id},
                {"status": TaskStatus.QUEUED, "reason": reason},
                trace,
            ),
            audit_row(
                actor, AuditAction.RUN_RELEASED, EntityKind.RUN, run_id, running, {"status": RunStatus.RELEASED}, None
            ),
        ]
        issue = None
        if issue_id is not None:
            ready = {"status": IssueStatus.READY}
            issue = {**ready, "updated_at": ts}
            audit.append(audit_row(actor, AuditAction.ISSUE_READY, EntityKind.ISSUE, issue_id, running, ready, None))
        return cls(
            run={"status": RunStatus.RELEASED, "ended_at": ts, "failure": {"released": reason}},
            task={"status": TaskStatus.QUEUED, "active_run_id": None, "claimed_at": None},
            issue=issue,
            audit=audit,
        )


async def release_task(
    core: Core, actor: Actor, task_id: str, reason: str, *, run_id: str | None = None
) -> results.Released:
    task_id = parse_id(task_id, "task_id")
    fence = leases.fence_for(core, actor, task_id, run_id)
    check_text(reason, "reason", Limits.REASON)
    ts = core.now()

    def decide(facts: changes.Facts) -> tuple[list[changes.Write], results.Released]:
        run = facts.run
        given = Release.of(actor, task_id, run.id, run.issue_id, reason, ts, facts.trace_id)
        writes: list[changes.Write] = [
            changes.update_run(run.id, given.run, status_in=(RunStatus.RUNNING,)),
            # Cancelled while this release waited for the run: the whole change is undone.
            changes.update_task(task_id, given.task, status_in=(TaskStatus.RUNNING,)),
        ]
        if given.issue is not None and run.issue_id is not None:
            writes.append(changes.update_issue(run.issue_id, given.issue))
        writes.append(changes.insert_audit(given.audit))
        return writes, results.Released(task_id=task_id, run_id=run.id, task_status=TaskStatus.QUEUED)

    try:
        changed = await changes.apply(core.db, fence, decide, blocking=False)
    except changes.RowMissed:
        raise JctError(
            ErrorCode.TASK_NOT_CLAIMED,
            f"Task {task_id} ended while releasing (it was cancelled); nothing was recorded.",
            "Nothing to do; use jct_get_task to see where the task stands.",
        ) from None
    if changed is None:
        raise await refused(core, fence)
    return changed.result
