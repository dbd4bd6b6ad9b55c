"""A new user's first lines: `make install` puts `jct` on the PATH, and without JCT_HOME every `jct` shares one
per-user data directory whatever the working directory (so `make run` and a client's `jct serve --stdio` meet)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from server.config import Settings, user_data_dir

ROOT = Path(__file__).resolve().parents[2]


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The test process's environment without JCT_*, with HOME and XDG_DATA_HOME under tmp_path."""
    base = {key: value for key, value in os.environ.items() if not key.startswith("JCT_") and key != "DATABASE_URL"}
    return base | {"HOME": str(tmp_path / "home"), "XDG_DATA_HOME": str(tmp_path / "data")} | extra


def test_make_install_puts_jct_on_the_path(tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    done = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "install", f"PREFIX={prefix}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (prefix / "bin" / "jct").is_symlink()
    elsewhere = tmp_path / "project"
    elsewhere.mkdir()
    env = clean_env(tmp_path, PATH=f"{prefix / 'bin'}:/usr/bin:/bin")
    found = subprocess.run(["jct", "--help"], cwd=elsewhere, env=env, capture_output=True, text=True, check=False)
    assert found.returncode == 0, found.stderr
    assert "serve" in found.stdout
    removed = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "uninstall", f"PREFIX={prefix}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert removed.returncode == 0, removed.stderr
    assert not (prefix / "bin" / "jct").exists()


def test_default_home_is_the_user_data_dir_whatever_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("JCT_HOME", "JCT_DATABASE_URL", "DATABASE_URL", "JCT_TRACE_ROOT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    homes = []
    for cwd in (tmp_path / "a", tmp_path / "b"):
        cwd.mkdir()
        monkeypatch.chdir(cwd)
        homes.append(Settings(_env_file=None).home)
    if sys.platform.startswith("linux"):
        assert homes == [tmp_path / "data" / "jct"] * 2
    assert homes[0] == homes[1] == user_data_dir()
    monkeypatch.setenv("JCT_HOME", str(tmp_path / "mine"))
    assert Settings(_env_file=None).home == tmp_path / "mine"


@pytest.mark.anyio
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="XDG_DATA_HOME is the Linux data directory")
async def test_stdio_server_without_jct_home_uses_the_shared_directory(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "server", "serve", "--stdio"],
        env=clean_env(tmp_path, JCT_LOG_LEVEL="WARNING", PYTHONPATH=str(ROOT)),
        cwd=str(project),
    )
    async with Client(params, mode="legacy") as client:
        tools = await client.list_tools()
        assert tools.tools
    assert (tmp_path / "data" / "jct" / "jct.db").is_file()
    assert not (project / ".jct").exists()
