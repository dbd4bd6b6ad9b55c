"""The trace store's manifest: what a run left behind, written beside its artifacts when it completes.

`runs/<run_id>/manifest.json` names every artifact of the run (its file in the store, or its remote URI,
with size and sha256), the evidence pack and the verdict, so a trace directory explains itself without the
database. The run's page (jct://runs/{id}) serves it."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import anyio
from sqlalchemy import RowMapping

from server.core.service import Core
from server.db import queries
from server.db.records import EvidencePack, Run
from server.uris import artifact as artifact_uri

log = logging.getLogger(__name__)

VERSION = 1


def build(core: Core, run: Run, artifacts: Sequence[RowMapping], pack: EvidencePack | None) -> dict[str, Any]:
    entries = []
    for row in artifacts:
        entries.append(
            {
                "id": row["id"],
                "title": row["title"],
                "type": row["type"],
                "media_type": row["media_type"],
                "uri": artifact_uri(row["id"]) if row["stored"] else row["uri"],
                "file": core.store.file_in_run(run.id, row["uri"]) if row["stored"] else None,
                "size_bytes": row["size_bytes"],
                "sha256": row["sha256"],
            }
        )
    return {
        "manifest_version": VERSION,
        "run_id": run.id,
        "task_id": run.task_id,
        "issue_id": run.issue_id,
        "run_status": run.status,
        "ended_at": run.ended_at.isoformat() if run.ended_at is not None else None,
        "evidence_pack_id": pack.id if pack is not None else None,
        "verdict": pack.verdict if pack is not None else None,
        "artifacts": entries,
        "total_bytes": sum(e["size_bytes"] or 0 for e in entries if e["file"] is not None),
    }


async def record(core: Core, run_id: str, *, only_if_missing: bool = False) -> None:
    """Write the run's manifest from what the database holds. Called after the completion committed: a disk
    that fails here costs the file, never the completion (the page says no manifest was written)."""
    try:
        if only_if_missing and await anyio.to_thread.run_sync(core.store.read_manifest, run_id) is not None:
            return
        async with core.db.read() as conn:
            run = await queries.get_run(conn, run_id)
            if run is None:
                return
            artifacts = await queries.artifacts_of_run(conn, run_id)
            pack = await queries.evidence_pack_for_run(conn, run_id)
        manifest = build(core, run, artifacts, pack)
        await anyio.to_thread.run_sync(core.store.write_manifest, run_id, manifest)
    except OSError as exc:
        log.warning("trace manifest of run %s not written: %s", run_id, exc)


async def read(core: Core, run_id: str) -> dict[str, Any] | None:
    try:
        return await anyio.to_thread.run_sync(core.store.read_manifest, run_id)
    except OSError as exc:
        log.warning("trace manifest of run %s not read: %s", run_id, exc)
        return None
