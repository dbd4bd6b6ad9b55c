"""Work a call hands off once its transaction has committed, done after the call has answered.

A completion's trace manifest is written from what its transaction read and wrote (server/core/review/
manifest.py), and the ended run's worktree is removed (server/core/integration/workspace.py); the agent waits
for neither. Readers of that work in this process (the run's page, a retried completion, the merge that deletes
the run's branch, the sweeper and the next run that keep what an agent left in a worktree) wait for it first
(`settled`), so nobody here sees it half done. Another process that reads the run before its manifest is on disk
writes it itself; its merge removes a worktree still there itself.

The work is done by one task of the server's background (server/background.py `run_background`), in the
order it was handed off. A server that stops finishes the work under way in a worker thread, then does what it
was handed and has not begun, for STOP_SECONDS at most; what is left then, and what a killed process left,
others do (a run's page writes its missing manifest, the sweeper removes a worktree whose run has ended).
Where no background runs (a script or a test calling the service directly), the work is done before
`hand_off` returns.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectSendStream

log = logging.getLogger(__name__)

# How long a stop waits for the work handed off and not yet done (a large checkout takes a while to delete).
STOP_SECONDS = 5.0


class Handoffs:
    """The work handed off in this process and not yet done, by key (a run id), done one at a time in order."""

    def __init__(self) -> None:
        self._queue: MemoryObjectSendStream[_Handed] | None = None
        self._pending: dict[str, anyio.Event] = {}

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Do the work handed off, until cancelled; then what was handed off and not begun, for STOP_SECONDS."""
        send, receive = anyio.create_memory_object_stream[_Handed](math.inf)
        self._queue = send
        task_status.started()
        try:
            async for handed in receive:
                # Not shielded: a stop cancels it, but the file or directory work it does in a worker thread
                # finishes first (anyio waits for the thread).
                await self._do(handed)
        finally:
            self._queue = None
            # What is left undone after that is done by others: a run's page writes its missing manifest, the
            # sweeper removes a worktree whose run has ended.
            with anyio.move_on_after(STOP_SECONDS, shield=True):
                while True:
                    try:
                        handed = receive.receive_nowait()
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                    await self._do(handed)
            for left in self._pending.values():
                left.set()  # nobody waits for work that will not be done here
            self._pending.clear()
            send.close()
            receive.close()

    async def hand_off(self, key: str, work: Callable[[], Awaitable[None]]) -> None:
        """Do `work` after the caller has answered, or now when no background runs in this process."""
        if self._queue is None:
            await work()
            return
        done = anyio.Event()
        self._pending[key] = done
        self._queue.send_nowait(_Handed(key, work, done))

    async def settled(self, key: str) -> None:
        """Return once the work handed off for `key` in this process, if any, is done."""
        done = self._pending.get(key)
        if done is not None:
            await done.wait()

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def _do(self, handed: _Handed) -> None:
        try:
            await handed.work()
        except Exception:  # a defect in the work: logged, never the end of the server
            log.exception("work handed off for %s failed", handed.key)
        finally:
            handed.done.set()
            if self._pending.get(handed.key) is handed.done:
                del self._pending[handed.key]


@dataclass(frozen=True)
class _Handed:
    key: str
    work: Callable[[], Awaitable[None]]
    done: anyio.Event
