"""`jct token ...` as an operator meets it, and `jct serve` refusing to expose an unauthenticated server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from server.config import Settings
from server.core import tokens
from server.core.service import Core
from server.core.tokens import Role
from tests.security.conftest import jct
from tests.transports.conftest import server_env

pytestmark = pytest.mark.anyio

SECRET = re.compile(r"\bjct_[A-Za-z0-9_-]{20,}")


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got:\n{stderr}"
    assert lines[0].startswith("error: ")
    assert "Traceback" not in stderr
    return lines[0]


async def test_token_create_list_revoke(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    env = server_env(url, tmp_path)

    code, out, err = await jct(tmp_path, "token", "create", "alice", "--role", "worker", "--role", "reviewer", env=env)
    assert code == 0, err
    secrets = set(SECRET.findall(out))
    assert len(secrets) == 1, out
    (secret,) = secrets
    assert "shown only now" in out
    assert f'--header "Authorization: Bearer {secret}"' in out

    core = Core.build(Settings(_env_file=None, database_url=url, home=tmp_path / "home"))  # type: ignore[call-arg]
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


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
async def test_serving_a_public_address_without_tokens_is_refused_in_one_line(tmp_path: Path, host: str) -> None:
    env = server_env(f"sqlite:///{tmp_path / 'cli.db'}", tmp_path)
    code, out, err = await jct(tmp_path, "serve", "--host", host, "--port", "1", env=env)
    assert code != 0
    line = one_error_line(err)
    assert f"JCT_AUTH=none serves anyone who can reach {host}" in line
    assert "set JCT_AUTH=token" in line
    assert out == ""
