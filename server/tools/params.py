"""The parameter types tools share, with the descriptions the model reads.

Every limit core enforces (README, Input limits) is also declared in the input schema, so a client sees it
before calling; core stays the one place that checks it (and answers with JCT's own error codes), so the
schema declares it through json_schema_extra rather than a second pydantic check.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from server.core.models import Limits


def text(description: str, limit: int) -> Any:
    """A text parameter of at most `limit` characters."""
    return Field(description=description, json_schema_extra={"maxLength": limit})


def items(description: str, limit: int) -> Any:
    """A list of at most `limit` items."""
    return Field(description=description, json_schema_extra={"maxItems": limit})


def uuid(description: str) -> Any:
    """An id JCT handed out. Core checks it is a UUID (models.parse_id, INVALID_INPUT otherwise), so the schema
    carries no `format: uuid`, which clients ignore and every agent's context window would pay for."""
    return Field(description=description)


Criterion = Annotated[str, Field(json_schema_extra={"maxLength": Limits.CRITERION})]
Key = Annotated[str, Field(json_schema_extra={"maxLength": Limits.TITLE})]
PriorArt = Annotated[str, Field(json_schema_extra={"maxLength": Limits.PRIOR_ART_ITEM})]
Uuid = str  # an id core checks (see uuid)
TaskId = Annotated[str, uuid("The task's id.")]
RunId = Annotated[str, uuid("The run's id.")]
MissionId = Annotated[str, uuid("The mission's id.")]
ClaimedRun = Annotated[str | None, uuid("Your claim's run_id.")]
Operation = Literal["code_change", "docs", "analysis", "ops"]
OperationFilter = Annotated[Operation | None, Field(description="Only this kind of work.")]
Limit = Annotated[int, Field(ge=1, le=100, description="Page size.")]
AuditLimit = Annotated[int, Field(ge=1, le=200, description="Page size.")]
Cursor = Annotated[str | None, text("From next_cursor.", Limits.CURSOR)]
Reason = Annotated[str, text("Why; audited.", Limits.REASON)]
TargetRepo = Annotated[str, text("e.g. myorg/api", Limits.REPO)]
Priority = Annotated[Literal["P0", "P1", "P2", "P3", "P4"], Field(description="P0 first.")]
IdempotencyKey = Annotated[str | None, text("A resend with it returns the first result.", Limits.IDEMPOTENCY_KEY)]
Budget = Field(description="Seconds.", json_schema_extra={"minimum": Limits.MIN_BUDGET, "maximum": Limits.MAX_BUDGET})
DoctrineRefs = Annotated[
    list[Annotated[str, Field(json_schema_extra={"maxLength": Limits.DOCTRINE_REF})]] | None,
    items("ns/name", Limits.DOCTRINES),
]
