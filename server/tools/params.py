"""The parameter types tools share, with the descriptions the model reads."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

TaskId = Annotated[str, Field(description="The task's id (UUID).")]
RunId = Annotated[str, Field(description="The run's id (UUID).")]
ClaimedRun = Annotated[
    str | None,
    Field(description="The run_id your claim returned: pass it, so a late call can never touch someone else's run."),
]
Operation = Literal["code_change", "docs", "analysis", "ops"]
OperationFilter = Annotated[Operation | None, Field(description="Only tasks of this operation.")]
Limit = Annotated[int, Field(ge=1, le=100, description="At most this many per page.")]
Cursor = Annotated[str | None, Field(description="next_cursor of the previous page.")]
Reason = Annotated[str, Field(description="Why; kept in the audit log.")]
Priority = Annotated[Literal["P0", "P1", "P2", "P3", "P4"], Field(description="P0 first.")]
IdempotencyKey = Annotated[str | None, Field(description="A resend with the same key returns the first result.")]
MissionId = Annotated[str, Field(description="The mission's id (UUID).")]
