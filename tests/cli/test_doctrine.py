"""`jct doctrine` through the real process: add from a file, list, show, remove, and the one line for a
name that is not there; what it adds reaches the briefing of a task enqueued by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.config import Settings
from server.core import observe
from server.core.service import Core
from tests.support.command import jct, local_env, one_error_line

pytestmark = pytest.mark.anyio

STYLE = "# Code style\n\nUse type hints everywhere.\n"


async def test_add_list_show_remove_by_hand(tmp_path: Path) -> None:
    env = local_env(tmp_path) | {"COLUMNS": "200"}
    guide = tmp_path / "style.md"
    guide.write_text(STYLE)
    code, out, err = await jct(
        tmp_path, "doctrine", "add", "myorg/code-style", "--file", str(guide), "--repo-prefix", "myorg/", env=env
    )
    assert code == 0, err
    assert "doctrine myorg/code-style saved" in out
    assert "jct://doctrine/myorg/code-style" in out

    code, out, err = await jct(tmp_path, "doctrine", "list", env=env)
    assert code == 0, err
    assert "myorg/code-style" in out
    assert "myorg/" in out
    assert "# Code style" in out

    code, out, err = await jct(tmp_path, "doctrine", "show", "myorg/code-style", env=env)
    assert code == 0, err
    assert out == STYLE

    code, out, err = await jct(
        tmp_path, "enqueue", "Add a health check", "--operation", "code_change", "--repo", "myorg/api", env=env
    )
    assert code == 0, err
    task_id = out.split("enqueued task ", 1)[1].split()[0]
    core = Core.build(Settings(_env_file=None, database_url=f"sqlite:///{tmp_path / 'cli.db'}", home=tmp_path))
    try:
        context = await observe.get_context(core, task_id)
    finally:
        await core.db.dispose()
    assert [(d.namespace, d.name, d.body) for d in context.doctrine_refs] == [("myorg", "code-style", STYLE)]

    code, out, err = await jct(tmp_path, "doctrine", "remove", "myorg/code-style", env=env)
    assert code == 0, err
    code, out, err = await jct(tmp_path, "doctrine", "show", "myorg/code-style", env=env)
    assert code != 0
    assert one_error_line(err).startswith("error: DOCTRINE_NOT_FOUND: No doctrine named 'myorg/code-style'.")


async def test_a_bad_name_or_a_missing_file_is_one_line(tmp_path: Path) -> None:
    env = local_env(tmp_path)
    code, _out, err = await jct(tmp_path, "doctrine", "add", "no-namespace", "--file", "-", env=env)
    assert code != 0
    assert "INVALID_ARGUMENT" in one_error_line(err)
    code, _out, err = await jct(tmp_path, "doctrine", "add", "myorg/x", "--file", str(tmp_path / "absent.md"), env=env)
    assert code == 2
    assert one_error_line(err).startswith("error: cannot read ")
