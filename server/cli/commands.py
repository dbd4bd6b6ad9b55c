"""The command table: `serve`, `admin` (db, config, token), `queue` (the queue by hand), `missions` (plan, list,
show), `workflows` (list, check, schema, start), `operators` (cancel, requeue, priority, agents, stuck, audit),
`doctrine` (add, list, show, remove), `render` (how they print) and `common` (settings, failures, `run_core`)."""

from __future__ import annotations

import typer

from server.cli import admin, missions, operators, queue, serve, workflows
from server.cli.doctrine import doctrine_app

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
app.command()(queue.brief)
app.command()(queue.stats)
app.command()(queue.reviews)
app.command("review")(queue.review_command)
app.command()(missions.plan)
app.command("missions")(missions.missions_command)
app.command()(missions.mission)
app.command("mission-budget")(missions.mission_budget)
app.command("mission-summary")(missions.mission_summary)
app.command("workflows")(workflows.workflows_command)
app.command("cancel")(operators.cancel_command)
app.command()(operators.requeue)
app.command()(operators.priority)
app.command()(operators.agents)
app.command()(operators.stuck)
app.command()(operators.audit)

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
app.add_typer(doctrine_app, name="doctrine")

workflow_app = typer.Typer(help="Workflows: reusable plans that start missions.", no_args_is_help=True)
workflow_app.command("start")(workflows.start)
workflow_app.command("check")(workflows.check)
workflow_app.command("schema")(workflows.schema)
app.add_typer(workflow_app, name="workflow")
