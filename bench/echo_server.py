"""The benchmark server: `create_app` plus `echo` and `sink`, the protocol floor on the same SDK and transport.

Settings come from the JCT_* environment, as `jct serve` reads them; run by `common.start_server`:

    JCT_DATABASE_URL=sqlite:///x.db python bench/echo_server.py --port 8999
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class Echoed(BaseModel):
    text: str


async def echo(text: str) -> Echoed:
    """Return the text unchanged (the benchmark's protocol floor)."""
    return Echoed(text=text)


class Sunk(BaseModel):
    length: int


async def sink(text: str) -> Sunk:
    """Take the text, return its length (the floor for large uploads: the payload goes one way, like an artifact)."""
    return Sunk(length=len(text))


def extend(mcp: Any) -> None:
    mcp.add_tool(echo, name="echo")
    mcp.add_tool(sink, name="sink")


def main() -> None:
    import uvicorn

    from server.app import create_app
    from server.config import Settings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, force=True)
    settings = Settings(_env_file=None)
    app = create_app(settings, extend=extend)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_config=None, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
