"""What each service returns: the seed's response shapes, as Pydantic models the MCP tools hand back as-is."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_serializer, model_validator
from pydantic_core.core_schema import SerializerFunctionWrapHandler

from server import uris
from server.vocab import (
    ArtifactType,
    Decision,
    EventKind,
    IssueStatus,
    MissionStatus,
    Operation,
    PhaseStatus,
    Priority,
    ReviewState,
    RunStatus,
    TaskStatus,
)


def column(name: str, column_name: str) -> Any:
    """A field read from a row whose column has another name (`task_id` from `id`): results validate rows in
    one call (`TaskSummary.model_validate(row)`), and still serialize and build by their own field names."""
    return Field(validation_alias=AliasChoices(name, column_name))


def _target_of(row: Any) -> Any:
    """A task row's target_repo/ref/path as the nested `target` the seed's shapes have."""
    if isinstance(row, dict) and "target" not in row and "target_repo" in row:
        return {**row, "target": {"repo": row["target_repo"], "ref": row["target_ref"], "path": row["target_path"]}}
    return row


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


class TaskSummary(Shape):
    task_id: str = column("task_id", "id")
    operation: Operation
    objective: str
    target_repo: str
    target_ref: str
    status: TaskStatus
    priority: Priority
    time_budget_seconds: int
    queued_at: datetime
    cwom_issue_id: str | None = column("cwom_issue_id", "issue_id")


class TaskList(Ok):
    tasks: list[TaskSummary]
    count: int
    next_cursor: str | None = Field(None, description="Pass as `cursor` for the next page; absent on the last page.")


class Constraints(Shape):
    time_budget_seconds: int
    allow_network: bool
    allow_secrets: bool
    allowed_paths: list[str] = []


class ConstraintSnapshot(Shape):
    id: str
    scope: str
    rules: Constraints


class ReviewFeedback(Shape):
    # "requeued": an operator's feedback given with jct_requeue_task.
    decision: Literal["approved", "rejected", "needs_changes", "requeued"]
    reason: str
    # The reviewer's principal (actor_id). Feedback recorded before that has no reviewer_name, and there
    # `reviewer` is the name the reviewer chose.
    reviewer: str
    reviewer_name: str | None = None  # the name the reviewer chose (self-reported)
    run_id: str | None = None  # absent when a task requeued before any run carries the feedback
    verdict: str
    at: datetime


class ContextPacket(Shape):
    id: str
    version: int
    summary: str
    prior_art: list[str]
    files_of_interest: list[str]
    acceptance_criteria: list[str]
    data: dict[str, Any] = {}
    review_feedback: list[ReviewFeedback] = []


class DecisionView(Shape):
    """A decision an agent recorded in its mission (jct_report_progress kind=decision)."""

    decision: str
    rationale: str | None = None
    alternatives: list[str] | None = None
    task_id: str
    run_id: str
    at: datetime

    @model_validator(mode="before")
    @classmethod
    def spread_data(cls, row: Any) -> Any:
        """A run_events row joined to its run ({data, task_id, run_id, at}) as the decision's fields."""
        if isinstance(row, dict) and "data" in row:
            data = row.get("data") or {}
            return {**{k: row[k] for k in ("task_id", "run_id", "at")}, **data}
        return row


BASE_COMMIT = "target_ref's commit when JCT reads the repo; report work as a commit descending from it."


class Claim(Ok):
    task_id: str
    run_id: str
    trace_id: str
    objective: str
    operation: str
    target: Target
    attempt: int
    lease_expires_at: datetime
    constraints: Constraints
    context_packet: ContextPacket | None = None
    constraint_snapshot: ConstraintSnapshot | None = None
    mission_id: str | None = None
    decisions: list[DecisionView] | None = Field(None, description="Its mission's decisions so far, newest first.")
    base_commit: str | None = Field(None, description=BASE_COMMIT)


class ClaimNext(Ok):
    claimed: bool
    task_id: str | None = None
    run_id: str | None = None
    trace_id: str | None = None
    objective: str | None = None
    operation: str | None = None
    target: Target | None = None
    attempt: int | None = None
    lease_expires_at: datetime | None = None
    constraints: Constraints | None = None
    context_packet: ContextPacket | None = None
    constraint_snapshot: ConstraintSnapshot | None = None
    mission_id: str | None = None
    decisions: list[DecisionView] | None = None
    base_commit: str | None = None


class IssueView(Shape):
    id: str
    title: str
    type: Operation
    priority: Priority
    status: IssueStatus
    acceptance_criteria: list[str]


class DoctrineRef(Shape):
    id: str
    namespace: str
    name: str
    body: str


class UpstreamArtifact(Shape):
    """An artifact of an approved task this one depends on (its workflow step, when it is one)."""

    artifact_id: str
    title: str
    type: ArtifactType
    task_id: str
    step: str | None = None


class TaskContext(Ok):
    task_id: str
    issue: IssueView | None = None
    context_packet: ContextPacket | None = None
    constraint_snapshot: ConstraintSnapshot | None = None
    doctrine_refs: list[DoctrineRef] = []
    mission_id: str | None = None
    decisions: list[DecisionView] | None = None
    step: dict[str, Any] | None = Field(None, description="The workflow step: its outputs and gate.")
    dependency_artifacts: list[UpstreamArtifact] | None = Field(
        None, description="What the tasks it depends on delivered: read them with jct_get_artifact."
    )


class ArtifactReported(Ok):
    artifact_id: str
    task_id: str
    run_id: str
    title: str
    type: ArtifactType
    uri: str
    size_bytes: int | None = None
    sha256: str | None = None
    lease_expires_at: datetime


class ProgressReported(Ok):
    event_id: int
    task_id: str
    run_id: str
    lease_expires_at: datetime


class EvidenceSummary(Shape):
    id: str
    verdict: str
    verdict_reason: str


class ReviewOutcome(Shape):
    status: Literal["auto_approved", "awaiting_manual_review", "not_required", "approved", "rejected", "needs_changes"]
    review_id: str | None = None
    message: str | None = None


class Completion(Ok):
    task_id: str
    task_status: TaskStatus
    run_id: str
    run_status: RunStatus
    evidence_pack: EvidenceSummary
    review: ReviewOutcome
    duplicate: bool = Field(False, description="True when this repeats an earlier completion; nothing changed.")


class Released(Ok):
    task_id: str
    run_id: str
    task_status: TaskStatus


class Cancelled(Ok):
    task_id: str
    task_status: TaskStatus
    run_id: str | None = None


class Enqueued(Ok):
    task_id: str
    trace_id: str
    status: TaskStatus
    cwom_issue_id: str | None = None
    duplicate: bool = False


class RunSummary(Shape):
    run_id: str = column("run_id", "id")
    status: RunStatus
    attempt: int
    executor: dict[str, str]
    started_at: datetime
    ended_at: datetime | None
    lease_expires_at: datetime | None


class TaskDetail(Shape):
    task_id: str = column("task_id", "id")
    operation: Operation
    objective: str
    target: Target
    priority: Priority
    time_budget_seconds: int
    status: TaskStatus
    attempts: int
    max_attempts: int
    idempotency_key: str | None
    trace_id: str
    cwom_issue_id: str | None = column("cwom_issue_id", "issue_id")
    requested_by: str
    active_run_id: str | None
    queued_at: datetime
    claimed_at: datetime | None
    completed_at: datetime | None
    result: dict[str, Any] | None
    error: str | None

    @model_validator(mode="before")
    @classmethod
    def nest_target(cls, row: Any) -> Any:
        return _target_of(row)


class TaskView(Ok):
    task: TaskDetail
    runs: list[RunSummary]


class ArtifactView(Shape):
    artifact_id: str = column("artifact_id", "id")
    run_id: str
    task_id: str
    title: str
    type: ArtifactType
    media_type: str
    uri: str
    size_bytes: int | None
    sha256: str | None
    created_at: datetime

    @model_validator(mode="after")
    def _no_server_path(self) -> ArtifactView:
        # Stored content lives on the server's disk (a file:// URI in the row); clients get its jct:// page.
        if self.uri.lower().startswith("file:"):
            self.uri = uris.artifact(self.artifact_id)
        return self


class RunEventView(Shape):
    id: int
    kind: EventKind
    message: str
    progress: int | None
    created_at: datetime


class RunDetail(Shape):
    run_id: str = column("run_id", "id")
    task_id: str
    cwom_issue_id: str | None = column("cwom_issue_id", "issue_id")
    mode: str
    status: RunStatus
    attempt: int
    executor: dict[str, str]
    started_at: datetime
    ended_at: datetime | None
    lease_expires_at: datetime | None
    summary: str | None
    outputs: dict[str, Any] | None = None
    telemetry: dict[str, Any] | None
    failure: dict[str, Any] | None
    base_commit: str | None = None
    files_changed: dict[str, Any] | None = None


class RunView(Ok):
    run: RunDetail
    artifacts: list[ArtifactView]
    events: list[RunEventView]
    evidence_pack: EvidenceSummary | None = None


class Check(Shape):
    name: str
    passed: bool | None
    detail: str


class CriterionResult(Shape):
    criterion: str
    status: str
    evidence: list[str]
    note: str | None = None


class EvidencePackDetail(Shape):
    id: str
    run_id: str
    task_id: str
    verdict: str
    verdict_reason: str
    checks: list[Check]
    criteria_results: list[CriterionResult]
    evidence_collected: list[dict[str, str]]
    evidence_missing: list[str]
    prover_id: str
    review_state: ReviewState
    created_at: datetime
    unexpected_files: list[str] | None = None
    files_changed: dict[str, Any] | None = None


class EvidenceView(Ok):
    evidence_pack: EvidencePackDetail


class AuditEntry(Shape):
    id: int
    ts: datetime
    actor_kind: str
    actor_id: str
    action: str
    entity_kind: str
    entity_id: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    trace_id: str | None


class AuditTrail(Ok):
    entries: list[AuditEntry]
    count: int
    next_cursor: str | None = None


class ArtifactContent(Ok):
    artifact: ArtifactView
    content: str | None = Field(None, description="This slice of the text; absent for artifacts stored only as a URI.")
    offset: int
    total_chars: int
    truncated: bool
    next_offset: int | None = None


class QueueStats(Ok):
    counts: dict[str, int]
    expired_leases: int
    oldest_queued_age_seconds: float | None = None
    pending_reviews: int
    # What agents reported spending on every run (server/core/telemetry.py NUMBERS).
    telemetry_totals: dict[str, float] = Field(default_factory=dict)


class PendingReview(Shape):
    evidence_pack_id: str
    run_id: str
    task_id: str
    cwom_issue_id: str | None = column("cwom_issue_id", "issue_id")
    objective: str
    verdict: str
    verdict_reason: str
    summary: str | None
    executor: dict[str, str]
    created_at: datetime


class PendingReviews(Ok):
    reviews: list[PendingReview]
    count: int
    next_cursor: str | None = None


class ReviewSubmitted(Ok):
    review_id: str
    decision: Decision
    issue_status: IssueStatus | None = None
    run_status: RunStatus
    task_status: TaskStatus
    context_packet_version: int | None = Field(None, description="The new briefing version, after needs_changes.")


class SweepReport(Shape):
    expired: int
    requeued: int
    failed: int


# --- missions ------------------------------------------------------------------------------------


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
    task_id: str
    kind: Literal["failed", "cancelled", "dependency_failed", "human"]
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


class MissionView(Ok):
    mission: MissionDetail
    progress: MissionProgress
    phases: list[PhaseView]
    blockers: list[Blocker]
    claimable: list[MissionTask] = Field(description="Queued tasks, which jct_claim_task / jct_claim_next take.")
    decisions: list[DecisionView]
    tasks: list[MissionTask] | None = None


class MissionSummary(Shape):
    mission_id: str = column("mission_id", "id")
    title: str
    status: MissionStatus
    total: int
    approved: int
    created_at: datetime


class MissionList(Ok):
    missions: list[MissionSummary]
    count: int
    next_cursor: str | None = None


class MissionCancelled(Ok):
    mission_id: str
    status: MissionStatus
    tasks_cancelled: int


# --- workflows (DESIGN section 12) -------------------------------------------------------------


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


class GitCommit(Shape):
    commit: str
    parents: list[str]
    author: str
    date: str
    subject: str


class GitLog(Ok):
    repo: str
    ref: str
    head: str = Field(description="The commit ref named when JCT read it.")
    commits: list[GitCommit]


class GitText(Ok):
    repo: str
    base: str | None = None
    head: str | None = None
    text: str = Field(description="Cut at max_chars with a '[... cut by JCT' marker when truncated.")
    truncated: bool
    total_chars: int


class Requeued(Ok):
    task_id: str
    task_status: TaskStatus
    context_packet_version: int | None = None


class PrioritySet(Ok):
    task_id: str
    priority: Priority
    previous: Priority


class HeldClaim(Shape):
    task_id: str
    run_id: str
    objective: str
    lease_expires_at: datetime | None


class AgentView(Shape):
    agent: str  # who claimed (actor_id)
    principal: str  # who authenticated (a token's name; `local` without tokens)
    claims_held: int
    claims: list[HeldClaim] = Field(description="The first 10 by lease end.")
    last_seen: datetime | None = None
    done: int
    failed: int


class AgentList(Ok):
    agents: list[AgentView]
    count: int


StuckKind = Literal["lease_overdue", "over_budget", "no_progress", "human_blocker", "failed_dependency"]


class StuckItem(Shape):
    kind: StuckKind
    task_id: str
    objective: str
    run_id: str | None = None
    agent: str | None = None
    since: datetime | None = None
    reason: str
    action: str


class StuckList(Ok):
    items: list[StuckItem]
    count: int


class Throughput(Shape):
    """Tasks that ended in each interval of the last hour, oldest interval first."""

    bucket_seconds: int
    completed: list[int]
    failed: list[int]
