"""The `jct` command: serve over HTTP or stdio, administer the database, and work the queue by hand.

The command table is in `commands`, imported only when needed (`app`); `jct serve --stdio`, which a client
starts for every session, goes straight to `stdio`, the lean start.
"""

from __future__ import annotations

import sys
from typing import Any


def main() -> None:
    # `jct serve --stdio` is started by a client for every session, and it waits for the answer to
    # `initialize`: that start skips the command table (typer, rich and every command's imports).
    if sys.argv[1:] == ["serve", "--stdio"]:
        from server.cli.stdio import main as serve_stdio

        serve_stdio()
        return
    from server.cli.commands import app

    app()


def __getattr__(name: str) -> Any:
    if name == "app":
        from server.cli.commands import app

        return app
    raise AttributeError(name)
