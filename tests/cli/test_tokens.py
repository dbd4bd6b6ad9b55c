"""`jct token ...` as an operator meets it: a secret shown once, a list without secrets, revoke and rotate."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from server.config import Settings
from server.core import tokens
from server.core.service import Core
from server.core.tokens import Role
from tests.support.command import jct, jct_process, local_env, one_error_line

pytestmark = pytest.mark.anyio

SECRET = re.compile(r"\bjct_[A-Za-z0-9_-]{20,}")


async def test_token_create_list_revoke(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    env = local_env(tmp_path)

    code, out, err = await jct(tmp_path, "token", "create", "alice", "--role", "worker", "--role", "reviewer", env=env)
    assert code == 0, err
    secrets = set(SECRET.findall(out))
    assert len(secrets) == 1, out
    (secret,) = secrets
    assert "shown only now" in out
    assert f'--header "Authorization: Bearer {secret}"' in out

    core = Core.build(Settings(_env_file=None, database_url=url, home=tmp_path / "home"))
    try:
        principal = await tokens.verify(core, secret)
        assert principal is not None
        assert (principal.name, principal.roles) == ("alice", frozenset({Role.WORKER, Role.REVIEWER}))
        row = (await tokens.list_tokens(core))[0]
        assert secret not in str(row)

        code, out, err = await jct(tmp_path, "token", "create", "ci-agent-1", "--role", "admin", env=env)
        assert code == 0, err
        code, out, err = await jct(tmp_path, "token", "list", env=env)
        assert code == 0, err
        assert "2 token(s)" in out
        assert re.search(r"alice\s+reviewer,worker\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+-", out), out
        assert re.search(r"ci-agent-1\s+admin\s", out), out
        assert not SECRET.search(out)

        code, out, err = await jct(tmp_path, "token", "revoke", "alice", env=env)
        assert code == 0, err
        assert "revoked token 'alice'" in out
        assert await tokens.verify(core, secret) is None
        code, out, err = await jct(tmp_path, "token", "list", env=env)
        assert re.search(r"alice\s+reviewer,worker\s+\S+ \S+\s+\d{4}-\d\d-\d\d", out), out
    finally:
        await core.db.dispose()

    refusals = [
        (("token", "revoke", "alice"), "no live token named 'alice'"),
        (("token", "create", "bob", "--role", "superuser"), "unknown role"),
        (("token", "create", "ci-agent-1", "--role", "worker"), "already exists"),
        (("token", "create", "bad name", "--role", "worker"), "is not valid"),
    ]
    for args, expected in refusals:
        code, out, err = await jct(tmp_path, *args, env=env)
        assert code != 0
        assert expected in one_error_line(err)
        assert not SECRET.search(out)


async def test_token_rotate_prints_a_new_secret_and_the_old_one_stops_working(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    env = local_env(tmp_path)
    code, out, err = await jct_process(tmp_path, "token", "create", "ci-agent-1", "--role", "worker", env=env)
    assert code == 0, err
    (old,) = set(SECRET.findall(out))

    code, out, err = await jct_process(tmp_path, "token", "rotate", "ci-agent-1", env=env)
    assert code == 0, err
    assert out.startswith("rotated token 'ci-agent-1' (role(s) worker): the old secret is revoked. The new one:")
    assert "Its sessions and event streams were closed" in out
    (new,) = set(SECRET.findall(out))
    assert new != old

    core = Core.build(Settings(_env_file=None, database_url=url, home=tmp_path / "home"))
    try:
        assert await tokens.verify(core, old) is None
        principal = await tokens.verify(core, new)
        assert principal is not None
        assert (principal.name, principal.roles) == ("ci-agent-1", frozenset({Role.WORKER}))
    finally:
        await core.db.dispose()

    code, out, err = await jct_process(tmp_path, "token", "list", env=env)
    assert code == 0, err
    assert "2 token(s)" in out  # the revoked one and its successor
    assert not SECRET.search(out)

    code, out, err = await jct_process(tmp_path, "token", "rotate", "nobody", env=env)
    assert code == 1
    assert one_error_line(err) == "error: no live token named 'nobody'; see `jct token list`"
    assert not SECRET.search(out)
