"""Which resource URIs one audit row touches, and whether it changes the listed set."""

from __future__ import annotations

from dataclasses import dataclass, field

from server import uris as pages
from server.core.audit import LISTED
from server.core.feed import AuditChange


@dataclass
class Changes:
    """One batch of audit rows, as notifications: URIs updated, and whether the list changed."""

    uris: set[str] = field(default_factory=set)
    list_changed: bool = False

    def add(self, row: AuditChange) -> None:
        action, kind = row.action, row.entity_kind
        if kind in pages.TEMPLATES:
            self.uris.add(pages.of(kind, row.entity_id))
        run_id = row.after.get("run_id") if row.after is not None else None
        if run_id:
            # Artifacts, evidence and task transitions all show on their run's page.
            self.uris.add(pages.run(str(run_id)))
        if kind == "Task":
            self.uris.add(pages.QUEUE)
        if row.mission_id is not None:
            self.uris.add(pages.mission(row.mission_id))
        if kind == "EvidencePack":
            self.uris.add(pages.PENDING_REVIEWS)
        if action in LISTED:
            self.list_changed = True

    def __bool__(self) -> bool:
        return bool(self.uris) or self.list_changed
