"""A pause another task can end early (server/core/nudge.py `Nudge`): the integrator's between passes."""

from __future__ import annotations

import anyio
import pytest

from server.core.nudge import Nudge

pytestmark = pytest.mark.anyio


async def test_a_pause_lasts_its_time_unless_nudged() -> None:
    nudge = Nudge()
    with anyio.move_on_after(0.2) as timed:
        await nudge.pause(3600)
    assert timed.cancelled_caught, "nobody nudged: it pauses for its time"

    with anyio.fail_after(30):  # the pause returns on the nudge, not after an hour
        async with anyio.create_task_group() as tg:
            tg.start_soon(nudge.pause, 3600)
            await anyio.sleep(0.05)
            nudge.nudge()


async def test_a_nudge_while_nobody_pauses_ends_the_next_pause_only() -> None:
    nudge = Nudge()
    nudge.nudge()
    nudge.nudge()
    with anyio.fail_after(30):
        await nudge.pause(3600)  # returns at once
    with anyio.move_on_after(0.2) as timed:
        await nudge.pause(3600)
    assert timed.cancelled_caught, "two nudges before a pause end one pause, not two"
