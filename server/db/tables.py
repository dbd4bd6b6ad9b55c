"""Every table JCT keeps, with the indexes its queries use (DESIGN section 2): the work's here, the bookkeeping's in
server/db/bookkeeping.py."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    false,
    literal_column,
    text,
)
from sqlalchemy.sql.expression import ColumnElement, FromClause

# The tables beside the work (the audit log, the derived counts, access) are server/db/bookkeeping.py's, named
# here too, so that this module is the one that names every table and `metadata` holds them all.
from server.db.bookkeeping import audit_log as audit_log
from server.db.bookkeeping import count_deltas as count_deltas
from server.db.bookkeeping import ended_ui_sessions as ended_ui_sessions
from server.db.bookkeeping import server_secrets as server_secrets
from server.db.bookkeeping import telemetry_deltas as telemetry_deltas
from server.db.bookkeeping import tokens as tokens
from server.db.types import ID, BigId, Json, JsonOrNull, UTCDateTime, idempotency_columns, partial_index
from server.db.types import metadata as metadata
from server.vocab import TASK_ENDED_UNAPPROVED

issues = Table(
    "issues",
    metadata,
    Column("id", ID, primary_key=True),
    Column("title", Text, nullable=False),
    Column("type", String(32), nullable=False),
    Column("priority", String(2), nullable=False),
    Column("status", String(16), nullable=False),
    Column("acceptance_criteria", Json, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)

context_packets = Table(
    "context_packets",
    metadata,
    Column("id", ID, primary_key=True),
    Column("issue_id", ID, ForeignKey("issues.id"), nullable=False),
    Column("version", Integer, nullable=False),
    Column("summary", Text, nullable=False),
    Column("prior_art", Json, nullable=False),
    Column("files_of_interest", Json, nullable=False),
    Column("acceptance_criteria", Json, nullable=False),
    Column("data", Json, nullable=False),
    Column("review_feedback", Json, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    UniqueConstraint("issue_id", "version"),
)

constraint_snapshots = Table(
    "constraint_snapshots",
    metadata,
    Column("id", ID, primary_key=True),
    Column("issue_id", ID, ForeignKey("issues.id"), nullable=True, index=True),
    Column("scope", String(16), nullable=False),
    Column("time_budget_seconds", Integer, nullable=False),
    Column("allow_network", Boolean, nullable=False),
    Column("allow_secrets", Boolean, nullable=False),
    Column("allowed_paths", Json, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

doctrine_refs = Table(
    "doctrine_refs",
    metadata,
    Column("id", ID, primary_key=True),
    Column("namespace", String(128), nullable=False),
    Column("name", String(128), nullable=False),
    Column("body", Text, nullable=False),
    # Every task whose target_repo starts with it gets this doctrine in its briefing (NULL: linked by name only).
    Column("repo_prefix", String(512), nullable=True),
    Column("updated_at", UTCDateTime, nullable=True),
    UniqueConstraint("namespace", "name"),
)

issue_doctrine = Table(
    "issue_doctrine",
    metadata,
    Column("issue_id", ID, ForeignKey("issues.id"), primary_key=True),
    Column("doctrine_id", ID, ForeignKey("doctrine_refs.id"), primary_key=True),
)

tasks = Table(
    "tasks",
    metadata,
    Column("id", ID, primary_key=True),
    Column("operation", String(16), nullable=False),
    Column("objective", Text, nullable=False),
    Column("target_repo", String(512), nullable=False),
    Column("target_ref", String(256), nullable=False),
    Column("target_path", String(1024), nullable=False),
    Column("priority", String(2), nullable=False),
    Column("time_budget_seconds", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    *idempotency_columns(),
    Column("trace_id", ID, nullable=False),
    Column("issue_id", ID, ForeignKey("issues.id"), nullable=True, index=True),
    Column("constraint_snapshot_id", ID, ForeignKey("constraint_snapshots.id"), nullable=True),
    Column("requested_by", String(256), nullable=False),
    # The run that holds the claim; NULL whenever the task is not running.
    Column("active_run_id", ID, nullable=True),
    Column("queued_at", UTCDateTime, nullable=False),
    Column("claimed_at", UTCDateTime, nullable=True),
    Column("completed_at", UTCDateTime, nullable=True),
    Column("result", Json, nullable=True),
    Column("error", Text, nullable=True),
    # The mission the task belongs to (no foreign key, like runs.issue_id: SQLite adds the column in place),
    # and its phase there (0, 1, ...).
    Column("mission_id", ID, nullable=True),
    Column("phase", Integer, nullable=True),
    # What a blocked task still waits for: its dependencies not yet approved (`blockers`), and whether a phase
    # before its own has a task not approved (`waits_for_phase`). It becomes queued when it has neither
    # (server/db/missions.py).
    Column("blockers", Integer, nullable=False, server_default="0"),
    Column("waits_for_phase", Boolean, nullable=False, server_default=false()),
    # When its work was approved (by the review policy or a reviewer): what unblocks its dependents.
    Column("approved_at", UTCDateTime, nullable=True),
    # The workflow step the task carries out (DESIGN section 12): {workflow, version, step, outputs, review,
    # max_rounds}, fixed when the mission started, so a changed workflow file never changes running work.
    Column("step", Json, nullable=True),
    # How many times a review asked for changes: past the gate's max_rounds the task fails.
    Column("review_rounds", Integer, nullable=False, server_default="0"),
    # The files the task will edit (DESIGN section 16): relative path globs, or NULL for none declared. Claim-next
    # never hands out a task whose touches overlap those of a task that holds its own (`merge`, below).
    Column("touches", JsonOrNull, nullable=True),
    # Where its work stands on the way to the target branch, in an integrable repository (DESIGN section 16):
    # NULL (not integrable, or not completed), `pending` (completed, awaiting review), `queued` and `merging`
    # (in the merge queue), `merged`. A running task and one `pending`, `queued` or `merging` hold their touches.
    Column("merge", String(16), nullable=True),
    # Claim-next and the queue listing walk queued tasks in this order.
    Index("ix_tasks_status_priority_queued_at_id", "status", "priority", "queued_at", "id"),
    Index("ix_tasks_operation_status_priority_queued_at_id", "operation", "status", "priority", "queued_at", "id"),
    # resources/list and completions walk tasks newest first.
    Index("ix_tasks_queued_at_id", "queued_at", "id"),
    UniqueConstraint("idempotency_scope", "idempotency_key"),
    # A mission's tasks by phase (its page, phase completion, cancellation).
    Index("ix_tasks_mission_id_phase", "mission_id", "phase"),
)


def ended_badly(table: FromClause) -> ColumnElement[bool]:
    """A mission's task that failed or was cancelled, which keeps its dependents blocked: the condition of a
    partial index, its values written out (partial_index)."""
    ended: list[ColumnElement[str]] = [literal_column(f"'{status.value}'") for status in TASK_ENDED_UNAPPROVED]
    return and_(table.c.status.in_(ended), table.c.mission_id.is_not(None))


# A task that holds its touches (DESIGN section 16): one with touches that is running, or whose work waits for
# review or in the merge queue. The claim reads a repository's holders through ix_tasks_holding_touches, whose
# condition this is (server/db/holds.py).
HOLDING = "touches IS NOT NULL AND (status = 'running' OR merge IN ('pending', 'queued', 'merging'))"
partial_index("ix_tasks_holding_touches", tasks.c.target_repo, text(HOLDING))

# jct_list_stuck walks the active missions' failed tasks in it: small, written only when a mission's task ends
# badly.
partial_index("ix_tasks_mission_id_ended_badly", tasks.c.mission_id, ended_badly(tasks))

# Which task waits for which (within one mission); read both ways: what a task waits for, and whom an
# approval unblocks.
task_dependencies = Table(
    "task_dependencies",
    metadata,
    Column("task_id", ID, ForeignKey("tasks.id"), primary_key=True),
    Column("depends_on", ID, ForeignKey("tasks.id"), primary_key=True),
    Index("ix_task_dependencies_depends_on", "depends_on"),
)

missions = Table(
    "missions",
    metadata,
    Column("id", ID, primary_key=True),
    Column("title", Text, nullable=False),
    Column("goal", Text, nullable=False),
    # active | completed | cancelled
    Column("status", String(16), nullable=False),
    Column("created_by", String(256), nullable=False),
    # {name, version} when started from a workflow.
    Column("workflow", Json, nullable=True),
    # Tasks not yet approved: the mission is completed when it reaches 0.
    Column("remaining", Integer, nullable=False),
    *idempotency_columns(),
    Column("error", Text, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("completed_at", UTCDateTime, nullable=True),
    # The budget (DESIGN section 17; NULL: none) and what its runs reported spending, added in the transaction of
    # each report: once spent reaches a budget, claims pass the mission's tasks over (server/db/claims/request.py
    # SPENT).
    Column("max_cost_usd", Float, nullable=True),
    Column("max_tokens", BigInteger, nullable=True),
    Column("spent_cost_usd", Float, nullable=False, server_default="0"),
    Column("spent_tokens", Float, nullable=False, server_default="0"),
    # The closing summary a planner or a person wrote (`jct mission-summary`).
    Column("summary", Text, nullable=True),
    UniqueConstraint("idempotency_scope", "idempotency_key"),
    # Listings: active missions first, newest first.
    Index("ix_missions_status_created_at_id", "status", "created_at", "id"),
)

mission_phases = Table(
    "mission_phases",
    metadata,
    Column("mission_id", ID, ForeignKey("missions.id"), primary_key=True),
    Column("index", Integer, primary_key=True, autoincrement=False),
    Column("name", Text, nullable=False),
    # Tasks of the phase not yet approved: the next phase's tasks wait while it is above 0.
    Column("remaining", Integer, nullable=False),
)

runs = Table(
    "runs",
    metadata,
    Column("id", ID, primary_key=True),
    Column("task_id", ID, ForeignKey("tasks.id"), nullable=False),
    Column("issue_id", ID, nullable=True),
    Column("mode", String(16), nullable=False),
    Column("executor", Json, nullable=False),
    # The agent that claimed; a call that names no run acts on its agent's run (task, actor, claim_session).
    Column("actor_id", String(256), nullable=False),
    # Who authenticated when it was claimed (a token's name; `local` without tokens): a call naming the
    # run acts on it only for this principal.
    Column("principal", String(256), nullable=False, server_default=""),
    # The connection the claim came through (NULL for a stateless request).
    Column("claim_session", String(64), nullable=True),
    # A claim by a caller nothing authenticates (no tokens): the SHA-256 of the key its run_id carries
    # (server/core/claims/leases.py). NULL with tokens, whose principal proves who claimed.
    Column("claim_key", String(64), nullable=True),
    # The agent reported a blocker only a person can lift: never approved automatically.
    Column("requires_human", Boolean, nullable=False, server_default=false()),
    Column("status", String(16), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("lease_expires_at", UTCDateTime, nullable=True),
    Column("started_at", UTCDateTime, nullable=False),
    Column("ended_at", UTCDateTime, nullable=True),
    Column("summary", Text, nullable=True),
    Column("outputs", Json, nullable=True),
    Column("telemetry", Json, nullable=True),
    # The telemetry's numbers as columns, so costs are summed in SQL per agent, task and mission: tokens is
    # tokens_input + tokens_output.
    Column("tokens", Float, nullable=False, server_default="0"),
    Column("cost_usd", Float, nullable=False, server_default="0"),
    Column("duration_seconds", Float, nullable=False, server_default="0"),
    Column("failure", Json, nullable=True),
    Column("artifact_root_uri", Text, nullable=False),
    # A verifiable task (JCT reads its repository): the commit target_ref named at claim, and what JCT read
    # at completion ({files: [{path, status, added, removed, old_path}], head, truncated}).
    Column("base_commit", String(64), nullable=True),
    Column("files_changed", Json, nullable=True),
    # When the task's time budget runs out (started_at + time_budget_seconds, set at claim): jct_list_stuck
    # finds runs past it without reading their tasks.
    Column("budget_ends_at", UTCDateTime, nullable=True),
    # An integrable repository's workspace for the run (DESIGN section 16): {path (NULL for a remote agent),
    # branch, base_commit}.
    Column("workspace", Json, nullable=True),
    Index("ix_runs_task_id_actor_id", "task_id", "actor_id"),
    # The sweeper finds running runs whose lease has passed.
    Index("ix_runs_status_lease_expires_at", "status", "lease_expires_at"),
    # jct_list_agents reads the runs started within its window.
    Index("ix_runs_started_at", "started_at"),
)

# The merge queue (DESIGN section 16): one row per approved run of an integrable repository, integrated in `id`
# order per (repo, ref).
integrations = Table(
    "integrations",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("run_id", ID, ForeignKey("runs.id"), nullable=False, unique=True),
    Column("task_id", ID, ForeignKey("tasks.id"), nullable=False, index=True),
    Column("repo", String(512), nullable=False),
    Column("ref", String(256), nullable=False),
    # What is replayed: the run's commits from base_commit to head_commit (fixed at completion).
    Column("base_commit", String(64), nullable=False),
    Column("head_commit", String(64), nullable=False),
    Column("strategy", String(16), nullable=False),
    # queued | merging | merged | conflict | check_failed
    Column("status", String(16), nullable=False),
    # The commit the target ref moved to (merged), the files that conflicted, the check command's output tail.
    Column("commit", String(64), nullable=True),
    Column("conflicting_files", Json, nullable=True),
    Column("check_output", Text, nullable=True),
    # Why a queued integration waits (uncommitted changes in the checkout of the target branch, a lock file).
    Column("waiting", Text, nullable=True),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("queued_at", UTCDateTime, nullable=False),
    Column("started_at", UTCDateTime, nullable=True),
    Column("ended_at", UTCDateTime, nullable=True),
    Index("ix_integrations_status_repo_ref_id", "status", "repo", "ref", "id"),
)

# One integrator per (repository, ref) across every server process: held like a lease, taken over once it lapses.
integrators = Table(
    "integrators",
    metadata,
    Column("repo", String(512), primary_key=True),
    Column("ref", String(256), primary_key=True),
    Column("holder", String(64), nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
)

run_events = Table(
    "run_events",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("run_id", ID, ForeignKey("runs.id"), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("message", Text, nullable=False),
    Column("progress", Integer, nullable=True),
    Column("data", Json, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    # A run's events in order; its newest is one probe (jct_list_stuck's "no progress since").
    Index("ix_run_events_run_id_created_at", "run_id", "created_at"),
)

artifacts = Table(
    "artifacts",
    metadata,
    Column("id", ID, primary_key=True),
    Column("run_id", ID, ForeignKey("runs.id"), nullable=False, index=True),
    Column("task_id", ID, ForeignKey("tasks.id"), nullable=False),
    Column("title", String(512), nullable=False),
    Column("type", String(16), nullable=False),
    Column("media_type", String(128), nullable=False),
    Column("uri", Text, nullable=False),
    # True when the content lives in JCT's trace store (readable through jct_get_artifact).
    Column("stored", Boolean, nullable=False),
    Column("size_bytes", Integer, nullable=True),
    Column("sha256", String(64), nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
)

evidence_packs = Table(
    "evidence_packs",
    metadata,
    Column("id", ID, primary_key=True),
    Column("run_id", ID, ForeignKey("runs.id"), nullable=False, unique=True),
    Column("task_id", ID, ForeignKey("tasks.id"), nullable=False),
    Column("issue_id", ID, nullable=True),
    Column("verdict", String(16), nullable=False),
    Column("verdict_reason", Text, nullable=False),
    Column("checks", Json, nullable=False),
    Column("criteria_results", Json, nullable=False),
    Column("evidence_collected", Json, nullable=False),
    Column("evidence_missing", Json, nullable=False),
    Column("prover_id", String(64), nullable=False),
    # Files the scope check found outside target_path.
    Column("unexpected_files", Json, nullable=True),
    # pending | approved | rejected | needs_changes | not_required (failed runs need no review)
    Column("review_state", String(16), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_evidence_packs_review_state_created_at", "review_state", "created_at"),
    Index("ix_evidence_packs_task_id", "task_id"),
)

review_decisions = Table(
    "review_decisions",
    metadata,
    Column("id", ID, primary_key=True),
    Column("evidence_pack_id", ID, ForeignKey("evidence_packs.id"), nullable=False, unique=True),
    Column("decision", String(16), nullable=False),
    Column("reason", Text, nullable=False),
    Column("reviewer", Json, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)
