"""The rows the services read, as frozen typed records: validated once, where the row is read (`Task.of(row)`).

One class per table the services reason about (a task, its run, the run's evidence pack, its integration, a
mission, a token), one per row a statement reads for one purpose (what a completion reads of its task, a run as
a page lists it, a spent mission a refused claim names; a claim's row is db/claims' Claimed), and the workflow
step a task carries out, with its gate. Columns keep their names; ids are the NewTypes below. JSON
columns stay plain JSON (`JsonObject`): what they hold is the business of the code that writes them, except a
task's step, which is read as a `Step`.

Pydantic validates a row in one call (faster than building a frozen dataclass field by field: bench/README.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, NewType, Self

from pydantic import BaseModel, ConfigDict, Field

TaskId = NewType("TaskId", str)
RunId = NewType("RunId", str)
IssueId = NewType("IssueId", str)
EvidencePackId = NewType("EvidencePackId", str)

# A JSON object column as stored (what it holds is the writer's business).
JsonObject = dict[str, Any]
Review = Literal["auto", "agent", "human"]


class Frozen(BaseModel):
    """Validated once, then read by attribute."""

    model_config = ConfigDict(frozen=True)

    @classmethod
    def of(cls, row: Mapping[Any, Any]) -> Self:
        return cls.model_validate(row)

    @classmethod
    def maybe(cls, row: Mapping[Any, Any] | None) -> Self | None:
        return None if row is None else cls.model_validate(row)


class Record(Frozen):
    """A row read from the database."""

    def columns(self) -> JsonObject:
        """The row again, column by column, as the response shapes validate it (server/core/views.py)."""
        return dict(self)


# --- a workflow step and its gate ---------------------------------------------------------


class StepOutput(Frozen):
    """An output the step declares: the prover checks it at completion."""

    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)

    name: str
    type: str
    required: bool = True
    # `schema` would shadow a BaseModel attribute: the field is `schema_`, stored as `schema`.
    schema_: JsonObject | None = Field(None, alias="schema")


class Gate(Frozen):
    """Who may approve a step's work (`review`) and how many rounds of changes it gets (server/core/review/gates.py)."""

    review: Review = "auto"
    max_rounds: int | None = None


class Step(Frozen):
    """The workflow step a task carries out, as fixed when its mission started (tasks.step)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    workflow: str | None = None
    version: str | None = None
    step: str | None = None
    depends_on: tuple[str, ...] = ()
    outputs: tuple[StepOutput, ...] = ()
    review: Review = "auto"
    max_rounds: int | None = None

    @property
    def gate(self) -> Gate:
        return Gate(review=self.review, max_rounds=self.max_rounds)

    def stored(self) -> JsonObject:
        """The step as it is stored (and shown): the keys it was written with, no more."""
        stored: JsonObject = self.model_dump(mode="json", by_alias=True, exclude_unset=True)
        return stored


# --- tasks, runs, evidence ---------------------------------------------------------------


class Asked(Frozen):
    """What a task asks for, in its row and in its request: the kind of work, where, and how long it may take."""

    operation: str
    target_repo: str
    target_ref: str
    target_path: str
    time_budget_seconds: int


class Task(Record, Asked):
    id: TaskId
    objective: str
    priority: str
    status: str
    attempts: int
    max_attempts: int
    idempotency_key: str | None = None
    idempotency_scope: str | None = None
    request_hash: str | None = None
    trace_id: str
    issue_id: IssueId | None = None
    constraint_snapshot_id: str | None = None
    requested_by: str
    active_run_id: RunId | None = None
    queued_at: datetime
    claimed_at: datetime | None = None
    completed_at: datetime | None = None
    result: JsonObject | None = None
    error: str | None = None
    mission_id: str | None = None
    phase: int | None = None
    blockers: int = 0
    waits_for_phase: bool = False
    approved_at: datetime | None = None
    step: Step | None = None
    review_rounds: int = 0
    touches: list[str] | None = None
    merge: str | None = None

    def columns(self) -> JsonObject:
        data = dict(self)
        data["step"] = self.step.stored() if self.step is not None else None
        return data


class CompletingTask(Record, Asked):
    """What a completion reads of its task, in its transaction (server/db/changes/): every field is a column of
    `tasks`, read by name (TASK_FIELDS)."""

    id: TaskId
    issue_id: IssueId | None = None
    trace_id: str
    mission_id: str | None = None
    step: Step | None = None
    review_rounds: int = 0


class Run(Record):
    id: RunId
    task_id: TaskId
    issue_id: IssueId | None = None
    mode: str
    executor: dict[str, str]
    actor_id: str
    principal: str = ""
    claim_session: str | None = None
    claim_key: str | None = None  # the SHA-256 of the claim's key (no tokens)
    requires_human: bool = False
    status: str
    attempt: int
    lease_expires_at: datetime | None = None
    started_at: datetime
    ended_at: datetime | None = None
    summary: str | None = None
    outputs: JsonObject | None = None
    telemetry: JsonObject | None = None
    failure: JsonObject | None = None
    artifact_root_uri: str
    base_commit: str | None = None
    files_changed: JsonObject | None = None
    budget_ends_at: datetime | None = None
    workspace: JsonObject | None = None


class ReviewedRun(Record):
    """A run as a task's or issue's page lists it: its number among its task's runs (1 = the first), its
    evidence pack and the review decision on it, if any (db/listing.py)."""

    id: RunId
    task_id: TaskId
    number: int
    status: str
    attempt: int
    executor: JsonObject | None
    started_at: datetime
    ended_at: datetime | None
    lease_expires_at: datetime | None
    evidence_pack_id: EvidencePackId | None
    verdict: str | None
    verdict_reason: str | None
    review_state: str | None
    decision: str | None
    decision_reason: str | None
    reviewer: JsonObject | None


class FencedRun(Run):
    """The run a refused fence looked for, with what the fence checked worked out by its clock."""

    lease_live: bool
    active: bool


class ExpiredRun(Record):
    """A run the sweeper expired."""

    id: RunId
    task_id: TaskId
    issue_id: IssueId | None = None
    actor_id: str


class RequeuedTask(Record):
    """The task of an expired run, back in the queue or failed."""

    status: str
    attempts: int
    trace_id: str
    issue_id: IssueId | None = None


class ReviewDecision(Record):
    """A review's decision on an evidence pack: `reviewer` is {actor_id, ...} (the review policy's for an
    automatic approval)."""

    id: str
    evidence_pack_id: EvidencePackId
    decision: str
    reason: str
    reviewer: JsonObject | None
    created_at: datetime


class Reported(Record):
    """An artifact as a completion reads it: the prover's input and the trace manifest's entry."""

    id: str
    type: str
    title: str
    stored: bool  # its content is in JCT's trace store, at `uri` within it
    uri: str
    media_type: str
    size_bytes: int | None
    sha256: str | None


class Artifact(Reported):
    run_id: RunId
    task_id: TaskId
    created_at: datetime


class EvidencePack(Record):
    id: EvidencePackId
    run_id: RunId
    task_id: TaskId
    issue_id: IssueId | None = None
    verdict: str
    verdict_reason: str
    checks: list[JsonObject]
    criteria_results: list[JsonObject]
    evidence_collected: list[JsonObject]
    evidence_missing: list[str]
    prover_id: str
    unexpected_files: list[str] | None = None
    review_state: str
    created_at: datetime


class Integration(Record):
    """A run's place in the merge queue (DESIGN section 16)."""

    id: int
    run_id: RunId
    task_id: TaskId
    repo: str
    ref: str
    base_commit: str
    head_commit: str
    strategy: str
    status: str
    commit: str | None = None
    conflicting_files: list[str] | None = None
    check_output: str | None = None
    waiting: str | None = None
    attempts: int = 0
    queued_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None


class Token(Record):
    """A bearer token: its secret is never stored, only its hash."""

    id: str
    name: str
    roles: list[Any]  # as stored: a role this build does not know (a newer one's) is skipped where it is read
    token_hash: str
    created_at: datetime
    revoked_at: datetime | None = None


# --- missions --------------------------------------------------------------------------------


class Spending(Frozen):
    """What runs reported spending, summed in SQL (server/db/outcomes.py spending)."""

    tokens: float
    cost_usd: float
    duration_seconds: float


class Budgeted(Frozen):
    """A mission's budget (None: no limit) and what its runs reported spending (DESIGN section 17). No field
    has a default, here and in the records below that a statement's own columns fill: a column the statement
    stops returning fails the read instead of reading as a default."""

    max_cost_usd: float | None
    max_tokens: int | None
    spent_cost_usd: float
    spent_tokens: float


class Mission(Record, Budgeted):
    id: str
    title: str
    goal: str
    status: str
    created_by: str
    workflow: JsonObject | None = None
    remaining: int
    idempotency_key: str | None = None
    idempotency_scope: str | None = None
    request_hash: str | None = None
    error: str | None = None
    created_at: datetime
    completed_at: datetime | None = None
    summary: str | None = None


class HeldBack(Record, Budgeted):
    """A spent mission that holds back queued tasks a claim asked for (db/claims held_by_budget)."""

    id: str
    title: str
    waiting: int  # its queued tasks


# --- a mission's page ----------------------------------------------------------------------


class Phase(Record):
    index: int
    name: str
    remaining: int  # its tasks not yet approved


class MissionTaskRow(Record):
    """A mission's task as its page and its outcome read it (db/missions tasks_of)."""

    id: TaskId
    phase: int
    status: str
    objective: str
    approved_at: datetime | None
    result: JsonObject | None
    error: str | None


class PhasedTask(Record):
    """A task a new task of the mission would wait for: its phase, and whether it was approved."""

    id: TaskId
    phase: int
    approved_at: datetime | None


class FlaggedRun(Record):
    """A mission's run flagged for a person, still running or awaiting review."""

    id: RunId
    task_id: TaskId
    status: str
    objective: str
