"""`jct doctrine`, `jct enqueue --prior-art --data` and `jct brief` through the real process: doctrine added
from a file reaches the briefing of a task enqueued by hand; a briefing is revised by hand; bad input is one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.config import Settings
from server.core.operators import observe
from server.core.service import Core
from tests.support.command import jct, jct_process, local_env, one_error_line

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
    code, _out, err = await jct_process(tmp_path, "doctrine", "add", "no-namespace", "--file", "-", env=env)
    assert code != 0
    assert "INVALID_ARGUMENT" in one_error_line(err)
    code, _out, err = await jct_process(
        tmp_path, "doctrine", "add", "myorg/x", "--file", str(tmp_path / "absent.md"), env=env
    )
    assert code == 2
    assert one_error_line(err).startswith("error: cannot read ")


async def test_enqueue_with_prior_art_and_data_then_revise_the_briefing_by_hand(tmp_path: Path) -> None:
    env = local_env(tmp_path)
    code, out, err = await jct(
        tmp_path,
        "enqueue",
        "Validate emails",
        "--operation",
        "code_change",
        "--repo",
        "myorg/api",
        "--prior-art",
        "PR #12 was reverted",
        "--data",
        '{"endpoint": "/signup"}',
        env=env,
    )
    assert code == 0, err
    task_id = out.split("enqueued task ", 1)[1].split()[0]
    code, out, err = await jct(
        tmp_path, "brief", task_id, "--summary", "Reject missing TLDs too.", "--criterion", "TLD required", env=env
    )
    assert code == 0, err
    assert out.strip() == f"briefing of task {task_id} is now version 2"
    core = Core.build(Settings(_env_file=None, database_url=f"sqlite:///{tmp_path / 'cli.db'}", home=tmp_path))
    try:
        packet = (await observe.get_context(core, task_id)).context_packet
    finally:
        await core.db.dispose()
    assert packet is not None
    assert (packet.version, packet.summary, packet.acceptance_criteria) == (
        2,
        "Reject missing TLDs too.",
        ["TLD required"],
    )
    assert (packet.prior_art, packet.data) == (["PR #12 was reverted"], {"endpoint": "/signup"})
    code, _out, err = await jct(tmp_path, "brief", task_id, "--data", "[1]", env=env)
    assert code == 2
    assert one_error_line(err) == "error: --data must be a JSON object"
