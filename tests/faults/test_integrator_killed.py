"""A server process SIGKILLed while it integrates (DESIGN section 16), with another one on the same database:
the target branch is the old commit until the survivor takes the integration over, then the new one; the
work is merged once, and no scratch worktree is left behind.

The repository's check command blocks the first time it runs (it writes down which server started it), so
the kill lands mid-check, after the replay and before the ref moves."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from server.config import Settings
from server.core.claims import queue
from server.core.operators import observe
from server.core.review import completion
from tests.core.helpers import ALICE, built_core, enqueue
from tests.git.repo import Work, git
from tests.support.servers import serving
from tests.transports.conftest import server_env

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LIMIT = 120


async def test_an_integrator_killed_mid_check_is_taken_over_and_the_ref_is_never_a_mix(
    database_url: str, tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    work = Work(tmp_path / "repo")
    first = work.head()
    started, release, pids = tmp_path / "started", tmp_path / "release", tmp_path / "pids"
    # Blocks until `release` exists, the first time only; says which server ran it.
    check = (
        f"echo $$ >> {pids}; if [ ! -e {release} ]; then echo $PPID > {started}; "
        f"while [ ! -e {release} ]; do sleep 0.1; done; exit 1; fi; echo checked"
    )
    settings = {"integrate_local": True, "check_commands": {str(work.path): check}, "integrator_lease_seconds": 2}
    async with built_core(make_settings(**settings)) as core:
        task_id = await enqueue(
            core, target_repo=str(work.path), target_ref="main", target_path="src", acceptance_criteria=[]
        )
        space = (await queue.claim_task(core, ALICE, task_id)).workspace
        assert space is not None
        assert space.path is not None
        (Path(space.path) / "src" / "app.py").write_text("print('hello')\n")
        await completion.complete_task(core, ALICE, task_id, success=True, summary="greeted")

        env = server_env(database_url, tmp_path, check_commands=json.dumps(settings["check_commands"]))
        env |= {"JCT_INTEGRATOR_LEASE_SECONDS": "2", "JCT_HOME": str(core.settings.home)}
        try:
            with anyio.fail_after(LIMIT):
                async with serving(env, tmp_path, count=2) as servers:
                    while not started.exists():
                        await anyio.sleep(0.05)
                    runner = int(started.read_text())
                    doomed = next(s for s in servers if s.process.pid == runner)
                    survivor = next(s for s in servers if s is not doomed)
                    await doomed.kill()
                    assert work.head("main") == first  # mid-check: nothing moved
                    release.touch()  # the check passes from now on
                    while True:
                        view = await observe.get_task(core, task_id)
                        if view.integration is not None and view.integration.status == "merged":
                            break
                        await anyio.sleep(0.1)
                    survivor_log = survivor.log()
        finally:
            release.touch()
            for pid in pids.read_text().split() if pids.exists() else []:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(int(pid), signal.SIGKILL)
        assert view.integration is not None
        landed = work.head("main")
        assert view.integration.commit == landed != first
        assert git(work.path, "show", "main:src/app.py") == "print('hello')"
        assert work.git("status", "--porcelain") == ""
        assert work.git("rev-list", "--count", f"{first}..main") == "1"  # merged once
        assert not any((core.settings.worktrees / "scratch").glob("*"))
        assert "Traceback" not in survivor_log, survivor_log
