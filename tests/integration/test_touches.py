"""Touches in an integrable repository, on real git and both databases (DESIGN section 16): a task whose work
waits in the merge queue still holds its touches, so the next task that touches the same files starts only
once that work is merged, from a base that contains it; no conflict ever reaches the merge queue."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from server.config import Settings
from server.core.claims import queue
from server.core.integration import integrator
from server.core.operators import observe
from server.errors import ErrorCode, JctError
from tests.core.helpers import ALICE, BOB
from tests.git.repo import Work
from tests.integration.test_merge_queue import HOLDER, commit_in, finish, local_task, make_core

pytestmark = pytest.mark.anyio


async def test_work_waiting_to_be_merged_holds_its_files_until_it_is_merged(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    work = Work(tmp_path / "repo")
    async with make_core(make_settings) as core:
        first = await local_task(core, work, objective="Say hello")  # touches its target_path, src
        second = await local_task(core, work, objective="Say goodbye", touches=["src/app.py"])
        elsewhere = await local_task(core, work, objective="Write docs", target_path="docs")

        claimed = await queue.claim_next(core, ALICE)
        assert claimed.task_id == first
        assert claimed.workspace is not None
        commit_in(claimed.workspace.model_dump(), "src/app.py", "print('hello')\n")
        await finish(core, ALICE, first)
        view = await observe.get_task(core, first)
        assert view.integration is not None
        assert view.integration.status == "queued"

        # Approved but not merged: src is still held. Claim-next passes over the second task to the docs one.
        assert (await queue.claim_next(core, BOB)).task_id == elsewhere
        with pytest.raises(JctError) as refused:
            await queue.claim_task(core, BOB, second)
        assert refused.value.code == ErrorCode.TASK_CONFLICTS
        assert f"task {first}" in refused.value.message
        assert "src/app.py overlaps src" in refused.value.message

        assert await integrator.integrate_waiting(core, HOLDER) == 1
        merged = work.head("main")
        again = await queue.claim_task(core, BOB, second)
        assert again.base_commit == merged  # it starts from the work it waited for
        assert again.workspace is not None
        commit_in(again.workspace.model_dump(), "src/app.py", "print('hello')\nprint('goodbye')\n")
        await finish(core, BOB, second)
        assert await integrator.integrate_waiting(core, HOLDER) == 1
        view = await observe.get_task(core, second)
        assert view.integration is not None
        assert view.integration.status == "merged"
        assert (work.path / "src" / "app.py").read_text() == "print('hello')\nprint('goodbye')\n"
