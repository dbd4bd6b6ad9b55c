"""The session register's own bookkeeping (server/sessions.py), without a server: which agents' listen streams
are open is counted as streams open and close, or are closed under the caps (a stateless call with an
X-JCT-Agent header asks it each time; tests/faults/test_listen_holds.py plays it out over HTTP)."""

from __future__ import annotations

from contextlib import AsyncExitStack

import anyio
import pytest

from server.sessions import Entry, Sessions

pytestmark = pytest.mark.anyio


async def nothing() -> None:
    return None


async def test_an_agent_listens_while_any_of_its_listen_streams_is_open() -> None:
    sessions = Sessions(per_principal=10, total=10)
    async with anyio.create_task_group() as tg:
        await tg.start(sessions.run)
        async with sessions.stream("listen", "local", None, agent="a"):
            async with sessions.stream("listen", "local", None, agent="a"):
                assert sessions.listening("local", "a")
            assert sessions.listening("local", "a"), "one of its two streams is still open"
            assert not sessions.listening("local", "b")
            assert not sessions.listening("alice", "a"), "another principal's header vouches for nothing"
            async with sessions.stream("session", "local", None, agent="b"):
                assert not sessions.listening("local", "b"), "only a listen stream vouches"
        assert not sessions.listening("local", "a")
        tg.cancel_scope.cancel()


async def test_a_listen_stream_closed_under_the_cap_stops_vouching_at_once() -> None:
    sessions = Sessions(per_principal=10, total=1)
    async with anyio.create_task_group() as tg:
        await tg.start(sessions.run)
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(sessions.stream("listen", "local", None, agent="a"))
            assert sessions.listening("local", "a")
            sessions.add(Entry(sessions.new_key("session"), "session", "local", None, nothing))
            assert not sessions.listening("local", "a"), "the stream was closed to make room"
        assert not sessions.listening("local", "a"), "its own end counts it out no second time"
        async with sessions.stream("listen", "local", None, agent="a"):
            assert sessions.listening("local", "a")
        tg.cancel_scope.cancel()
