"""The `jct` command: serve over HTTP or stdio, administer the database, and work the queue by hand."""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import socket
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import anyio
import typer
from pydantic import ValidationError
from rich import box
from rich.console import Console
from rich.table import Table
from sqlalchemy import text
from sqlalchemy.engine import make_url

from server.config import Settings, async_database_url
from server.core import intake, observe, queue, review, tokens, views
from server.core.models import Actor, parse_id
from server.core.service import Core
from server.db import queries
from server.db.copy import BATCH_SIZE, CopyError, copy_database
from server.db.engine import Database
from server.db.migrate import current_revision, head_revision, upgrade
from server.errors import ErrorCode, JctError
from server.identity import LocalIdentity, local_user

app = typer.Typer(
    help="JCT: a shared work queue for coding agents, served over MCP.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
db_app = typer.Typer(help="Database administration.", no_args_is_help=True)
app.add_typer(db_app, name="db")
token_app = typer.Typer(help="Bearer tokens for a shared server (JCT_AUTH=token).", no_args_is_help=True)
app.add_typer(token_app, name="token")
# Piped output is read by scripts and logs, not an 80-column terminal: give tables room unless told otherwise.
console = Console(width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 120)
log = logging.getLogger("jct")
T = TypeVar("T")

DATABASE_TIMEOUT = 15.0
STATUSES = ("queued", "running", "completed", "failed", "cancelled", "all")
DECISIONS = {
    "approve": "approved",
    "approved": "approved",
    "reject": "rejected",
    "rejected": "rejected",
    "needs-changes": "needs_changes",
    "needs_changes": "needs_changes",
}


class StartupError(Exception):
    """Something the operator must fix before JCT can start; reported as one line, never a traceback."""


def fail(message: str, code: int = 1) -> NoReturn:
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    raise typer.Exit(code)


def load_settings(**overrides: Any) -> Settings:
    """Settings from JCT_* (and .env); command-line overrides are validated the same way."""
    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        return Settings(**given)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        name = f"JCT_{field.upper()}" if field else "JCT_*"
        message = str(first["msg"]).removeprefix("Value error, ")
        fail(f"bad setting {name}: {message}", 2)


def configure_logging(settings: Settings) -> None:
    """Everything JCT and its libraries log goes to stderr: on stdio, stdout carries only the protocol.
    JCT_LOG_FORMAT=json writes one JSON object per line (time, level, logger, message, exc_info)."""
    handler = logging.StreamHandler(sys.stderr)
    if settings.log_format == "json":
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(
            JsonFormatter(
                "%(levelname)s %(name)s %(message)s",
                rename_fields={"levelname": "level", "name": "logger"},
                timestamp="time",
            )
        )
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=settings.log_level, handlers=[handler], force=True)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _masked(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def open_core(settings: Settings) -> Core:
    try:
        return Core.build(settings)
    except Exception as exc:  # a bad URL or an unwritable JCT_HOME
        raise StartupError(
            f"cannot open the database {_masked(settings.database_url)}: {_first_line(exc)}; check JCT_DATABASE_URL"
        ) from None


async def prepare_database(db: Database, url: str) -> None:
    """Reach the database, then bring its schema to head; say which of the two failed."""
    try:
        with anyio.fail_after(DATABASE_TIMEOUT):
            async with db.read() as conn:
                await conn.execute(text("SELECT 1"))
    except TimeoutError:
        raise StartupError(
            f"the database {_masked(url)} did not answer within {DATABASE_TIMEOUT:.0f}s; check JCT_DATABASE_URL"
        ) from None
    except Exception as exc:
        raise StartupError(
            f"cannot reach the database {_masked(url)}: {_first_line(exc)}; check JCT_DATABASE_URL"
        ) from None
    try:
        await upgrade(db)
    except Exception as exc:
        raise StartupError(f"migrating the database {_masked(url)} failed: {_first_line(exc)}") from None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind before uvicorn starts, so a busy port is one clear line, and hand uvicorn the bound socket."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise StartupError(f"cannot resolve host {host!r}: {exc.strerror}; pass --host or set JCT_HOST") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(f"port {port} on {host} is already in use; pass --port or set JCT_PORT") from None
        if exc.errno == errno.EACCES:
            raise StartupError(f"no permission to bind port {port} on {host}; use a port above 1023") from None
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror}; pass --host/--port") from None
    sock.set_inheritable(True)
    return sock


# --- serve -------------------------------------------------------------------------------


@app.command()
def serve(
    host: str | None = typer.Option(None, help="Interface to bind (default JCT_HOST, 127.0.0.1)."),
    port: int | None = typer.Option(None, help="Port to listen on (default JCT_PORT, 8765)."),
    stdio: bool = typer.Option(False, "--stdio", help="Serve one local MCP client over stdin/stdout instead."),
) -> None:
    """Serve JCT: MCP over HTTP (streamable HTTP at /mcp, SSE at /sse), or over stdio."""
    settings = load_settings(host=host, port=port)
    configure_logging(settings)
    try:
        if stdio:
            anyio.run(_serve_stdio, settings)
        else:
            _serve_http(settings)
    except StartupError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _serve_http(settings: Settings) -> None:
    import uvicorn

    from server.app import create_app
    from server.shutdown import draining_server

    if settings.auth == "none" and not _is_loopback(settings.host):
        raise StartupError(
            f"JCT_AUTH=none serves anyone who can reach {settings.host}; bind a loopback address "
            "(--host 127.0.0.1) or set JCT_AUTH=token"
        )
    sock = bind_socket(settings.host, settings.port)
    try:
        anyio.run(_check_database, settings)
        config = uvicorn.Config(
            create_app(settings),
            host=settings.host,
            port=settings.port,
            log_config=None,
            log_level=settings.log_level.lower(),
            access_log=settings.log_level == "DEBUG",
            lifespan="on",
        )
        server = draining_server(config, settings.shutdown_grace_seconds)
        log.info("JCT %s listening on http://%s:%d (MCP at /mcp and /sse)", _version(), settings.host, settings.port)
        server.run(sockets=[sock])
    finally:
        sock.close()
    if not server.started:
        raise StartupError("the server did not start; see the log above")


async def _check_database(settings: Settings) -> None:
    core = open_core(settings)
    try:
        await prepare_database(core.db, settings.database_url)
        if settings.auth == "token" and not any(t.revoked_at is None for t in await tokens.list_tokens(core)):
            log.warning("JCT_AUTH=token and no live token exists: create one with `jct token create NAME --role ...`")
    finally:
        await core.db.dispose()


async def _serve_stdio(settings: Settings) -> None:
    from server.background import run_background
    from server.mcp import build_mcp

    core = open_core(settings)
    try:
        await prepare_database(core.db, settings.database_url)
        # Each stdio process is its own agent (`alice-3f2a9c`) unless JCT_AGENT_ID names it.
        identity = LocalIdentity(settings.agent_id, fixed=True) if settings.agent_id else LocalIdentity(local_user())
        mcp = build_mcp(core, identity)
        async with anyio.create_task_group() as tg:
            await tg.start(run_background, core, mcp.hub)
            await mcp.run_stdio_async()
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await core.db.dispose()


def _version() -> str:
    from importlib.metadata import version

    return version("jct")


# --- database and configuration ---------------------------------------------------------


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply every pending migration (also done on start)."""
    revision = run_core(lambda core, _actor: current_revision(core.db))
    console.print(f"database at revision {revision}")


@db_app.command("copy")
def db_copy(
    to: str = typer.Option(..., "--to", help="The empty database to copy into, e.g. postgresql://user@host/jct."),
    source: str | None = typer.Option(
        None, "--from", help="The database to copy from (default: the configured one, JCT_DATABASE_URL)."
    ),
    trace_root: Path | None = typer.Option(
        None, help="Also copy stored artifact content here: the JCT_TRACE_ROOT the target will be served with."
    ),
    batch_size: int = typer.Option(BATCH_SIZE, min=1, help="Rows per insert batch."),
) -> None:
    """Copy every table into an empty database (e.g. SQLite to PostgreSQL), ids and all, in one transaction."""
    # Plain echo, not rich: URLs and paths must survive copy and paste unwrapped.
    settings = load_settings()
    try:
        source_url = async_database_url(source) if source else settings.database_url
        target_url = async_database_url(to)
    except ValueError as exc:
        fail(str(exc), 2)
    typer.echo(f"copying {_masked(source_url)} -> {_masked(target_url)}")
    try:
        report = anyio.run(
            lambda: copy_database(
                source_url,
                target_url,
                trace_root=trace_root,
                batch_size=batch_size,
                on_table=lambda name, rows: typer.echo(f"  {name}: {rows} row(s)"),
            )
        )
    except CopyError as exc:
        fail(str(exc))
    total = sum(report.rows.values())
    typer.echo(f"copied {total} row(s) in {len(report.rows)} table(s); the target is at revision {head_revision()}")
    if report.derived:
        typer.echo(f"not copied, rebuilt by the target's triggers: {', '.join(report.derived)}")
    for name, next_id in report.sequences.items():
        typer.echo(f"  sequence of {name} restarts at {next_id}")
    if report.trace_move is not None:
        move = report.trace_move
        typer.echo(f"copied {move.files_copied} artifact content file(s) to {move.root}")
        if move.files_missing:
            typer.echo(f"warning: {len(move.files_missing)} content file(s) were missing, e.g. {move.files_missing[0]}")
    elif report.trace_roots:
        roots = ", ".join(str(root) for root in sorted(report.trace_roots))
        typer.echo(
            f"{report.stored_artifacts} stored artifact(s) keep their content under {roots}: serve the target with "
            "JCT_TRACE_ROOT set to it, or copy again into an empty database with --trace-root"
        )


@app.command("config")
def config() -> None:
    """Print the effective configuration (secrets masked)."""
    table = Table("setting", "value")
    for name, value in load_settings().effective().items():
        table.add_row(name, value)
    console.print(table)


# --- tokens --------------------------------------------------------------------------------


@token_app.command("create")
def token_create(
    name: str = typer.Argument(..., help="Who holds it: a person or an agent, e.g. alice or ci-agent-1."),
    role: list[str] = typer.Option(..., "--role", help="worker, reviewer or admin (repeatable)."),
) -> None:
    """Create a bearer token; its secret is printed once and never stored."""
    secret, info = run_core(lambda core, _actor: tokens.create_token(core, name, role))
    settings = load_settings()
    host = "HOST" if not _is_loopback(settings.host) else settings.host
    url = f"{settings.public_url}/mcp" if settings.public_url else f"http://{host}:{settings.port}/mcp"
    # Plain echo, not rich: the lines must survive copy and paste unwrapped.
    typer.echo(f"created token {info.name!r} with role(s) {', '.join(info.roles)}. Its secret, shown only now:")
    typer.echo("")
    typer.echo(f"    {secret}")
    typer.echo("")
    typer.echo("Clients send it on every request as the header 'Authorization: Bearer <secret>', e.g.")
    typer.echo(f'    claude mcp add --transport http jct {url} --header "Authorization: Bearer {secret}"')
    typer.echo(f"Revoke it with: jct token revoke {info.name}")


@token_app.command("rotate")
def token_rotate(name: str = typer.Argument(..., help="The token's name, from `jct token list`.")) -> None:
    """Replace a live token with a new secret of the same name and roles; the old one stops working at once."""
    rotated = run_core(lambda core, _actor: tokens.rotate_token(core, name))
    if rotated is None:
        fail(f"no live token named {name!r}; see `jct token list`")
    secret, info = rotated
    typer.echo(
        f"rotated token {info.name!r} (role(s) {', '.join(info.roles)}): the old secret is revoked. The new one:"
    )
    typer.echo("")
    typer.echo(f"    {secret}")
    typer.echo("")
    typer.echo("Its sessions and event streams were closed (within a second on every running server).")


@token_app.command("list")
def token_list() -> None:
    """List tokens: name, roles, when created, when revoked (secrets are never shown again)."""
    infos = run_core(lambda core, _actor: tokens.list_tokens(core))
    table = Table(title=f"{len(infos)} token(s)", box=box.SIMPLE_HEAD)
    for column in ("name", "roles", "created", "revoked"):
        table.add_column(column, no_wrap=column != "name", overflow="fold")
    for info in infos:
        table.add_row(info.name, ",".join(info.roles), _when(info.created_at), _when(info.revoked_at) or "-")
    console.print(table)


@token_app.command("revoke")
def token_revoke(name: str = typer.Argument(..., help="The token's name, from `jct token list`.")) -> None:
    """Revoke a token: every request that carries it is refused (401) from now on."""
    if not run_core(lambda core, _actor: tokens.revoke_token(core, name)):
        fail(f"no live token named {name!r}; see `jct token list`")
    console.print(f"revoked token {name!r}")


# --- the queue by hand ------------------------------------------------------------------


def run_core(work: Callable[[Core, Actor], Awaitable[T]]) -> T:
    """Open the configured database (migrating it), run one piece of work as the local admin, close it."""
    settings = load_settings()
    actor = Actor(actor_id=settings.agent_id or local_user(), actor_kind="human", name="jct-cli", admin=True)

    async def main() -> T:
        core = open_core(settings)
        try:
            await prepare_database(core.db, settings.database_url)
            return await work(core, actor)
        finally:
            with anyio.CancelScope(shield=True):
                await core.db.dispose()

    try:
        return anyio.run(main)
    except StartupError as exc:
        fail(str(exc))
    except JctError as exc:
        fail(f"{exc.code.value}: {exc.message} {exc.suggestion}".strip())


@app.command()
def enqueue(
    objective: str = typer.Argument(..., help="What the agent should achieve."),
    operation: str = typer.Option(..., help="code_change, docs, analysis or ops."),
    repo: str = typer.Option(..., help="Target repository, e.g. myorg/api."),
    ref: str = typer.Option("main", help="Branch or commit."),
    path: str = typer.Option("", help="Limit the work to this path in the repository."),
    priority: str = typer.Option("P2", help="P0 (first) .. P4."),
    budget: int = typer.Option(3600, help="Time budget in seconds (30..86400)."),
    criterion: list[str] = typer.Option([], help="An acceptance criterion (repeatable)."),
    summary: str | None = typer.Option(None, help="Context summary for the agent's briefing."),
    key: str | None = typer.Option(None, help="Idempotency key: enqueueing the same key twice is one task."),
) -> None:
    """Put a task on the queue."""
    result = run_core(
        lambda core, actor: intake.enqueue_task(
            core,
            actor,
            objective=objective,
            operation=operation,
            target_repo=repo,
            target_ref=ref,
            target_path=path,
            time_budget_seconds=budget,
            priority=priority,
            acceptance_criteria=criterion or None,
            context_summary=summary,
            idempotency_key=key,
        )
    )
    note = " (duplicate: this key was enqueued before)" if result.duplicate else ""
    console.print(f"enqueued task {result.task_id} status={result.status} issue={result.cwom_issue_id}{note}")


@app.command()
def tasks(
    status: str = typer.Option("queued", help=f"One of: {', '.join(STATUSES)}."),
    limit: int = typer.Option(20, help="At most this many (1..100)."),
) -> None:
    """List tasks, highest priority first."""
    page = run_core(lambda core, _actor: queue.list_tasks(core, status=status, limit=limit))
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
            _age(task.queued_at),
        )
    console.print(table)
    if page.next_cursor:
        console.print(f"(more than {limit}; pass --limit to see more)")


@app.command()
def show(entity_id: str = typer.Argument(..., metavar="ID", help="A task, run or evidence pack id.")) -> None:
    """Show a task, a run or an evidence pack, whichever the id names."""
    try:
        canonical = parse_id(entity_id, "ID")
    except JctError as exc:
        fail(exc.message)
    kind, view = run_core(lambda core, _actor: _find(core, canonical))
    {"task": _show_task, "run": _show_run, "evidence": _show_evidence}[kind](view)


async def _find(core: Core, entity_id: str) -> tuple[str, Any]:
    try:
        return "task", await observe.get_task(core, entity_id)
    except JctError as exc:
        if exc.code is not ErrorCode.TASK_NOT_FOUND:
            raise
    try:
        return "run", await observe.get_run(core, entity_id)
    except JctError as err:
        if err.code is not ErrorCode.RUN_NOT_FOUND:
            raise
    async with core.db.read() as conn:
        pack = await queries.get_evidence_pack(conn, entity_id)
    if pack is None:
        raise JctError(ErrorCode.INVALID_ARGUMENT, f"{entity_id} is not a task, run or evidence pack id.")
    return "evidence", views.evidence_detail(pack)


def _fields(title: str, rows: dict[str, Any]) -> Table:
    table = Table(title=title, show_header=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for name, value in rows.items():
        if value is None or value == "":
            continue
        table.add_row(name, _when(value) if isinstance(value, datetime) else str(value))
    return table


def _show_task(view: Any) -> None:
    task = view.task
    console.print(
        _fields(
            f"task {task.task_id}",
            {
                "status": task.status,
                "objective": task.objective,
                "operation": task.operation,
                "target": f"{task.target.repo}@{task.target.ref} {task.target.path}".strip(),
                "priority": task.priority,
                "time budget": f"{task.time_budget_seconds}s",
                "attempts": f"{task.attempts}/{task.max_attempts}",
                "issue": task.cwom_issue_id,
                "requested by": task.requested_by,
                "active run": task.active_run_id,
                "queued": task.queued_at,
                "claimed": task.claimed_at,
                "completed": task.completed_at,
                "error": task.error,
            },
        )
    )
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
                _when(run.started_at),
            )
        console.print(runs)


def _show_run(view: Any) -> None:
    run = view.run
    console.print(
        _fields(
            f"run {run.run_id}",
            {
                "status": run.status,
                "task": run.task_id,
                "attempt": run.attempt,
                "executor": run.executor.get("name") or run.executor.get("actor_id"),
                "started": run.started_at,
                "ended": run.ended_at,
                "lease expires": run.lease_expires_at,
                "summary": run.summary,
                "failure": run.failure,
                "verdict": view.evidence_pack.verdict if view.evidence_pack else None,
                "verdict reason": view.evidence_pack.verdict_reason if view.evidence_pack else None,
                "evidence pack": view.evidence_pack.id if view.evidence_pack else None,
            },
        )
    )
    if view.artifacts:
        artifacts = Table("artifact_id", "type", "title", "size", title="artifacts")
        for artifact in view.artifacts:
            size = "" if artifact.size_bytes is None else str(artifact.size_bytes)
            artifacts.add_row(artifact.artifact_id, artifact.type, artifact.title, size)
        console.print(artifacts)
    if view.events:
        events = Table("at", "kind", "progress", "message", title="events")
        for event in view.events:
            progress = "" if event.progress is None else f"{event.progress}%"
            events.add_row(_when(event.created_at), event.kind, progress, event.message)
        console.print(events)


def _show_evidence(pack: Any) -> None:
    console.print(
        _fields(
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
    )
    checks = Table("check", "passed", "detail", title="checks")
    for check in pack.checks:
        checks.add_row(check.name, {True: "yes", False: "NO", None: "-"}[check.passed], check.detail)
    console.print(checks)
    if pack.criteria_results:
        criteria = Table("criterion", "status", "evidence", title="acceptance criteria")
        for result in pack.criteria_results:
            criteria.add_row(result.criterion, result.status, ", ".join(result.evidence))
        console.print(criteria)


@app.command()
def stats() -> None:
    """Queue statistics: tasks by status, expired leases, the oldest queued task, pending reviews."""
    result = run_core(lambda core, _actor: queue.queue_stats(core))
    table = Table("", "count", title="queue")
    for status, count in result.counts.items():
        table.add_row(status, str(count))
    table.add_row("expired leases", str(result.expired_leases))
    table.add_row("pending reviews", str(result.pending_reviews))
    age = result.oldest_queued_age_seconds
    table.add_row("oldest queued", "-" if age is None else f"{age:.0f}s")
    console.print(table)


@app.command()
def reviews(limit: int = typer.Option(20, help="At most this many (1..100).")) -> None:
    """Evidence packs awaiting a review decision, oldest first."""
    page = run_core(lambda core, _actor: review.list_pending_reviews(core, limit=limit))
    table = Table(title=f"{page.count} pending review(s)", box=box.SIMPLE_HEAD)
    table.add_column("evidence_pack_id", no_wrap=True, min_width=36)
    table.add_column("verdict", no_wrap=True, min_width=7)
    table.add_column("objective / done by", overflow="fold", ratio=1)
    for item in page.reviews:
        by = item.executor.get("name") or item.executor.get("actor_id", "")
        table.add_row(item.evidence_pack_id, item.verdict, f"{item.objective}\n[dim]{by} · task {item.task_id}[/]")
    console.print(table)


@app.command("review")
def review_command(
    evidence_pack_id: str = typer.Argument(..., help="From `jct reviews`."),
    decision: str = typer.Argument(..., metavar="approve|reject|needs-changes"),
    reason: str = typer.Option(..., help="Why; the agent reads this when changes are needed."),
) -> None:
    """Decide an evidence pack: approve, reject, or send the task back with needs-changes."""
    choice = DECISIONS.get(decision.lower())
    if choice is None:
        fail(f"decision {decision!r} is not one of: approve, reject, needs-changes", 2)
    result = run_core(
        lambda core, actor: review.submit_review(
            core, actor, evidence_pack_id, choice, reason, reviewer_name=actor.actor_id
        )
    )
    console.print(
        f"review {result.review_id}: {result.decision}; task {result.task_status}, run {result.run_status}"
        + (f", issue {result.issue_status}" if result.issue_status else "")
        + (f", briefing v{result.context_packet_version}" if result.context_packet_version else "")
    )


def _age(value: datetime) -> str:
    seconds = max(0, int((datetime.now(UTC) - value).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _when(value: datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def main() -> None:
    app()
