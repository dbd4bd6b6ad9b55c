"""Agents that vanish mid-task: their leases run out, the sweeper puts the tasks back, others finish them, and
a vanished agent that comes back late changes nothing.

Four agents claim a task and vanish without a word (no release): two, each in a process of its own, are
SIGKILLed (one right after its claim, one, speaking the 2026-07-28 protocol, after reporting an artifact);
one drops its connection after reporting (no DELETE of its session); and one, in a process of its own, is
frozen (SIGSTOP) after reporting. A crowd of tolerant
agents drains the queue meanwhile; the four claims run out (5 s leases), come back on their second
attempt and are finished by the crowd. Then the frozen agent thaws and carries on where it was, on the very
connection it claimed through, and the others come back on new connections: every late call on the
vanished runs is LEASE_EXPIRED (or, without a run_id to say which run, refused), and the database is
the same afterwards.

No connection renews a lease here (JCT_LIVE_LEASE_SECONDS=0): the frozen agent's connection stays open while
it is frozen, which would otherwise keep its claim until its time budget ends (tests/faults/test_held_leases.py
covers the renewal).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from server.config import Settings
from tests.core.helpers import bare
from tests.support.agents import LEGACY, MODERN, SHORT_LEASES, Tally, crowd, enqueue_work_in, patch, run_all
from tests.support.books import Books
from tests.support.process_agent import ProcessAgent, process_agent
from tests.support.raw import RawSession
from tests.support.servers import serving
from tests.transports.conftest import call_error, server_env

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TASKS = 30
AGENTS = 6
LIMIT = 90
UNHELD = SHORT_LEASES | {"live_lease_seconds": 0}


async def claim(agent: ProcessAgent | RawSession, *, report: bool, run_id: bool = True) -> tuple[str, str]:
    """The agent claims the next task, and perhaps reports its patch (naming its run, or not); (task, run)."""
    call = agent.call if isinstance(agent, ProcessAgent) else partial(raw_call, agent)
    claimed = await call("jct_claim_next")
    task_id, run = claimed["task_id"], claimed["run_id"]
    if report:
        named = {"run_id": run} if run_id else {}
        artifact = {"title": "Code changes", "artifact_type": "code_patch", "content": patch(task_id)}
        await call("jct_report_artifact", task_id=task_id, **artifact, **named)
    return task_id, run


async def raw_call(session: RawSession, tool: str, **args: object) -> dict[str, Any]:
    answer = await session.request("tools/call", {"name": tool, "arguments": args})
    assert not answer["result"].get("isError"), answer
    return dict(answer["result"]["structuredContent"])


def completion(task_id: str, run_id: str | None = None) -> dict[str, object]:
    named = {"run_id": run_id} if run_id is not None else {}
    return {"task_id": task_id, "success": True, "summary": "Done after all.", **named}


async def refusal(agent: ProcessAgent | Client, tool: str, **args: object) -> str:
    """The error code a call that must fail is answered."""
    if isinstance(agent, ProcessAgent):
        return str((await agent.refused(tool, **args))["code"])
    return str((await call_error(agent, tool, **args))["error"]["code"])


async def test_vanished_agents_claims_come_back_and_their_late_calls_change_nothing(
    database_url: str, tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    task_ids = await enqueue_work_in(make_settings(), TASKS)
    tally = Tally()

    with anyio.fail_after(LIMIT):
        async with (
            serving(server_env(database_url, tmp_path, **UNHELD), tmp_path) as (server,),
            process_agent(server.mcp_url, LEGACY, tmp_path, "killed") as killed,
            process_agent(server.mcp_url, MODERN, tmp_path, "killed-modern") as killed_modern,
            process_agent(server.mcp_url, LEGACY, tmp_path, "frozen") as frozen,
        ):
            killed_task, killed_run = await claim(killed, report=False)
            await killed.kill()
            modern_task, modern_run = await claim(killed_modern, report=True)
            await killed_modern.kill()
            cut_off = RawSession(server.base_url)
            await cut_off.initialize()
            cut_task, cut_run = await claim(cut_off, report=True)
            await cut_off.aclose()  # its connections drop, its session is never closed
            frozen_task, frozen_run = await claim(frozen, report=True, run_id=False)
            frozen.pause()

            await run_all(crowd(AGENTS, [server.mcp_url], tally))
            before = await Books.read(database_url)

            # The frozen agent thaws and carries on, on the connection it claimed through.
            frozen.resume()
            artifact = {"title": "More", "artifact_type": "log", "content": "late"}
            assert await refusal(frozen, "jct_report_artifact", task_id=frozen_task, **artifact) == "LEASE_EXPIRED"
            assert await refusal(frozen, "jct_report_progress", task_id=frozen_task, message="hi") == "LEASE_EXPIRED"
            assert await refusal(frozen, "jct_complete_task", **completion(frozen_task, frozen_run)) == "LEASE_EXPIRED"
            assert await refusal(frozen, "jct_release_task", task_id=frozen_task, reason="late") == "LEASE_EXPIRED"

            # The others come back on new connections (each a new agent), naming their runs, or not.
            async with Client(server.mcp_url, mode=LEGACY) as late:
                assert await refusal(late, "jct_complete_task", **completion(killed_task, killed_run)) == (
                    "LEASE_EXPIRED"
                )
                assert await refusal(late, "jct_report_artifact", task_id=cut_task, run_id=cut_run, **artifact) == (
                    "LEASE_EXPIRED"
                )
                # Without a run_id it names nothing of its own: this connection claimed nothing.
                assert await refusal(late, "jct_complete_task", **completion(cut_task)) == "TASK_NOT_CLAIMED"
            async with Client(server.mcp_url, mode=MODERN) as late:
                assert await refusal(late, "jct_complete_task", **completion(modern_task, modern_run)) == (
                    "LEASE_EXPIRED"
                )
                released = {"task_id": modern_task, "run_id": modern_run, "reason": "late"}
                assert await refusal(late, "jct_release_task", **released) == "LEASE_EXPIRED"
                # A stateless call must name its run.
                assert await refusal(late, "jct_complete_task", **completion(modern_task)) == "INVALID_ARGUMENT"
            after = await Books.read(database_url)

    assert after == before, "the late calls changed nothing"
    books = after
    assert sorted(books.tasks) == sorted(task_ids)
    assert books.problems(tally) == {}
    # Exactly the vanished agents' runs expired, once each; their tasks were finished on a second attempt.
    vanished = {
        bare(run): task
        for run, task in (
            (killed_run, killed_task),
            (modern_run, modern_task),
            (cut_run, cut_task),
            (frozen_run, frozen_task),
        )
    }
    expired = {run["id"]: run["task_id"] for run in books.runs.values() if run["status"] == "expired"}
    assert expired == vanished
    for task_id in vanished.values():
        assert books.tasks[task_id]["attempts"] == 1
        assert [run["attempt"] for run in books.runs_of(task_id)] == [1, 2]
    # What they reported before vanishing stays on their own runs, and no completion cites it.
    reported = {a["run_id"] for a in books.artifacts.values() if a["run_id"] in vanished}
    assert reported == {bare(modern_run), bare(cut_run), bare(frozen_run)}
    assert tally.codes() == set(), tally.refusals
