"""A task group held open by its owner's `run` (a background task of the app's lifespan), for work started
from code that runs in no task group of its own: the change feed's sends, the session register's closings."""

from __future__ import annotations

import anyio
from anyio.abc import TaskGroup, TaskStatus


class HeldTaskGroup:
    """`group` is the task group while `run` runs, None before and after: its users then do without."""

    def __init__(self) -> None:
        self.group: TaskGroup | None = None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Hold the task group open until cancelled."""
        async with anyio.create_task_group() as tg:
            self.group = tg
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                self.group = None
