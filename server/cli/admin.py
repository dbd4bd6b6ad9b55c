"""Administering JCT: the database (upgrade, copy), the configuration in force, and bearer tokens."""

from __future__ import annotations

from pathlib import Path

import anyio
import typer

from server.cli import render
from server.cli.common import fail, is_loopback, load_settings, masked, run_core
from server.cli.render import console
from server.config import async_database_url
from server.core import schema, tokens, transfer

# --- the database and the configuration ---------------------------------------------------------


def db_upgrade() -> None:
    """Apply every pending migration (also done on start)."""
    revision = run_core(lambda core, _actor: schema.current_revision(core))
    console.print(f"database at revision {revision}")


def db_copy(
    to: str = typer.Option(..., "--to", help="The empty database to copy into, e.g. postgresql://user@host/jct."),
    source: str | None = typer.Option(
        None, "--from", help="The database to copy from (default: the configured one, JCT_DATABASE_URL)."
    ),
    trace_root: Path | None = typer.Option(
        None, help="Also copy stored artifact content here: the JCT_TRACE_ROOT the target will be served with."
    ),
    batch_size: int = typer.Option(transfer.BATCH_SIZE, min=1, help="Rows per insert batch."),
) -> None:
    """Copy every table into an empty database (e.g. SQLite to PostgreSQL), ids and all, in one transaction."""
    # Plain echo, not rich: URLs and paths must survive copy and paste unwrapped.
    settings = load_settings()
    try:
        source_url = async_database_url(source) if source else settings.database_url
        target_url = async_database_url(to)
    except ValueError as exc:
        fail(str(exc), 2)
    typer.echo(f"copying {masked(source_url)} -> {masked(target_url)}")
    try:
        report = anyio.run(
            lambda: transfer.copy(
                source_url,
                target_url,
                trace_root=trace_root,
                batch_size=batch_size,
                on_table=lambda name, rows: typer.echo(f"  {name}: {rows} row(s)"),
            )
        )
    except transfer.CopyError as exc:
        fail(str(exc))
    total = sum(report.rows.values())
    typer.echo(
        f"copied {total} row(s) in {len(report.rows)} table(s); the target is at revision {schema.head_revision()}"
    )
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


def config() -> None:
    """Print the effective configuration (secrets masked)."""
    console.print(render.settings(load_settings().effective()))


# --- tokens ---------------------------------------------------------------------------------------


def token_create(
    name: str = typer.Argument(..., help="Who holds it: a person or an agent, e.g. alice or ci-agent-1."),
    role: list[str] = typer.Option(..., "--role", help="worker, reviewer or admin (repeatable)."),
) -> None:
    """Create a bearer token; its secret is printed once and never stored."""
    secret, info = run_core(lambda core, _actor: tokens.create_token(core, name, role))
    settings = load_settings()
    host = "HOST" if not is_loopback(settings.host) else settings.host
    url = f"{settings.public_url}/mcp" if settings.public_url else f"http://{host}:{settings.port}/mcp"
    # Plain echo, not rich: the lines must survive copy and paste unwrapped.
    typer.echo(f"created token {info.name!r} with role(s) {', '.join(info.roles)}. Its secret, shown only now:")
    typer.echo("")
    typer.echo(f"    {secret}")
    typer.echo("")
    typer.echo("Clients send it on every request as the header 'Authorization: Bearer <secret>', e.g.")
    typer.echo(f'    claude mcp add --transport http jct {url} --header "Authorization: Bearer {secret}"')
    typer.echo(f"Revoke it with: jct token revoke {info.name}")


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


def token_list() -> None:
    """List tokens: name, roles, when created, when revoked (secrets are never shown again)."""
    console.print(render.tokens(run_core(lambda core, _actor: tokens.list_tokens(core))))


def token_revoke(name: str = typer.Argument(..., help="The token's name, from `jct token list`.")) -> None:
    """Revoke a token: every request that carries it is refused (401) from now on."""
    if not run_core(lambda core, _actor: tokens.revoke_token(core, name)):
        fail(f"no live token named {name!r}; see `jct token list`")
    console.print(f"revoked token {name!r}")
