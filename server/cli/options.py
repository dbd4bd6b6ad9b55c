"""Options shared by the listing commands (typer is loaded by the commands only: `jct serve --stdio` starts
without it, server/cli/stdio.py)."""

from __future__ import annotations

from collections.abc import Sequence

import typer


def limit_option(default: int = 20, most: int = 100) -> int:
    """The --limit option of the listing commands."""
    option: int = typer.Option(default, help=f"At most this many (1..{most}).")
    return option


def status_option(default: str, statuses: Sequence[str]) -> str:
    """The --status option of the listing commands."""
    option: str = typer.Option(default, help=f"One of: {', '.join(statuses)}.")
    return option
