"""Work a call hands off once its transaction has committed, done after the call has answered.

A completion's trace manifest is written from what its transaction read and wrote (server/core/review/
manifest.py), and the ended run's worktree is removed (server/core/integration/workspace.py); the agent waits
for neither. Readers of that work in this process (the run's page, a retried completion, the merge that deletes
the run's branch) wait for it first (`settled`), so nobody here sees it half done. Another process may read the
run a moment before its manifest is on disk (its page says none was written yet); its merge removes a worktree
still there itself.

The work is done by one task of the server's background (server/background.py `run_background`), in the
order it was handed off, shielded: a server that stops does what it was handed before it exits. Where no
background runs (a script or a test calling the service directly), the work is done before `hand_off` returns.
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


class Handoffs:
    """The work handed off in this process and not yet done, by key (a run id), done one at a time in order."""

    def __init__(self) -> None:
        self._queue: MemoryObjectSendStream[_Handed] | None = None
        self._pending: dict[str, anyio.Event] = {}

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Do the work handed off, until cancelled; then what was handed off and not yet done is done first."""
        send, receive = anyio.create_memory_object_stream[_Handed](math.inf)
        self._queue = send
        task_status.started()
        try:
            async for handed in receive:
                with anyio.CancelScope(shield=True):
                    await self._do(handed)
        finally:
            self._queue = None
            with anyio.CancelScope(shield=True):
                while True:
                    try:
                        handed = receive.receive_nowait()
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                    await self._do(handed)
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
