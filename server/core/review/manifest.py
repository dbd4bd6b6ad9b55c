"""The trace store's manifest: what a run left behind, written beside its artifacts when it completes.

`runs/<run_id>/manifest.json` names every artifact of the run (its file in the store, or its remote URI,
with size and sha256), the evidence pack and the verdict, so a trace directory explains itself without the
database. The run's page (jct://runs/{id}) serves it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from typing import Any

import anyio

from server.core import results
from server.core.service import Core
from server.db import changes, queries
from server.db.records import Reported, Run
from server.uris import artifact as artifact_uri

log = logging.getLogger(__name__)

VERSION = 1


def build(
    core: Core,
    run: Run,
    artifacts: Sequence[Reported],
    *,
    run_status: str,
    ended_at: datetime | None,
    evidence_pack_id: str | None,
    verdict: str | None,
) -> dict[str, Any]:
    """`artifacts`: oldest first."""
    run_id = run.id
    entries = []
    for row in artifacts:
        entries.append(
            {
                "id": row.id,
                "title": row.title,
                "type": row.type,
                "media_type": row.media_type,
                "uri": artifact_uri(row.id) if row.stored else row.uri,
                "file": core.store.file_in_run(run_id, row.uri) if row.stored else None,
                "size_bytes": row.size_bytes,
                "sha256": row.sha256,
            }
        )
    return {
        "manifest_version": VERSION,
        "run_id": run_id,
        "task_id": run.task_id,
        "issue_id": run.issue_id,
        "run_status": run_status,
        "ended_at": ended_at.isoformat() if ended_at is not None else None,
        "evidence_pack_id": evidence_pack_id,
        "verdict": verdict,
        "artifacts": entries,
        "total_bytes": sum(e["size_bytes"] or 0 for e in entries if e["file"] is not None),
    }


async def record_completion(core: Core, facts: changes.Facts, done: results.Completion) -> None:
    """Write the manifest of the run a completion just ended, from what its transaction read (the run, its
    artifacts, the clock) and wrote (the run's status, the evidence pack): no read after the commit. Handed off
    (server/core/handoff.py): the agent's answer does not wait for the file."""

    def manifest() -> dict[str, Any]:
        return build(
            core,
            facts.run,
            facts.artifacts,
            run_status=done.run_status,
            ended_at=facts.now,
            evidence_pack_id=done.evidence_pack.id,
            verdict=done.evidence_pack.verdict,
        )

    await core.handoffs.hand_off(done.run_id, partial(_write, core, done.run_id, manifest))


async def record(core: Core, run_id: str, *, only_if_missing: bool = False) -> None:
    """Write the run's manifest from what the database holds, if the run completed (it has an evidence pack): a
    retried completion, or a page, finding the first manifest lost (a full disk, or a process that stopped before
    it wrote what it was handed). A disk that fails here costs the file, never the completion (the page says no
    manifest was written)."""
    await core.handoffs.settled(run_id)  # the first completion's write, if this process still has it to do
    try:
        if only_if_missing and await anyio.to_thread.run_sync(core.store.read_manifest, run_id) is not None:
            return
        async with core.db.read() as conn:
            run = await queries.get_run(conn, run_id)
            if run is None:
                return
            pack = await queries.evidence_pack_for_run(conn, run_id)
            if pack is None:
                return  # the run ended without a completion: it has no manifest
            artifacts = await queries.artifacts_of_run(conn, run_id)
    except OSError as exc:
        log.warning("trace manifest of run %s not written: %s", run_id, exc)
        return

    def manifest() -> dict[str, Any]:
        return build(
            core,
            run,
            artifacts,
            run_status=run.status,
            ended_at=run.ended_at,
            evidence_pack_id=pack.id,
            verdict=pack.verdict,
        )

    await _write(core, run_id, manifest)


async def _write(core: Core, run_id: str, manifest: Callable[[], dict[str, Any]]) -> None:
    """Build and write the manifest off the event loop; a disk that fails costs the file, logged."""

    def write() -> None:
        core.store.write_manifest(run_id, manifest())

    try:
        await anyio.to_thread.run_sync(write)
    except OSError as exc:
        log.warning("trace manifest of run %s not written: %s", run_id, exc)


async def read(core: Core, run_id: str) -> dict[str, Any] | None:
    """The manifest of a run that has ended. One its completion did not leave (the process that was to write it
    stopped first, another process has yet to, or the disk was full) is written now from the database."""
    await core.handoffs.settled(run_id)  # written after the completion answered: not read half done
    found = await _read(core, run_id)
    if found is None:  # just read as missing: written without reading it again
        await record(core, run_id)
        found = await _read(core, run_id)
    return found


async def _read(core: Core, run_id: str) -> dict[str, Any] | None:
    try:
        return await anyio.to_thread.run_sync(core.store.read_manifest, run_id)
    except OSError as exc:
        log.warning("trace manifest of run %s not read: %s", run_id, exc)
        return None
