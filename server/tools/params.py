"""The parameter types tools share, with the descriptions the model reads.

Every limit core enforces (docs/tools.md, "Input limits") is also declared in the input schema, so a client sees it
before calling; core stays the one place that checks it (and answers with JCT's own error codes), so the
schema declares it through json_schema_extra rather than a second pydantic check.

A parameter whose name, type and limits already say all there is (task_id, repo, ref, path, limit, max_chars,
time_budget_seconds, idempotency_key, a closed set such as operation) has no description: "The task's id." on
task_id would only cost every agent's context window. Every other parameter has one (tests/tools/test_surface.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from server.core.models import Limits


def text(description: str, limit: int) -> Any:
    """A text parameter of at most `limit` characters."""
    return Field(description=description, json_schema_extra={"maxLength": limit})


def bounded(limit: int) -> Any:
    """A text parameter of at most `limit` characters that its name describes."""
    return Field(json_schema_extra={"maxLength": limit})


def items(description: str, limit: int) -> Any:
    """A list of at most `limit` items."""
    return Field(description=description, json_schema_extra={"maxItems": limit})


def uuid(description: str) -> Any:
    """An id JCT handed out. Core checks it is a UUID (models.parse_id, INVALID_ARGUMENT otherwise), so the schema
    carries no `format: uuid`, which clients ignore and every agent's context window would pay for."""
    return Field(description=description)


Criterion = Annotated[str, Field(json_schema_extra={"maxLength": Limits.CRITERION})]
Key = Annotated[str, Field(json_schema_extra={"maxLength": Limits.TITLE})]
PriorArt = Annotated[str, Field(json_schema_extra={"maxLength": Limits.PRIOR_ART_ITEM})]
# Ids core checks (see uuid), named for what they identify.
Uuid = str
TaskId = str
RunId = str
MissionId = str
ClaimedRun = str | None  # the run_id of your claim (jct_claim_task says to pass it)
Operation = Literal["code_change", "docs", "analysis", "ops"]
OperationFilter = Operation | None
Limit = Annotated[int, Field(ge=1, le=100)]
AuditLimit = Annotated[int, Field(ge=1, le=200)]
Cursor = Annotated[str | None, bounded(Limits.CURSOR)]  # a result's next_cursor
Reason = Annotated[str, bounded(Limits.REASON)]  # why, for the audit log
TargetRepo = Annotated[str, bounded(Limits.REPO)]  # owner/name, e.g. myorg/api
Priority = Literal["P0", "P1", "P2", "P3", "P4"]  # P0 is claimed first
IdempotencyKey = Annotated[str | None, bounded(Limits.IDEMPOTENCY_KEY)]
Budget = Field(json_schema_extra={"minimum": Limits.MIN_BUDGET, "maximum": Limits.MAX_BUDGET})
DoctrineRefs = Annotated[
    list[Annotated[str, Field(json_schema_extra={"maxLength": Limits.DOCTRINE_REF})]] | None,
    items("ns/name", Limits.DOCTRINES),
]
# The files a task edits (DESIGN section 16): relative path globs; default its target_path.
Touches = Annotated[
    list[Annotated[str, Field(json_schema_extra={"maxLength": Limits.PATH})]] | None,
    items("Path globs it edits.", Limits.TOUCHES),
]
