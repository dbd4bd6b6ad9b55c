"""Tasks and their runs: what the queue and a claim return (task lists, the claim, reports on a claimed task, its
release and cancel), and what operators read and do (a task, a run and an artifact in full, the audit trail,
requeue, priority, agents, what is stuck, throughput)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, model_validator

from server import uris
from server.core.results.briefings import Constraints, ConstraintSnapshot, ContextPacket
from server.core.results.missions import DecisionView
from server.core.results.review import EvidenceSummary
from server.core.results.shape import Ok, Shape, Spent, Target, column
from server.vocab import ArtifactType, EventKind, Operation, Priority, RunStatus, TaskStatus


class TaskSummary(Shape):
    task_id: str = column("task_id", "id")
    operation: Operation
    objective: str
    target_repo: str
    target_ref: str
    touches: list[str] | None = None
    status: TaskStatus
    priority: Priority
    time_budget_seconds: int
    queued_at: datetime
    cwom_issue_id: str | None = column("cwom_issue_id", "issue_id")


class TaskList(Ok):
    tasks: list[TaskSummary]
    count: int
    next_cursor: str | None = Field(None, description="Pass as `cursor` for the next page; absent on the last page.")


BASE_COMMIT = "target_ref's commit when JCT reads the repo; report work as a commit descending from it."


WORKSPACE = (
    "Work and commit here: your run's own branch at base_commit, and its worktree on the server's machine "
    "(path; none for a remote repository: fetch the branch, commit on it, push it). JCT merges it once approved."
)


class Workspace(Shape):
    path: str | None = None
    branch: str
    base_commit: str
    # The ended run whose unmerged commits this branch starts from (at start_commit), if any.
    continues_run: str | None = None
    start_commit: str | None = None


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
    workspace: Workspace | None = Field(None, description=WORKSPACE)


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
    workspace: Workspace | None = None


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


class Released(Ok):
    task_id: str
    run_id: str
    task_status: TaskStatus


class Expired(Ok):
    """An operator expired a claim: the run ended as expired, the task requeued (or failed at its last attempt)."""

    task_id: str
    run_id: str
    task_status: TaskStatus
    attempts: int


class Cancelled(Ok):
    task_id: str
    task_status: TaskStatus
    run_id: str | None = None


class QueueStats(Ok):
    counts: dict[str, int]
    # Integrations waiting in the merge queue, by status (queued, merging).
    merge_queue: dict[str, int] = Field(default_factory=dict)
    expired_leases: int
    oldest_queued_age_seconds: float | None = None
    pending_reviews: int
    # What agents reported spending on every run (server/core/telemetry.py NUMBERS).
    telemetry_totals: dict[str, float] = Field(default_factory=dict)


class SweepReport(Shape):
    expired: int
    requeued: int
    failed: int


# --- what operators read and do --------------------------------------------------------


def _target_of(row: Any) -> Any:
    """A task row's target_repo/ref/path as the nested `target` the seed's shapes have."""
    if isinstance(row, dict) and "target" not in row and "target_repo" in row:
        target = {"repo": row["target_repo"], "ref": row["target_ref"], "path": row["target_path"]}
        return {**row, "target": {**target, "touches": row.get("touches")}}
    return row


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


class IntegrationView(Shape):
    """Where a run's work stands in the merge queue (DESIGN section 16)."""

    status: Literal["queued", "merging", "merged", "conflict", "check_failed"]
    repo: str
    ref: str
    strategy: str
    head_commit: str
    commit: str | None = None
    conflicting_files: list[str] | None = None
    check_output: str | None = None
    waiting: str | None = None
    queued_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None


class MergeQueueItem(IntegrationView):
    task_id: str
    run_id: str
    objective: str


class MergeQueue(Ok):
    """The merge queue, newest first (the dashboard's view): what waits, what landed, what went back."""

    items: list[MergeQueueItem]
    count: int


class TaskView(Ok):
    task: TaskDetail
    runs: list[RunSummary]
    spent: Spent  # summed over all its runs
    integration: IntegrationView | None = Field(None, description="Its latest work's place in the merge queue.")
    review_round: str = Field(
        "", description="e.g. 'review round 1 of 2': the reviews that asked for changes, of the most it may get."
    )


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
    workspace: Workspace | None = None


class RunView(Ok):
    run: RunDetail
    artifacts: list[ArtifactView]
    events: list[RunEventView]
    evidence_pack: EvidenceSummary | None = None
    integration: IntegrationView | None = None


class ArtifactContent(Ok):
    artifact: ArtifactView
    content: str | None = Field(None, description="This slice of the text; absent for artifacts stored only as a URI.")
    offset: int
    total_chars: int
    truncated: bool
    next_offset: int | None = None


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


AgentState = Literal["working", "waiting", "idle"]


class AgentView(Shape):
    agent: str  # who claimed (actor_id)
    principal: str  # who authenticated (a token's name; `local` without tokens)
    state: AgentState = Field(
        "idle", description="working: holds a claim; waiting: in jct_claim_next on this server process; idle."
    )
    claims_held: int
    claims: list[HeldClaim] = Field(description="The first 10 by lease end.")
    last_seen: datetime | None = None
    done: int
    failed: int
    spent: Spent  # by its runs in the window


class AgentList(Ok):
    agents: list[AgentView]
    count: int


StuckKind = Literal[
    "lease_overdue",
    "over_budget",
    "no_progress",
    "human_blocker",
    "failed_dependency",
    "integration_waiting",
    "mission_budget_spent",
]


class StuckItem(Shape):
    kind: StuckKind
    task_id: str
    objective: str
    run_id: str | None = None
    agent: str | None = None
    since: datetime | None = None
    reason: str
    action: str
    # What a person may do about it: the task's status (running: release it, expire it now or cancel it;
    # completed: review it) and, blocked by a failed dependency, that dependency (requeue it).
    task_status: TaskStatus
    dependency_id: str | None = None
    # mission_budget_spent: the mission whose spent budget holds back its queued tasks (task_id: the first).
    mission_id: str | None = None


class StuckList(Ok):
    items: list[StuckItem]
    count: int


class Throughput(Shape):
    """Tasks that ended in each interval of the last hour, oldest interval first."""

    bucket_seconds: int
    completed: list[int]
    failed: list[int]
