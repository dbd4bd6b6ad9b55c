"""What workflows return (DESIGN section 12): the catalogue, and a workflow started as a mission."""

from __future__ import annotations

from pydantic import Field

from server.core.results.missions import MissionCreated
from server.core.results.shape import Ok, Shape


class WorkflowInput(Shape):
    name: str
    required: bool = False
    description: str | None = None
    default: str | None = None


class WorkflowSummary(Shape):
    name: str
    version: str
    summary: str
    inputs: list[WorkflowInput]
    steps: list[str]


class WorkflowList(Ok):
    workflows: list[WorkflowSummary]
    refused: list[str] = Field([], description="Workflow files that did not load: file:line: reason.")


class WorkflowStarted(MissionCreated):
    workflow: str
    version: str
