"""Rows to the response models: one function per shape."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from server.core import results as r
from server.db.records import Record, Spending

# Rows from SQLAlchemy (RowMapping) or assembled by hand (the flat claim row): any mapping will do; or a
# record (server/db/records.py).
Row = Mapping[Any, Any]
RowMapping = Row | Record
M = TypeVar("M", bound=BaseModel)


def _validator(model: type[M]) -> Callable[[RowMapping], M]:
    """The function that validates a row into `model`, field by field as the model declares them."""

    def validate(row: RowMapping) -> M:
        return model.model_validate(columns(row))

    return validate


def columns(row: RowMapping) -> dict[Any, Any]:
    return row.columns() if isinstance(row, Record) else dict(row)


def constraints(snapshot: Row | None, time_budget_seconds: int) -> r.Constraints:
    """A task's constraints: its snapshot's, else its time budget alone."""
    if snapshot is None:
        return r.Constraints(time_budget_seconds=time_budget_seconds, allow_network=False, allow_secrets=False)
    return r.Constraints(
        time_budget_seconds=snapshot["time_budget_seconds"],
        allow_network=snapshot["allow_network"],
        allow_secrets=snapshot["allow_secrets"],
        allowed_paths=snapshot["allowed_paths"],
    )


def constraint_snapshot(snapshot: Row | None, time_budget_seconds: int) -> r.ConstraintSnapshot | None:
    if snapshot is None:
        return None
    rules = constraints(snapshot, time_budget_seconds)
    return r.ConstraintSnapshot(id=snapshot["id"], scope=snapshot["scope"], rules=rules)


def context_packet(packet: Row | None) -> r.ContextPacket | None:
    if packet is None:
        return None
    return r.ContextPacket.model_validate({**packet, "review_feedback": packet["review_feedback"] or []})


# The shapes a row validates into as it is (fields by name, aliases and inheritance in server/core/results/).
task_summary = _validator(r.TaskSummary)
task_detail = _validator(r.TaskDetail)
issue = _validator(r.IssueView)
run_summary = _validator(r.RunSummary)
run_detail = _validator(r.RunDetail)
integration = _validator(r.IntegrationView)
artifact = _validator(r.ArtifactView)
run_event = _validator(r.RunEventView)
evidence_summary = _validator(r.EvidenceSummary)
evidence_detail = _validator(r.EvidencePackDetail)
audit_entry = _validator(r.AuditEntry)
pending_review = _validator(r.PendingReview)


def spent(sums: Spending) -> r.Spent:
    """What runs reported spending, summed (server/db/outcomes.py spending)."""
    return r.Spent(tokens=sums.tokens, cost_usd=sums.cost_usd, duration_seconds=sums.duration_seconds)
