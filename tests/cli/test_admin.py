"""`jct db upgrade` and `jct config` as an operator meets them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from server.config import Settings
from server.core import schema
from server.core.service import Core
from tests.support.command import jct, jct_process, local_env, one_error_line

pytestmark = pytest.mark.anyio

WIDE = {"COLUMNS": "200"}


def setting(out: str, name: str) -> str:
    """The value `jct config` shows for one setting."""
    found = re.search(rf"│ {name}\s+│ (.*?)\s*│", out)
    assert found is not None, (name, out)
    return found.group(1)


async def test_db_upgrade_brings_a_new_database_to_head_and_says_so(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    for _ in range(2):  # on a new database, then on one already at head
        code, out, err = await jct_process(tmp_path, "db", "upgrade", env=local_env(tmp_path))
        assert code == 0, err
        assert out == f"database at revision {schema.head_revision()}\n"
    core = Core.build(Settings(_env_file=None, database_url=url, home=tmp_path / "home"))
    try:
        assert await schema.current_revision(core) == schema.head_revision()
    finally:
        await core.db.dispose()


async def test_db_upgrade_of_an_unreachable_database_is_one_line(tmp_path: Path) -> None:
    env = local_env(tmp_path) | {"JCT_DATABASE_URL": "postgresql://jct:secret@127.0.0.1:1/x"}
    code, out, err = await jct(tmp_path, "db", "upgrade", env=env)
    assert code == 1
    line = one_error_line(err)
    assert "cannot reach the database postgresql+asyncpg://jct:***@127.0.0.1:1/x" in line
    assert "secret" not in err
    assert out == ""


async def test_config_prints_every_setting_in_force_with_the_password_masked(tmp_path: Path) -> None:
    env = (
        local_env(tmp_path)
        | WIDE
        | {
            "JCT_DATABASE_URL": "postgresql://jct:hunter2@db.internal/jct",
            "JCT_TOOLSETS": "worker,observe",
            "JCT_PORT": "9000",
        }
    )
    code, out, err = await jct(tmp_path, "config", env=env)
    assert code == 0, err
    for name in Settings.model_fields:
        assert f"JCT_{name.upper()}" in out, name
    assert setting(out, "JCT_DATABASE_URL") == "postgresql+asyncpg://jct:***@db.internal/jct"
    assert "hunter2" not in out
    assert setting(out, "JCT_TOOLSETS") == "worker,observe"
    assert setting(out, "JCT_PORT") == "9000"
    assert setting(out, "JCT_AUTH") == "none"
    assert setting(out, "JCT_TRACE_ROOT") == str(tmp_path / "traces")


@pytest.mark.parametrize("form", ["url", "path"])
async def test_trace_root_is_a_path_or_a_file_url(tmp_path: Path, form: str) -> None:
    root = tmp_path / "var lib" / "runs"
    given = root.as_uri() if form == "url" else str(root)
    code, out, err = await jct(tmp_path, "config", env=local_env(tmp_path) | WIDE | {"JCT_TRACE_ROOT": given})
    assert code == 0, err
    assert setting(out, "JCT_TRACE_ROOT") == str(root)
    assert Settings(_env_file=None, trace_root=given).traces == root


async def test_config_with_a_bad_setting_is_one_line(tmp_path: Path) -> None:
    code, out, err = await jct(tmp_path, "config", env=local_env(tmp_path) | {"JCT_PORT": "abc"})
    assert code == 2
    assert one_error_line(err).startswith("error: bad setting JCT_PORT: ")
    assert out == ""
