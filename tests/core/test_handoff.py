"""Work handed off after a call answers (server/core/handoff.py): done in order, waited for by its readers,
never dropped by a stop."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import anyio
import pytest

from server.core import handoff
from server.core.handoff import Handoffs

pytestmark = pytest.mark.anyio


async def test_without_a_background_the_work_is_done_before_hand_off_returns() -> None:
    handoffs, done = Handoffs(), []

    async def work() -> None:
        await anyio.sleep(0)
        done.append("run-1")

    await handoffs.hand_off("run-1", work)
    assert done == ["run-1"]
    assert handoffs.pending == 0


async def test_a_reader_waits_for_the_work_of_its_key_only() -> None:
    handoffs, release, done = Handoffs(), anyio.Event(), []

    async def slow() -> None:
        await release.wait()
        done.append("run-1")

    async def quick() -> None:
        done.append("run-2")

    async with anyio.create_task_group() as tg:
        await tg.start(handoffs.run)
        await handoffs.hand_off("run-1", slow)
        assert done == []  # handed off: the caller goes on at once
        assert handoffs.pending == 1
        with anyio.move_on_after(0.2) as waited:
            await handoffs.settled("run-1")
        assert waited.cancelled_caught  # not done while its work waits
        await handoffs.settled("run-3")  # nothing handed off for it: no wait
        release.set()
        await handoffs.settled("run-1")
        assert done == ["run-1"]
        await handoffs.hand_off("run-2", quick)
        await handoffs.settled("run-2")
        assert done == ["run-1", "run-2"]
        assert handoffs.pending == 0
        tg.cancel_scope.cancel()


async def test_a_stop_does_the_work_handed_off_before_it_ends() -> None:
    handoffs, done = Handoffs(), []

    def work(key: str) -> Callable[[], Awaitable[None]]:
        async def write() -> None:
            def on_disk() -> None:
                time.sleep(0.05)
                done.append(key)

            await anyio.to_thread.run_sync(on_disk)  # as the real work does: a stop lets the thread finish

        return write

    async with anyio.create_task_group() as tg:
        await tg.start(handoffs.run)
        for n in range(5):
            await handoffs.hand_off(f"run-{n}", work(f"run-{n}"))
        tg.cancel_scope.cancel()
    assert done == [f"run-{n}" for n in range(5)]
    assert handoffs.pending == 0
    await handoffs.hand_off("run-5", work("run-5"))  # stopped: done at once again
    assert done[-1] == "run-5"


async def test_a_failing_work_is_logged_and_the_next_still_done(caplog: pytest.LogCaptureFixture) -> None:
    handoffs, done = Handoffs(), []

    async def broken() -> None:
        raise ValueError("a defect")

    async def fine() -> None:
        done.append("run-2")

    async with anyio.create_task_group() as tg:
        await tg.start(handoffs.run)
        await handoffs.hand_off("run-1", broken)
        await handoffs.hand_off("run-2", fine)
        await handoffs.settled("run-1")
        await handoffs.settled("run-2")
        tg.cancel_scope.cancel()
    assert done == ["run-2"]
    assert "work handed off for run-1 failed" in caplog.text


async def test_a_stop_waits_for_the_work_left_a_bounded_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A work that does not end (a hung disk) holds a stop up for STOP_SECONDS, not for ever; what it was to do
    others do later (a run's page writes a missing manifest, the sweeper removes a worktree)."""
    monkeypatch.setattr(handoff, "STOP_SECONDS", 0.2)
    handoffs, done = Handoffs(), []

    async def hung() -> None:
        await anyio.sleep_forever()

    async def after() -> None:
        done.append("run-3")

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(handoffs.run)
            await handoffs.hand_off("run-1", hung)  # under way at the stop: cancelled
            await handoffs.hand_off("run-2", hung)  # not begun: given STOP_SECONDS, then cancelled
            await handoffs.hand_off("run-3", after)  # not reached
            await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
    assert done == []
    assert handoffs.pending == 0
    with anyio.fail_after(30):
        await handoffs.settled("run-3")  # never done here; nobody waits for it
