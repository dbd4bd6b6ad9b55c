"""Moving JCT to another database: every table, ids and all, into an empty one (`jct db copy`)."""

from __future__ import annotations

from server.db.copy import BATCH_SIZE, CopyError, CopyReport, TraceMove, copy_database

__all__ = ["BATCH_SIZE", "CopyError", "CopyReport", "TraceMove", "copy"]


# The copy itself is a matter of statements (server/db/copy.py); core re-exports it for the CLI.
copy = copy_database
