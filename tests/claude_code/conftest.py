"""Fixtures for driving the real Claude Code CLI against a real JCT.

`claude_binary` installs the pinned CLI once (scripts/claude-code.sh); `claude_code` is the CLI for one
test (its own HOME, working directory and egress catcher); `jct_env` is the JCT_* environment of the
test's database, and `jct` a `jct serve` subprocess on it. Tests add the scripted model
(`tests.claude_code.model.scripted_model`) and, where they watch the MCP traffic, a proxy
(`tests.claude_code.proxy.mcp_proxy`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.claude_code.harness import ClaudeCode, claude_binary
from tests.claude_code.proxy import egress
from tests.transports.conftest import http_server, server_env


@pytest.fixture(scope="session")
def claude() -> Path:
    return claude_binary()


@pytest.fixture
async def claude_code(claude: Path, tmp_path: Path) -> AsyncIterator[ClaudeCode]:
    work = tmp_path / "work"
    work.mkdir()
    async with egress() as (catcher, url):
        yield ClaudeCode(claude, tmp_path / "claude-home", work, catcher, url)


@pytest.fixture
def jct_env(database_url: str, tmp_path: Path) -> dict[str, str]:
    return server_env(database_url, tmp_path)


@pytest.fixture
async def jct(jct_env: dict[str, str], tmp_path: Path) -> AsyncIterator[str]:
    """A running `jct serve` on the test's database: its base URL."""
    async with http_server(jct_env, tmp_path) as url:
        yield url
