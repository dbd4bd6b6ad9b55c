"""The command table: `serve`, `admin` (db, config, token), `queue` (the queue by hand), `missions` (plan, list,
show), `render` (how they print) and `common` (settings, failures, `run_core`)."""

from __future__ import annotations

import typer

from server.cli import admin, missions, queue, serve

app = typer.Typer(
    help="JCT: a shared work queue for coding agents, served over MCP.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.command()(serve.serve)
app.command()(admin.config)
app.command()(queue.enqueue)
app.command()(queue.tasks)
app.command()(queue.show)
app.command()(queue.stats)
app.command()(queue.reviews)
app.command("review")(queue.review_command)
app.command()(missions.plan)
app.command("missions")(missions.missions_command)
app.command()(missions.mission)

db_app = typer.Typer(help="Database administration.", no_args_is_help=True)
db_app.command("upgrade")(admin.db_upgrade)
db_app.command("copy")(admin.db_copy)
app.add_typer(db_app, name="db")

token_app = typer.Typer(help="Bearer tokens for a shared server (JCT_AUTH=token).", no_args_is_help=True)
token_app.command("create")(admin.token_create)
token_app.command("rotate")(admin.token_rotate)
token_app.command("list")(admin.token_list)
token_app.command("revoke")(admin.token_revoke)
app.add_typer(token_app, name="token")
