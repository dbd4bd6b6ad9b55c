"""What a client hears: an `mcp.Client` message handler that keeps every notification, and matchers for them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp_types import ResourceListChangedNotification, ResourceUpdatedNotification

HEARD = 20.0  # how long a test waits for a notification, servers and feeds included


class Inbox:
    """A Client's message_handler that keeps what arrives; `wait_for` blocks (boundedly) for a match.

    `poll`, when given, runs between looks: a change feed driven by hand, with no background task to run it.
    """

    def __init__(self) -> None:
        self.messages: list[Any] = []
        self._arrived = anyio.Event()

    async def __call__(self, message: Any) -> None:
        self.messages.append(message)
        self._arrived.set()
        self._arrived = anyio.Event()

    async def wait_for(
        self,
        predicate: Callable[[Any], bool],
        timeout: float = HEARD,
        *,
        poll: Callable[[], Awaitable[Any]] | None = None,
    ) -> Any:
        with anyio.fail_after(timeout):
            while True:
                arrived = self._arrived
                for message in self.messages:
                    if predicate(message):
                        return message
                if poll is None:
                    await arrived.wait()
                    continue
                await poll()
                with anyio.move_on_after(0.05):
                    await arrived.wait()


def updated(uri: str) -> Callable[[Any], bool]:
    return lambda m: isinstance(m, ResourceUpdatedNotification) and m.params.uri == uri


def list_changed(message: Any) -> bool:
    return isinstance(message, ResourceListChangedNotification)
