"""Moving JCT to another database: every table, ids and all, into an empty one (`jct db copy`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from server.db.copy import BATCH_SIZE, CopyError, CopyReport, TraceMove, copy_database

__all__ = ["BATCH_SIZE", "CopyError", "CopyReport", "TraceMove", "copy"]


async def copy(
    source_url: str,
    target_url: str,
    *,
    trace_root: Path | None = None,
    batch_size: int = BATCH_SIZE,
    on_table: Callable[[str, int], None] | None = None,
) -> CopyReport:
    """Copy every row of `source_url` into the empty JCT database at `target_url`, in one transaction on the
    target; `trace_root` also copies stored artifact content there. CopyError says why a copy cannot go ahead."""
    return await copy_database(source_url, target_url, trace_root=trace_root, batch_size=batch_size, on_table=on_table)
