"""The `jct` command."""

from __future__ import annotations

import anyio
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from server.config import Settings
from server.db.engine import Database
from server.db.migrate import current_revision, upgrade

app = typer.Typer(help="JCT: a shared work queue for coding agents, served over MCP.", no_args_is_help=True)
db_app = typer.Typer(help="Database administration.", no_args_is_help=True)
app.add_typer(db_app, name="db")
console = Console()


def load_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        console.print(f"[red]error:[/] bad setting {field or 'JCT_*'}: {first['msg']}")
        raise typer.Exit(2) from None


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply every pending migration (also done on start)."""
    settings = load_settings()

    async def main() -> str | None:
        db = Database(settings.database_url)
        try:
            await upgrade(db)
            return await current_revision(db)
        finally:
            await db.dispose()

    revision = anyio.run(main)
    console.print(f"database at revision {revision}")


@app.command("config")
def config() -> None:
    """Print the effective configuration (secrets masked)."""
    table = Table("setting", "value")
    for name, value in load_settings().effective().items():
        table.add_row(name, value)
    console.print(table)


def main() -> None:
    app()
