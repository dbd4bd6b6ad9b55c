"""The MCP Inspector's own `--strict` schema portability check (npm @modelcontextprotocol/inspector, pinned in
scripts/inspector.sh, CLI mode) against `jct serve --stdio`: every tool listed, no finding reported. Its rules
are also checked without Node in tests/tools/test_portable_schemas.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
INSTALL_SECONDS = 600.0
RUN_SECONDS = 180.0


def inspector() -> Path:
    """The pinned Inspector launcher, installed on first use; fails the test (never skips) if it cannot be."""
    done = subprocess.run(
        [str(ROOT / "scripts" / "inspector.sh")], capture_output=True, text=True, timeout=INSTALL_SECONDS, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"could not install the MCP Inspector with scripts/inspector.sh:\n{done.stderr}")
    return Path(done.stdout.strip().splitlines()[-1])


def test_the_inspector_strict_check_finds_nothing(tmp_path: Path) -> None:
    launcher = inspector()
    env_args = []
    for name, value in {"JCT_HOME": str(tmp_path / "home"), "JCT_LOG_LEVEL": "WARNING"}.items():
        env_args += ["-e", f"{name}={value}"]
    command = ["node", str(launcher), "--cli", "--strict", "--method", "tools/list", *env_args, "--"]
    done = subprocess.run(
        [*command, sys.executable, "-m", "server", "serve", "--stdio"],
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    tools = json.loads(done.stdout)["tools"]
    assert len(tools) > 20, done.stdout
    assert all("outputSchema" in tool for tool in tools)
    assert "Warning:" not in done.stderr, done.stderr
    assert "Error:" not in done.stderr, done.stderr
    assert "portability" not in done.stderr, done.stderr
