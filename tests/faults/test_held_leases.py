"""Connection-held leases (DESIGN section 17), with real processes: a dead agent's task is claimable again a
short lease after its connection went, and a live agent that stays silent keeps its claim.

Every test runs one `jct serve` (HTTP) on the database, through which another agent claims, and whose sweeper
expires what lapses; the agent under test is a process of its own: with its own `jct serve --stdio`, as Claude
Code starts one (tests/support/process_agent.py), or over HTTP. The live lease is 2 s and JCT_LEASE_SECONDS
600, so a claim that comes back within the test came back by the short lease, never the long one.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from server.config import Settings
from server.core.briefings import intake
from server.core.service import Core
from server.db import queries
from tests.core.helpers import bare
from tests.support.agents import ADMIN, LEGACY, MODERN
from tests.support.process_agent import ProcessAgent, process_agent, stdio_agent
from tests.support.servers import Server, serving
from tests.transports.conftest import call, server_env

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LIVE_LEASE = 2.0
HELD = {"lease_seconds": 600, "live_lease_seconds": LIVE_LEASE, "sweep_interval_seconds": 0.2, "stuck_after_seconds": 1}
IDLE_SECONDS = 5 * LIVE_LEASE  # silent for five live leases
WAIT_SECONDS = 30  # how long the other agent waits for the task to come back
LIMIT = 120
BUDGET_SECONDS = 30  # the shortest time budget a task may have


@asynccontextmanager
async def world(
    database_url: str, tmp_path: Path, count: int = 1
) -> AsyncIterator[tuple[dict[str, str], list[Server]]]:
    env = server_env(database_url, tmp_path, **HELD)
    async with serving(env, tmp_path, count) as servers:
        yield env, servers


@asynccontextmanager
async def stdio_claim(
    settings: Settings, database_url: str, tmp_path: Path, budget: int = 3600
) -> AsyncIterator[tuple[Server, ProcessAgent, dict[str, Any]]]:
    """A task enqueued, one server, and an agent through its own stdio `jct` process that claimed the task:
    (server, agent, its claim)."""
    task_id = await enqueue(settings, budget)
    async with world(database_url, tmp_path) as (env, (server,)), stdio_agent(env, tmp_path) as agent:
        claimed = await agent.call("jct_claim_next")
        assert claimed["task_id"] == task_id, claimed
        yield server, agent, claimed


@asynccontextmanager
async def http_claim(
    settings: Settings, database_url: str, tmp_path: Path
) -> AsyncIterator[tuple[Server, Server, ProcessAgent, dict[str, Any]]]:
    """A task enqueued, two servers, and an agent whose legacy HTTP session (with its GET event stream) on the
    first claimed the task: (first, second, agent, its claim)."""
    task_id = await enqueue(settings)
    async with (
        world(database_url, tmp_path, count=2) as (_env, (first, second)),
        process_agent(first.mcp_url, LEGACY, tmp_path) as agent,
    ):
        claimed = await agent.call("jct_claim_next")
        assert claimed["task_id"] == task_id, claimed
        yield first, second, agent, claimed


async def enqueue(settings: Settings, budget: int = 3600) -> str:
    core = Core.build(settings)
    try:
        task = await intake.enqueue_task(
            core,
            ADMIN,
            objective="Change the module",
            operation="analysis",
            target_repo="myorg/api",
            time_budget_seconds=budget,
        )
        return task.task_id
    finally:
        await core.db.dispose()


async def run_of(settings: Settings, run_id: str) -> dict[str, Any]:
    """The run a claim's run_id names (without tokens it carries the claim's key too)."""
    core = Core.build(settings)
    try:
        async with core.db.read() as conn:
            run = await queries.get_run(conn, bare(run_id))
        assert run is not None
        return dict(run)
    finally:
        await core.db.dispose()


async def claim_back(other: Client, task_id: str) -> dict[str, Any]:
    """The other agent waits for the task to come back, and claims it."""
    claimed = await call(other, "jct_claim_next", wait_seconds=WAIT_SECONDS)
    assert claimed["claimed"] is True, claimed
    assert claimed["task_id"] == task_id, claimed
    assert claimed["attempt"] == 2, claimed
    return claimed


async def nothing_to_claim(other: Client) -> None:
    claimed = await call(other, "jct_claim_next")
    assert claimed["claimed"] is False, claimed


async def late_call_refused(agent: ProcessAgent, task_id: str) -> None:
    """The agent comes back on the connection it claimed through: its lease is gone, nothing changes."""
    refused = await agent.refused("jct_report_progress", task_id=task_id, message="still here")
    assert refused["code"] == "LEASE_EXPIRED", refused


def freeze(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)


def thaw(pid: int) -> None:
    os.kill(pid, signal.SIGCONT)


@pytest.mark.parametrize("loss", ["killed", "frozen"])
async def test_a_lost_stdio_server_s_claim_comes_back_after_the_short_lease(
    database_url: str, tmp_path: Path, make_settings: Callable[..., Settings], loss: str
) -> None:
    with anyio.fail_after(LIMIT):
        async with stdio_claim(make_settings(), database_url, tmp_path) as (server, agent, claimed):
            task_id = claimed["task_id"]
            assert agent.server_pid is not None
            if loss == "killed":
                os.kill(agent.server_pid, signal.SIGKILL)
            else:
                freeze(agent.server_pid)
            async with Client(server.mcp_url, mode=MODERN) as other:
                again = await claim_back(other, task_id)
                if loss == "frozen":
                    # Thawing it revives nothing.
                    thaw(agent.server_pid)
                    await anyio.sleep(3 * LIVE_LEASE)  # its renewal runs again, several times
                    await late_call_refused(agent, task_id)
                    # The new claimant's run is untouched: it completes.
                    finish = {"task_id": task_id, "run_id": again["run_id"], "success": True, "summary": "Done."}
                    done = await call(other, "jct_complete_task", **finish)
                    assert done["success"] is True
    run = await run_of(make_settings(), claimed["run_id"])
    assert run["status"] == "expired"


async def test_a_live_stdio_agent_keeps_its_claim_while_silent_and_completes_it(
    database_url: str, tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    with anyio.fail_after(LIMIT):
        async with stdio_claim(make_settings(), database_url, tmp_path) as (server, agent, claimed):
            task_id = claimed["task_id"]
            lease = datetime.fromisoformat(claimed["lease_expires_at"])
            assert (lease - datetime.now(UTC)).total_seconds() <= LIVE_LEASE + 1, "a held claim gets the short lease"
            await anyio.sleep(IDLE_SECONDS)  # a long test run: not a word to JCT
            async with Client(server.mcp_url, mode=MODERN) as other:
                await nothing_to_claim(other)
                # The renewal is no sign of activity: the silent run is listed as making no progress.
                stuck = await call(other, "jct_list_stuck")
                kinds = {item["run_id"]: item["kind"] for item in stuck["items"]}
                assert kinds.get(bare(claimed["run_id"])) == "no_progress", stuck
            done = await agent.call("jct_complete_task", task_id=task_id, success=True, summary="Done.")
            assert done["success"] is True
    run = await run_of(make_settings(), claimed["run_id"])
    assert run["status"] not in ("running", "expired"), run  # ended by its completion (the prover's verdict)


async def test_a_frozen_client_s_claim_lapses_when_its_time_budget_ends(
    database_url: str, tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    """The client (Claude Code, say) is frozen while its stdio server lives: the server cannot tell it from an
    agent running a long test, so the claim holds until the task's time budget ends, and is listed as stuck
    meanwhile."""
    with anyio.fail_after(LIMIT):
        async with stdio_claim(make_settings(), database_url, tmp_path, budget=BUDGET_SECONDS) as (
            server,
            agent,
            claimed,
        ):
            task_id = claimed["task_id"]
            agent.pause()
            async with Client(server.mcp_url, mode=MODERN) as other:
                await anyio.sleep(IDLE_SECONDS)
                stuck = await call(other, "jct_list_stuck")
                assert {item["run_id"]: item["kind"] for item in stuck["items"]}.get(bare(claimed["run_id"])) == (
                    "no_progress"
                ), stuck
                await nothing_to_claim(other)
                await claim_back(other, task_id)
                back_at = datetime.now(UTC)
            agent.resume()
            await late_call_refused(agent, task_id)
    run = await run_of(make_settings(), claimed["run_id"])
    assert run["status"] == "expired"
    assert back_at >= run["budget_ends_at"], "held until its time budget ended"


async def test_an_http_session_s_claim_is_held_by_its_server_while_its_stream_is_open(
    database_url: str, tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    """Two servers on one database: the agent's legacy session (with its GET event stream) is on the first,
    which renews its claim; the other agent claims through the second, whose sweeper sees only the lease. When
    the agent is killed its stream drops, and the claim comes back after the short lease."""
    with anyio.fail_after(LIMIT):
        async with http_claim(make_settings(), database_url, tmp_path) as (_first, second, agent, claimed):
            await anyio.sleep(IDLE_SECONDS)
            async with Client(second.mcp_url, mode=MODERN) as other:
                await nothing_to_claim(other)
                await agent.kill()
                await claim_back(other, claimed["task_id"])
    run = await run_of(make_settings(), claimed["run_id"])
    assert run["status"] == "expired"


async def test_a_stateless_claim_gets_the_long_lease(
    database_url: str, tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    """A 2026-07-28 request over HTTP has no connection that outlives it: nothing renews its claim but its
    agent's calls, so it gets JCT_LEASE_SECONDS."""
    await enqueue(make_settings())
    with anyio.fail_after(LIMIT):
        async with world(database_url, tmp_path) as (_env, (server,)), Client(server.mcp_url, mode=MODERN) as agent:
            claimed = await call(agent, "jct_claim_next")
    lease = datetime.fromisoformat(claimed["lease_expires_at"])
    assert (lease - datetime.now(UTC)).total_seconds() > HELD["lease_seconds"] - 60


async def test_a_server_stopped_with_sigterm_hands_its_held_claims_the_long_lease(
    database_url: str, tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    """A replica that stops (SIGTERM) outlives none of its sessions, but their agents live on and reconnect to
    another replica: the claims it renewed get JCT_LEASE_SECONDS before it exits, not the lapse of a dead one."""
    with anyio.fail_after(LIMIT):
        async with http_claim(make_settings(), database_url, tmp_path) as (first, second, _agent, claimed):
            first.process.terminate()
            await first.process.wait()
            await anyio.sleep(3 * LIVE_LEASE)
            async with Client(second.mcp_url, mode=MODERN) as other:
                await nothing_to_claim(other)
    run = await run_of(make_settings(), claimed["run_id"])
    assert run["status"] == "running"
    assert (run["lease_expires_at"] - datetime.now(UTC)).total_seconds() > HELD["lease_seconds"] - 60
