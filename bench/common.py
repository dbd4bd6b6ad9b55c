"""Pieces the benchmarks share."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
from typing import Any

import anyio
import httpx2
from mcp import Client
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

READY_SECONDS = 60.0
DEFAULT_PG = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
DIALECTS = ("sqlite", "postgresql")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_ready(process: subprocess.Popen[bytes], base_url: str) -> None:
    """Poll /readyz until the server answers 200, or fail if it exits first."""
    async with httpx2.AsyncClient(timeout=5.0) as http:
        with anyio.fail_after(READY_SECONDS):
            while process.poll() is None:
                try:
                    if (await http.get(f"{base_url}/readyz")).status_code == 200:
                        return
                except httpx2.TransportError:
                    pass
                await anyio.sleep(0.05)
    raise RuntimeError(f"the server exited with {process.returncode}")


async def tool(client: Client, name: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, args)
    if result.is_error or result.structured_content is None:
        raise RuntimeError(f"{name} failed: {result.content}")
    return dict(result.structured_content)


async def admin(url: str, statement: str) -> None:
    """One statement outside a transaction (CREATE/DROP DATABASE for throwaway benchmark databases)."""
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(statement))
    finally:
        await engine.dispose()


def add_database_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dialects",
        type=lambda s: [d.strip() for d in s.split(",")],
        default=list(DIALECTS),
        help="comma-separated: sqlite, postgresql (default both)",
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("JCT_BENCH_POSTGRES_URL", DEFAULT_PG),
        help="server to create the throwaway database on (env JCT_BENCH_POSTGRES_URL)",
    )


def check_dialects(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    unknown = set(args.dialects) - set(DIALECTS)
    if unknown:
        parser.error(f"unknown dialects: {', '.join(sorted(unknown))}")
