"""Workflows by hand: list them, check a file, print the schema, start one as a mission."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from server.cli.common import fail, load_settings, run_core
from server.cli.render import console
from server.core.workflows import definitions
from server.core.workflows import start as workflow_start
from server.vocab import Priority


def workflows_command() -> None:
    """List the workflows that loaded (shipped and JCT_WORKFLOWS_DIR), and the files refused."""
    settings = load_settings()
    listed = workflow_start.list_workflows_of(definitions.Workflows(settings.workflows_dir).catalog())
    table = Table(title=f"{len(listed.workflows)} workflow(s)", box=box.SIMPLE_HEAD)
    for column in ("name", "version", "inputs", "steps", "summary"):
        table.add_column(column, overflow="fold")
    for w in listed.workflows:
        inputs = ", ".join(f"{i.name}{'*' if i.required else ''}" for i in w.inputs)
        table.add_row(w.name, w.version, inputs, " ".join(w.steps), escape(w.summary))
    console.print(table)
    for problem in listed.refused:
        console.print(f"refused: {escape(problem)}")


def check(file: Path = typer.Argument(..., help="A workflow file (YAML).")) -> None:
    """Check a workflow file: every problem with its line; exit 1 if there is any."""
    result = definitions.read(file)
    if isinstance(result, list):
        for problem in result:
            console.print(escape(str(problem)), soft_wrap=True)
        fail(f"{file}: {len(result)} problem(s)")
    console.print(f"{file}: workflow {result.name!r} version {result.version}, {len(result.steps)} step(s): ok")


def schema() -> None:
    """Print the JSON Schema a workflow file must match."""
    typer.echo(json.dumps(definitions.schema(), indent=2))


def start(
    name: str = typer.Argument(..., help="A workflow, from `jct workflows`."),
    input_: list[str] = typer.Option([], "--input", help="An input as NAME=VALUE; repeat for each."),
    repo: str = typer.Option(..., help="The target repository, e.g. myorg/api."),
    ref: str = typer.Option("main", help="Branch, tag or commit."),
    path: str = typer.Option("", help="Scope in the repository."),
    priority: Priority = typer.Option(Priority.P2, help="P0 first."),
    key: str | None = typer.Option(None, help="Idempotency key: starting the same key twice is one mission."),
) -> None:
    """Start a workflow as a mission: one task per step."""
    inputs: dict[str, str] = {}
    for item in input_:
        name_, sep, value = item.partition("=")
        if not sep or not name_:
            fail(f"--input {item!r} is not NAME=VALUE", 2)
        inputs[name_.strip()] = value
    started = run_core(
        lambda core, actor: workflow_start.start_workflow(
            core,
            actor,
            name,
            inputs,
            target_repo=repo,
            target_ref=ref,
            target_path=path,
            priority=priority.value,
            idempotency_key=key,
        )
    )
    note = " (duplicate: this key was started before)" if started.duplicate else ""
    console.print(
        f"workflow {started.workflow} version {started.version}: mission {started.mission_id} with "
        f"{len(started.tasks)} task(s){note}"
    )
    for task in started.tasks:
        console.print(f"  {task.key or '-':<20} {task.task_id}  phase {task.phase}  {task.status}")
