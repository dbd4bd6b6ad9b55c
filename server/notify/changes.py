"""Which resource URIs one audit row touches, and whether it changes the listed set."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

QUEUE = "jct://queue"
PENDING_REVIEWS = "jct://reviews/pending"
# Actions that add something resources/list shows (tasks, issues, runs, evidence packs).
LISTED = frozenset({"task.enqueued", "issue.created", "task.claimed", "evidence.created"})
_URI_OF = {
    "Task": "jct://tasks/{}",
    "Issue": "jct://issues/{}",
    "Run": "jct://runs/{}",
    "Artifact": "jct://artifacts/{}",
    "EvidencePack": "jct://evidence/{}",
}


@dataclass
class Changes:
    """One batch of audit rows, as notifications: URIs updated, and whether the list changed."""

    uris: set[str] = field(default_factory=set)
    list_changed: bool = False

    def add(self, row: Mapping[Any, Any]) -> None:
        action, kind = str(row["action"]), str(row["entity_kind"])
        template = _URI_OF.get(kind)
        if template is not None:
            self.uris.add(template.format(row["entity_id"]))
        after = row["after"] or {}
        run_id = after.get("run_id") if isinstance(after, Mapping) else None
        if run_id:
            # Artifacts, evidence and task transitions all show on their run's page.
            self.uris.add(f"jct://runs/{run_id}")
        if kind == "Task":
            self.uris.add(QUEUE)
        if kind == "EvidencePack":
            self.uris.add(PENDING_REVIEWS)
        if action in LISTED:
            self.list_changed = True

    def __bool__(self) -> bool:
        return bool(self.uris) or self.list_changed
