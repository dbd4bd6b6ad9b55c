"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22 04:07:39.437922
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import server.db.types

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table(
        "audit_log",
        sa.Column("id", server.db.types.BigId, autoincrement=True, nullable=False),
        sa.Column("ts", server.db.types.UTCDateTime(), nullable=False),
        sa.Column("actor_kind", sa.String(length=16), nullable=False),
        sa.Column("actor_id", sa.String(length=256), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("entity_kind", sa.String(length=32), nullable=False),
        sa.Column("entity_id", sa.String(length=36), nullable=False),
        sa.Column("before", server.db.types.Json, nullable=True),
        sa.Column("after", server.db.types.Json, nullable=True),
        sa.Column("trace_id", sa.String(length=36), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.create_index("ix_audit_log_entity_kind_entity_id_id", ["entity_kind", "entity_id", "id"], unique=False)

    op.create_table(
        "doctrine_refs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("namespace", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_doctrine_refs")),
        sa.UniqueConstraint("namespace", "name", name=op.f("uq_doctrine_refs_namespace_name")),
    )
    op.create_table(
        "issues",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("priority", sa.String(length=2), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("acceptance_criteria", server.db.types.Json, nullable=False),
        sa.Column("created_at", server.db.types.UTCDateTime(), nullable=False),
        sa.Column("updated_at", server.db.types.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_issues")),
    )
    op.create_table(
        "constraint_snapshots",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("issue_id", sa.String(length=36), nullable=True),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("time_budget_seconds", sa.Integer(), nullable=False),
        sa.Column("allow_network", sa.Boolean(), nullable=False),
        sa.Column("allow_secrets", sa.Boolean(), nullable=False),
        sa.Column("allowed_paths", server.db.types.Json, nullable=False),
        sa.Column("created_at", server.db.types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["issue_id"], ["issues.id"], name=op.f("fk_constraint_snapshots_issue_id_issues")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_constraint_snapshots")),
    )
    with op.batch_alter_table("constraint_snapshots", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_constraint_snapshots_issue_id"), ["issue_id"], unique=False)

    op.create_table(
        "context_packets",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("issue_id", sa.String(length=36), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("prior_art", server.db.types.Json, nullable=False),
        sa.Column("files_of_interest", server.db.types.Json, nullable=False),
        sa.Column("acceptance_criteria", server.db.types.Json, nullable=False),
        sa.Column("data", server.db.types.Json, nullable=False),
        sa.Column("review_feedback", server.db.types.Json, nullable=True),
        sa.Column("created_at", server.db.types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["issue_id"], ["issues.id"], name=op.f("fk_context_packets_issue_id_issues")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_context_packets")),
        sa.UniqueConstraint("issue_id", "version", name=op.f("uq_context_packets_issue_id_version")),
    )
    op.create_table(
        "issue_doctrine",
        sa.Column("issue_id", sa.String(length=36), nullable=False),
        sa.Column("doctrine_id", sa.String(length=36), nullable=False),
        sa.ForeignKeyConstraint(
            ["doctrine_id"], ["doctrine_refs.id"], name=op.f("fk_issue_doctrine_doctrine_id_doctrine_refs")
        ),
        sa.ForeignKeyConstraint(["issue_id"], ["issues.id"], name=op.f("fk_issue_doctrine_issue_id_issues")),
        sa.PrimaryKeyConstraint("issue_id", "doctrine_id", name=op.f("pk_issue_doctrine")),
    )
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("operation", sa.String(length=16), nullable=False),
        sa.Column("objective", sa.Text(), nullable=False),
        sa.Column("target_repo", sa.String(length=512), nullable=False),
        sa.Column("target_ref", sa.String(length=256), nullable=False),
        sa.Column("target_path", sa.String(length=1024), nullable=False),
        sa.Column("priority", sa.String(length=2), nullable=False),
        sa.Column("time_budget_seconds", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=256), nullable=True),
        sa.Column("request_hash", sa.String(length=64), nullable=True),
        sa.Column("trace_id", sa.String(length=36), nullable=False),
        sa.Column("issue_id", sa.String(length=36), nullable=True),
        sa.Column("constraint_snapshot_id", sa.String(length=36), nullable=True),
        sa.Column("requested_by", sa.String(length=256), nullable=False),
        sa.Column("active_run_id", sa.String(length=36), nullable=True),
        sa.Column("queued_at", server.db.types.UTCDateTime(), nullable=False),
        sa.Column("claimed_at", server.db.types.UTCDateTime(), nullable=True),
        sa.Column("completed_at", server.db.types.UTCDateTime(), nullable=True),
        sa.Column("result", server.db.types.Json, nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["constraint_snapshot_id"],
            ["constraint_snapshots.id"],
            name=op.f("fk_tasks_constraint_snapshot_id_constraint_snapshots"),
        ),
        sa.ForeignKeyConstraint(["issue_id"], ["issues.id"], name=op.f("fk_tasks_issue_id_issues")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tasks")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_tasks_idempotency_key")),
    )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_tasks_issue_id"), ["issue_id"], unique=False)
        batch_op.create_index(
            "ix_tasks_operation_status_priority_queued_at",
            ["operation", "status", "priority", "queued_at"],
            unique=False,
        )
        batch_op.create_index(
            "ix_tasks_status_priority_queued_at_id", ["status", "priority", "queued_at", "id"], unique=False
        )

    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("task_id", sa.String(length=36), nullable=False),
        sa.Column("issue_id", sa.String(length=36), nullable=True),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("executor", server.db.types.Json, nullable=False),
        sa.Column("actor_id", sa.String(length=256), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("lease_expires_at", server.db.types.UTCDateTime(), nullable=True),
        sa.Column("started_at", server.db.types.UTCDateTime(), nullable=False),
        sa.Column("ended_at", server.db.types.UTCDateTime(), nullable=True),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column("outputs", server.db.types.Json, nullable=True),
        sa.Column("telemetry", server.db.types.Json, nullable=True),
        sa.Column("failure", server.db.types.Json, nullable=True),
        sa.Column("artifact_root_uri", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], name=op.f("fk_runs_task_id_tasks")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index("ix_runs_status_lease_expires_at", ["status", "lease_expires_at"], unique=False)
        batch_op.create_index("ix_runs_task_id_actor_id", ["task_id", "actor_id"], unique=False)

    op.create_table(
        "artifacts",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("task_id", sa.String(length=36), nullable=False),
        sa.Column("title", sa.String(length=512), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("media_type", sa.String(length=128), nullable=False),
        sa.Column("uri", sa.Text(), nullable=False),
        sa.Column("stored", sa.Boolean(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=True),
        sa.Column("sha256", sa.String(length=64), nullable=True),
        sa.Column("created_at", server.db.types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_artifacts_run_id_runs")),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], name=op.f("fk_artifacts_task_id_tasks")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_artifacts")),
    )
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_artifacts_run_id"), ["run_id"], unique=False)

    op.create_table(
        "evidence_packs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("task_id", sa.String(length=36), nullable=False),
        sa.Column("issue_id", sa.String(length=36), nullable=True),
        sa.Column("verdict", sa.String(length=16), nullable=False),
        sa.Column("verdict_reason", sa.Text(), nullable=False),
        sa.Column("checks", server.db.types.Json, nullable=False),
        sa.Column("criteria_results", server.db.types.Json, nullable=False),
        sa.Column("evidence_collected", server.db.types.Json, nullable=False),
        sa.Column("evidence_missing", server.db.types.Json, nullable=False),
        sa.Column("prover_id", sa.String(length=64), nullable=False),
        sa.Column("review_state", sa.String(length=16), nullable=False),
        sa.Column("created_at", server.db.types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_evidence_packs_run_id_runs")),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], name=op.f("fk_evidence_packs_task_id_tasks")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evidence_packs")),
        sa.UniqueConstraint("run_id", name=op.f("uq_evidence_packs_run_id")),
    )
    with op.batch_alter_table("evidence_packs", schema=None) as batch_op:
        batch_op.create_index("ix_evidence_packs_review_state_created_at", ["review_state", "created_at"], unique=False)

    op.create_table(
        "run_events",
        sa.Column("id", server.db.types.BigId, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("progress", sa.Integer(), nullable=True),
        sa.Column("data", server.db.types.Json, nullable=True),
        sa.Column("created_at", server.db.types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_run_events_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_events")),
    )
    with op.batch_alter_table("run_events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_run_events_run_id"), ["run_id"], unique=False)

    op.create_table(
        "review_decisions",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("evidence_pack_id", sa.String(length=36), nullable=False),
        sa.Column("decision", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("reviewer", server.db.types.Json, nullable=False),
        sa.Column("created_at", server.db.types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["evidence_pack_id"],
            ["evidence_packs.id"],
            name=op.f("fk_review_decisions_evidence_pack_id_evidence_packs"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_review_decisions")),
        sa.UniqueConstraint("evidence_pack_id", name=op.f("uq_review_decisions_evidence_pack_id")),
    )


def downgrade() -> None:

    op.drop_table("review_decisions")
    with op.batch_alter_table("run_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_events_run_id"))

    op.drop_table("run_events")
    with op.batch_alter_table("evidence_packs", schema=None) as batch_op:
        batch_op.drop_index("ix_evidence_packs_review_state_created_at")

    op.drop_table("evidence_packs")
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_artifacts_run_id"))

    op.drop_table("artifacts")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_task_id_actor_id")
        batch_op.drop_index("ix_runs_status_lease_expires_at")

    op.drop_table("runs")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_status_priority_queued_at_id")
        batch_op.drop_index("ix_tasks_operation_status_priority_queued_at")
        batch_op.drop_index(batch_op.f("ix_tasks_issue_id"))

    op.drop_table("tasks")
    op.drop_table("issue_doctrine")
    op.drop_table("context_packets")
    with op.batch_alter_table("constraint_snapshots", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_constraint_snapshots_issue_id"))

    op.drop_table("constraint_snapshots")
    op.drop_table("issues")
    op.drop_table("doctrine_refs")
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_log_entity_kind_entity_id_id")

    op.drop_table("audit_log")
