"""Which resource URIs one audit row touches, and whether it changes the listed set."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from server import uris as pages
from server.core.audit import LISTED


@dataclass
class Changes:
    """One batch of audit rows, as notifications: URIs updated, and whether the list changed."""

    uris: set[str] = field(default_factory=set)
    list_changed: bool = False

    def add(self, row: Mapping[Any, Any]) -> None:
        action, kind = str(row["action"]), str(row["entity_kind"])
        if kind in pages.TEMPLATES:
            self.uris.add(pages.of(kind, str(row["entity_id"])))
        after = row["after"] or {}
        run_id = after.get("run_id") if isinstance(after, Mapping) else None
        if run_id:
            # Artifacts, evidence and task transitions all show on their run's page.
            self.uris.add(pages.run(str(run_id)))
        if kind == "Task":
            self.uris.add(pages.QUEUE)
        if kind == "EvidencePack":
            self.uris.add(pages.PENDING_REVIEWS)
        if action in LISTED:
            self.list_changed = True

    def __bool__(self) -> bool:
        return bool(self.uris) or self.list_changed
