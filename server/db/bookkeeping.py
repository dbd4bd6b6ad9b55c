"""The tables beside the work: the audit log, the derived counts and access (tokens, the servers' shared secrets,
ended dashboard sessions). server/db/tables.py names them with the rest."""

from __future__ import annotations

from sqlalchemy import Column, Float, Index, Integer, String, Table, text

from server.db.types import ID, BigId, Json, UTCDateTime, metadata, partial_index

audit_log = Table(
    "audit_log",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("ts", UTCDateTime, nullable=False),
    Column("actor_kind", String(16), nullable=False),
    Column("actor_id", String(256), nullable=False),
    Column("action", String(64), nullable=False),
    Column("entity_kind", String(32), nullable=False),
    Column("entity_id", ID, nullable=False),
    Column("before", Json, nullable=True),
    Column("after", Json, nullable=True),
    Column("trace_id", ID, nullable=True),
    Index("ix_audit_log_entity_kind_entity_id_id", "entity_kind", "entity_id", "id"),
    # jct_search_audit: one actor's or one action's rows, newest first.
    Index("ix_audit_log_actor_id_id", "actor_id", "id"),
    # ts rides along so the throughput chart walks an action's recent rows in the index alone.
    Index("ix_audit_log_action_id_ts", "action", "id", "ts"),
)

# Derived: how many tasks are in each status and how many evidence packs in each review state, kept by
# triggers on tasks and evidence_packs (migration 0004) so that queue statistics never scan either table.
# The triggers only ever INSERT a delta row; concurrent writers never lock each other here (an UPDATEd
# counter row would serialise every claim, and two counters updated in opposite orders would deadlock).
# A count is SUM(delta) over its rows; the sweeper folds the rows into one per count (server/db/leases.py).
# `jct db copy` skips derived tables: the triggers of the target database rebuild them.
count_deltas = Table(
    "count_deltas",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    # "task" (tasks.status) or "review" (evidence_packs.review_state)
    Column("entity", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("delta", Integer, nullable=False),
    info={"derived": True},
)

# What agents report spending (server/core/telemetry.py), one row per report and number, summed by
# jct_queue_stats and folded to one row per key by the sweeper like count_deltas. Not derived: no trigger
# rebuilds it, so `jct db copy` carries it.
telemetry_deltas = Table(
    "telemetry_deltas",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("key", String(32), nullable=False),
    Column("amount", Float, nullable=False),
)

tokens = Table(
    "tokens",
    metadata,
    Column("id", ID, primary_key=True),
    # Unique among live tokens: a revoked token's name can be used again (`jct token rotate`).
    Column("name", String(128), nullable=False),
    Column("roles", Json, nullable=False),
    # sha256 of the secret: tokens are 256 random bits, so a fast hash is enough and lookups stay O(1).
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("revoked_at", UTCDateTime, nullable=True),
    partial_index("ix_tokens_name_live", "name", text("revoked_at IS NULL"), unique=True),
)

# Secrets every server process on this database shares, made once by whichever process first needs one
# (the dashboard's form key: server/core/tokens.py `form_key`).
server_secrets = Table(
    "server_secrets",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", String(128), nullable=False),
)

# Dashboard sessions ended by logging out, until the moment they would have expired anyway: a session is a
# signed cookie any process can check, so ending one is a row every process reads.
ended_ui_sessions = Table(
    "ended_ui_sessions",
    metadata,
    Column("signature", String(64), primary_key=True),
    Column("expires_at", UTCDateTime, nullable=False, index=True),
)
