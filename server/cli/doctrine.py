"""Doctrine by hand: standing guidance that briefings carry (`jct doctrine add myorg/code-style --file F`)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from server.cli.common import fail, run_core
from server.cli.render import console
from server.core.briefings import doctrine

doctrine_app = typer.Typer(help="Doctrine: standing guidance that briefings carry.", no_args_is_help=True)


@doctrine_app.command("add")
def add(
    name: str = typer.Argument(..., help="NAMESPACE/NAME, e.g. myorg/code-style."),
    file: str = typer.Option(..., "--file", "-f", help="The guidance: a text or Markdown file (- for standard input)."),
    repo_prefix: str | None = typer.Option(
        None, "--repo-prefix", help="Every task whose repository starts with this gets it (e.g. myorg/)."
    ),
) -> None:
    """Add a doctrine entry, or replace the text (and prefix) of the one with this name."""
    try:
        body = sys.stdin.read() if file == "-" else Path(file).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read {file}: {exc}", 2)
    added = run_core(lambda core, actor: doctrine.add(core, actor, name, body, repo_prefix))
    entry = added.doctrine[0]
    reach = f", for every task of {entry.repo_prefix}" if entry.repo_prefix else ""
    console.print(f"doctrine {escape(entry.ref)} saved ({len(body)} characters{escape(reach)}): {entry.uri}")


@doctrine_app.command("list")
def list_command() -> None:
    """List doctrine entries by name, with their repository prefix and the start of their text."""
    shelf = run_core(lambda core, _actor: doctrine.list_doctrine(core))
    table = Table(title=f"{shelf.count} doctrine entr{'y' if shelf.count == 1 else 'ies'}", box=box.SIMPLE_HEAD)
    table.add_column("name", no_wrap=True)
    table.add_column("repo prefix", no_wrap=True)
    table.add_column("text", overflow="fold")
    for entry in shelf.doctrine:
        table.add_row(escape(entry.ref), escape(entry.repo_prefix or ""), escape(entry.body.splitlines()[0][:80]))
    console.print(table)


@doctrine_app.command("show")
def show(name: str = typer.Argument(..., help="NAMESPACE/NAME.")) -> None:
    """Print one entry's text (as it was added)."""
    entry = run_core(lambda core, _actor: doctrine.show(core, name)).doctrine[0]
    if entry.repo_prefix:
        sys.stderr.write(f"# {entry.ref}: every task of {entry.repo_prefix}\n")
    sys.stdout.write(entry.body if entry.body.endswith("\n") else entry.body + "\n")


@doctrine_app.command("remove")
def remove(name: str = typer.Argument(..., help="NAMESPACE/NAME.")) -> None:
    """Remove an entry: it leaves every briefing that carried it."""
    run_core(lambda core, actor: doctrine.remove(core, actor, name))
    console.print(f"doctrine {escape(name)} removed")
