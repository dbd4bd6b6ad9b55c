"""What every result is: a Shape that leaves out unset fields, and Ok, a success."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_serializer
from pydantic_core.core_schema import SerializerFunctionWrapHandler


def column(name: str, column_name: str) -> Any:
    """A field read from a row whose column has another name (`task_id` from `id`): results validate rows in
    one call (`TaskSummary.model_validate(row)`), and still serialize and build by their own field names."""
    return Field(validation_alias=AliasChoices(name, column_name))


class Shape(BaseModel):
    """A result or a part of one: a field that is None is left out of the JSON, so the output schema declares
    it optional with its one type (no `["string", "null"]`, which not every client can map)."""

    @model_serializer(mode="wrap")
    def _drop_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {key: value for key, value in data.items() if value is not None}


class Ok(Shape):
    """Every success carries `success: true`; unset optional fields are left out of the JSON."""

    model_config = ConfigDict(extra="forbid")
    success: Literal[True] = True


class Target(Shape):
    repo: str
    ref: str
    path: str
    # The path globs the task edits (DESIGN section 16); absent when it declares none.
    touches: list[str] | None = None


class Spent(Shape):
    """What runs reported spending (their telemetry), summed: tokens is tokens_input + tokens_output."""

    tokens: float = 0
    cost_usd: float = 0
    duration_seconds: float = 0
