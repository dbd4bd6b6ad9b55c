"""How the commands print: rich tables, sized for a terminal or, piped, for scripts and logs."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from server.core import results
from server.core.tokens import TokenInfo


def width() -> int | None:
    """A terminal's own width (None), else COLUMNS, else 120: piped output is read by scripts and logs, not an
    80-column terminal, so tables get room unless told otherwise."""
    if sys.stdout.isatty():
        return None
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() else 120


console = Console(width=width())


def when(value: datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def age(value: datetime) -> str:
    seconds = max(0, int((datetime.now(UTC) - value).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def fields(title: str, rows: Mapping[str, Any]) -> Table:
    """One record as `field value` lines; empty fields are left out."""
    table = Table(title=title, show_header=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for name, value in rows.items():
        if value is None or value == "":
            continue
        table.add_row(name, when(value) if isinstance(value, datetime) else str(value))
    return table


def settings(values: Mapping[str, str]) -> Table:
    table = Table("setting", "value")
    for name, value in values.items():
        table.add_row(name, value)
    return table


def tokens(infos: list[TokenInfo]) -> Table:
    table = Table(title=f"{len(infos)} token(s)", box=box.SIMPLE_HEAD)
    for column in ("name", "roles", "created", "revoked"):
        table.add_column(column, no_wrap=column != "name", overflow="fold")
    for info in infos:
        table.add_row(info.name, ",".join(info.roles), when(info.created_at), when(info.revoked_at) or "-")
    return table


def tasks(page: results.TaskList, status: str) -> Table:
    table = Table(title=f"{page.count} task(s), status {status}", box=box.SIMPLE_HEAD)
    table.add_column("task_id", no_wrap=True, min_width=36)
    table.add_column("pri", no_wrap=True)
    if status == "all":
        table.add_column("status", no_wrap=True)
    table.add_column("objective", overflow="fold", ratio=1)
    table.add_column("age", no_wrap=True, justify="right")
    for task in page.tasks:
        table.add_row(
            task.task_id,
            task.priority,
            *([task.status] if status == "all" else []),
            f"{task.objective}\n[dim]{task.operation} · {task.target_repo}@{task.target_ref}[/]",
            age(task.queued_at),
        )
    return table


def task(view: results.TaskView) -> Group:
    detail = view.task
    shown: list[Table] = [
        fields(
            f"task {detail.task_id}",
            {
                "status": detail.status,
                "objective": detail.objective,
                "operation": detail.operation,
                "target": f"{detail.target.repo}@{detail.target.ref} {detail.target.path}".strip(),
                "touches": ", ".join(detail.target.touches) if detail.target.touches else None,
                "priority": detail.priority,
                "time budget": f"{detail.time_budget_seconds}s",
                "attempts": f"{detail.attempts}/{detail.max_attempts}",
                "issue": detail.cwom_issue_id,
                "requested by": detail.requested_by,
                "active run": detail.active_run_id,
                "queued": detail.queued_at,
                "claimed": detail.claimed_at,
                "completed": detail.completed_at,
                "error": detail.error,
            },
        )
    ]
    if view.runs:
        runs = Table(title="runs", box=box.SIMPLE_HEAD)
        runs.add_column("run_id", no_wrap=True, min_width=36)
        runs.add_column("status", no_wrap=True)
        runs.add_column("#", no_wrap=True)
        runs.add_column("executor", overflow="fold", ratio=1, min_width=11)
        runs.add_column("started", no_wrap=True)
        for run in view.runs:
            runs.add_row(
                run.run_id,
                run.status,
                str(run.attempt),
                run.executor.get("name") or run.executor.get("actor_id", ""),
                when(run.started_at),
            )
        shown.append(runs)
    return Group(*shown)


def run(view: results.RunView) -> Group:
    detail, pack = view.run, view.evidence_pack
    shown: list[Table] = [
        fields(
            f"run {detail.run_id}",
            {
                "status": detail.status,
                "task": detail.task_id,
                "attempt": detail.attempt,
                "executor": detail.executor.get("name") or detail.executor.get("actor_id"),
                "started": detail.started_at,
                "ended": detail.ended_at,
                "lease expires": detail.lease_expires_at,
                "summary": detail.summary,
                "failure": detail.failure,
                "verdict": pack.verdict if pack else None,
                "verdict reason": pack.verdict_reason if pack else None,
                "evidence pack": pack.id if pack else None,
            },
        )
    ]
    if view.artifacts:
        artifacts = Table("artifact_id", "type", "title", "size", title="artifacts")
        for artifact in view.artifacts:
            size = "" if artifact.size_bytes is None else str(artifact.size_bytes)
            artifacts.add_row(artifact.artifact_id, artifact.type, artifact.title, size)
        shown.append(artifacts)
    if view.events:
        events = Table("at", "kind", "progress", "message", title="events")
        for event in view.events:
            progress = "" if event.progress is None else f"{event.progress}%"
            events.add_row(when(event.created_at), event.kind, progress, event.message)
        shown.append(events)
    return Group(*shown)


def evidence(pack: results.EvidencePackDetail) -> Group:
    shown: list[Table] = [
        fields(
            f"evidence pack {pack.id}",
            {
                "verdict": pack.verdict,
                "reason": pack.verdict_reason,
                "review": pack.review_state,
                "run": pack.run_id,
                "task": pack.task_id,
                "missing": ", ".join(pack.evidence_missing),
                "prover": pack.prover_id,
                "created": pack.created_at,
            },
        )
    ]
    checks = Table("check", "passed", "detail", title="checks")
    for check in pack.checks:
        checks.add_row(check.name, {True: "yes", False: "NO", None: "-"}[check.passed], check.detail)
    shown.append(checks)
    if pack.criteria_results:
        criteria = Table("criterion", "status", "evidence", title="acceptance criteria")
        for result in pack.criteria_results:
            criteria.add_row(result.criterion, result.status, ", ".join(result.evidence))
        shown.append(criteria)
    return Group(*shown)


def stats(result: results.QueueStats) -> Table:
    table = Table("", "count", title="queue")
    for status, count in result.counts.items():
        table.add_row(status, str(count))
    table.add_row("expired leases", str(result.expired_leases))
    table.add_row("pending reviews", str(result.pending_reviews))
    oldest = result.oldest_queued_age_seconds
    table.add_row("oldest queued", "-" if oldest is None else f"{oldest:.0f}s")
    return table


def reviews(page: results.PendingReviews) -> Table:
    table = Table(title=f"{page.count} pending review(s)", box=box.SIMPLE_HEAD)
    table.add_column("evidence_pack_id", no_wrap=True, min_width=36)
    table.add_column("verdict", no_wrap=True, min_width=7)
    table.add_column("objective / done by", overflow="fold", ratio=1)
    for item in page.reviews:
        by = item.executor.get("name") or item.executor.get("actor_id", "")
        table.add_row(item.evidence_pack_id, item.verdict, f"{item.objective}\n[dim]{by} · task {item.task_id}[/]")
    return table


def agents(result: results.AgentList) -> Table:
    table = Table(title=f"{result.count} agent(s)", box=box.SIMPLE_HEAD)
    for column in ("agent", "principal", "claims", "next lease end", "last seen", "done", "failed"):
        table.add_column(column, overflow="fold")
    for agent in result.agents:
        ends = [claim.lease_expires_at for claim in agent.claims if claim.lease_expires_at is not None]
        table.add_row(
            Text(agent.agent),
            Text(agent.principal),
            Text("\n".join(f"{claim.task_id} {claim.objective[:40]}" for claim in agent.claims) or "-"),
            when(min(ends)) if ends else "-",
            when(agent.last_seen),
            str(agent.done),
            str(agent.failed),
        )
    return table


def stuck(result: results.StuckList) -> Table:
    table = Table(title=f"{result.count} stuck item(s)", box=box.SIMPLE_HEAD)
    for column in ("kind", "task", "agent", "reason", "action"):
        table.add_column(column, overflow="fold", no_wrap=column == "kind")
    for item in result.items:
        # Agent text is shown as it is, never read as rich markup.
        table.add_row(item.kind, item.task_id, Text(item.agent or "-"), Text(item.reason), Text(item.action))
    return table


def audit(page: results.AuditTrail) -> Table:
    table = Table(title=f"{page.count} audit row(s), newest first", box=box.SIMPLE_HEAD)
    for column in ("id", "time", "actor", "action", "entity", "after"):
        table.add_column(column, overflow="fold", no_wrap=column in ("id", "time"))
    for entry in page.entries:
        after = ", ".join(f"{key}={value}" for key, value in (entry.after or {}).items())
        table.add_row(
            str(entry.id),
            when(entry.ts),
            Text(entry.actor_id),
            entry.action,
            f"{entry.entity_kind} {entry.entity_id}",
            Text(after[:200]),
        )
    return table
