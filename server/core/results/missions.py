"""What missions return: the mission created, its page (progress, phases, blockers, decisions), lists."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, model_validator

from server.core.results.shape import Ok, Shape, Spent, column
from server.vocab import MissionStatus, PhaseStatus, TaskStatus


class DecisionView(Shape):
    """A decision an agent recorded in its mission (jct_report_progress kind=decision)."""

    decision: str
    rationale: str | None = None
    alternatives: list[str] | None = None
    task_id: str
    run_id: str
    agent: str | None = None
    at: datetime

    @model_validator(mode="before")
    @classmethod
    def spread_data(cls, row: Any) -> Any:
        """A run_events row joined to its run ({data, task_id, run_id, at}) as the decision's fields."""
        if isinstance(row, dict) and "data" in row:
            data = row.get("data") or {}
            return {**{k: row[k] for k in ("task_id", "run_id", "agent", "at") if k in row}, **data}
        return row


class MissionTaskCreated(Shape):
    key: str | None = Field(None, description="The key the task had in the request.")
    task_id: str
    phase: int
    status: TaskStatus


class MissionCreated(Ok):
    mission_id: str
    status: MissionStatus
    tasks: list[MissionTaskCreated]
    duplicate: bool = False


class PhaseView(Shape):
    index: int
    name: str
    status: PhaseStatus
    total: int
    approved: int


class MilestoneView(Shape):
    """A milestone an agent reported in its mission (jct_report_progress kind=milestone)."""

    message: str
    task_id: str
    run_id: str
    agent: str
    at: datetime


class MissionProgress(Shape):
    total: int
    approved: int
    percent_done: int
    tasks_by_status: dict[str, int]
    milestones: int
    review_rounds: int = Field(description="needs_changes decisions on the mission's work.")
    verdicts: dict[str, int]
    elapsed_seconds: float


class Blocker(Shape):
    task_id: str | None = Field(None, description="Absent for budget_spent, which holds back the whole mission.")
    kind: Literal["failed", "cancelled", "dependency_failed", "human", "budget_spent"]
    reason: str
    action: str


class MissionTask(Shape):
    task_id: str = column("task_id", "id")
    phase: int
    status: TaskStatus
    objective: str
    approved: bool
    depends_on: list[str] = []


class MissionDetail(Shape):
    mission_id: str = column("mission_id", "id")
    title: str
    goal: str
    status: MissionStatus
    created_by: str
    workflow: dict[str, Any] | None = None
    created_at: datetime
    completed_at: datetime | None = None
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    summary: str | None = Field(None, description="The closing summary its planner wrote.")
    budget_spent: bool = Field(False, description="A limit is reached: its tasks are not handed out.")


Outcome = Literal["completed", "completed_with_failures", "cancelled", "stalled"]


class MissionFile(Shape):
    """A file the mission's approved work changed, as JCT read it from git (verifiable repositories only)."""

    path: str
    status: str
    added: int = 0
    removed: int = 0
    tasks: list[str] = Field(description="The tasks whose approved run changed it.")


class TaskAchieved(Shape):
    task_id: str
    objective: str
    summary: str | None = Field(None, description="The summary of its approved run.")


class TaskLimitation(Shape):
    task_id: str | None = None
    kind: Literal["failed", "cancelled", "blocker", "override"]
    reason: str


class MissionOutcome(Shape):
    """How the mission ended, once it has (every task done, or nothing left that runs without a person)."""

    outcome: Outcome = Field(description="stalled: waits for a person (see limitations).")
    achieved: list[TaskAchieved]
    limitations: list[TaskLimitation]
    files_changed: list[MissionFile]
    files_truncated: bool = False
    spent: Spent
    duration_seconds: float


class MissionView(Ok):
    mission: MissionDetail
    progress: MissionProgress
    phases: list[PhaseView]
    blockers: list[Blocker]
    claimable: list[MissionTask] = Field(description="Queued tasks, which jct_claim_task / jct_claim_next take.")
    decisions: list[DecisionView]
    tasks: list[MissionTask] | None = None
    spent: Spent  # summed over its runs
    outcome: MissionOutcome | None = Field(None, description="Once it has ended.")
    milestones: list[MilestoneView] | None = Field(None, description="With include milestones: newest first.")


class MissionSummary(Shape):
    mission_id: str = column("mission_id", "id")
    title: str
    status: MissionStatus
    total: int
    approved: int
    created_at: datetime
    spent_cost_usd: float = 0
    spent_tokens: float = 0
    budget_spent: bool = False


class MissionList(Ok):
    missions: list[MissionSummary]
    count: int
    next_cursor: str | None = None


class MissionCancelled(Ok):
    mission_id: str
    status: MissionStatus
    tasks_cancelled: int
