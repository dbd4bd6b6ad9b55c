"""A stateless 2026-07-28 agent's claims are held while its `subscriptions/listen` stream is open (server/sessions.py
`agent_holder`, server/core/claims/holding.py), through the SDK's own client over real HTTP, on both databases.

The stateless calls and the listen stream carry the same X-JCT-Agent header (the Claude Code plugin's
headersHelper sends one per Claude Code process on every request): while such a stream of the same principal is
open in the process a call reaches, the call's claim gets JCT_LIVE_LEASE_SECONDS and that process renews it; when
the stream closes (its client killed), the renewal stops and the task comes back after the short lease. The header
is self-asserted: another agent's stream, or with tokens another principal's stream with the same header, holds
nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from server.config import Settings
from server.core import tokens
from server.core.briefings import intake
from server.core.service import Core
from tests.support.agents import ADMIN
from tests.support.serving import served
from tests.transports.conftest import call, call_error

pytestmark = pytest.mark.anyio

LIVE_LEASE = 2.0
HELD = {"lease_seconds": 600, "live_lease_seconds": LIVE_LEASE, "sweep_interval_seconds": 0.2}
IDLE_SECONDS = 5 * LIVE_LEASE  # silent for five live leases
WAIT_SECONDS = 30  # how long the other agent waits for the task to come back
LIMIT = 120
QUEUE = ["jct://queue"]


@asynccontextmanager
async def agent(base_url: str, header: str | None, secret: str | None = None) -> AsyncIterator[Client]:
    """A stateless (2026-07-28) SDK client that sends X-JCT-Agent `header` (and the bearer `secret`) on every
    request, its listen streams included."""
    headers = {} if header is None else {"X-JCT-Agent": header}
    if secret is not None:
        headers["Authorization"] = f"Bearer {secret}"
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(create_mcp_http_client(headers=headers))
        client = Client(streamable_http_client(f"{base_url}/mcp", http_client=http), mode="auto")
        yield await stack.enter_async_context(client)


async def enqueue(core: Core) -> str:
    task = await intake.enqueue_task(
        core, ADMIN, objective="Change the module", operation="analysis", target_repo="myorg/api"
    )
    return task.task_id


def lease_left(claimed: dict[str, Any]) -> float:
    return (datetime.fromisoformat(claimed["lease_expires_at"]) - datetime.now(UTC)).total_seconds()


def held(claimed: dict[str, Any]) -> bool:
    """Whether the claim got the short lease its holder renews (else JCT_LEASE_SECONDS)."""
    assert claimed["claimed"] is True, claimed
    left = lease_left(claimed)
    assert left <= LIVE_LEASE + 1 or left > HELD["lease_seconds"] - 60, claimed
    return left <= LIVE_LEASE + 1


async def test_a_stateless_claim_is_held_while_its_agent_s_listen_stream_is_open_and_lapses_when_it_closes(
    make_settings: Callable[..., Settings],
) -> None:
    """The agent claims with its listen stream open, says nothing for five live leases: nobody else can claim the
    task. Its stream closes (the agent killed): the task comes back after the short lease, as attempt 2, and the
    agent's late call is refused."""
    with anyio.fail_after(LIMIT):
        async with served(make_settings, **HELD) as (base_url, core), agent(base_url, "claude-1") as claimant:
            task_id = await enqueue(core)
            async with agent(base_url, "claude-2") as other:
                async with claimant.listen(resource_subscriptions=QUEUE):
                    claimed = await call(claimant, "jct_claim_next")
                    assert held(claimed)
                    await anyio.sleep(IDLE_SECONDS)
                    assert (await call(other, "jct_claim_next"))["claimed"] is False
                again = await call(other, "jct_claim_next", wait_seconds=WAIT_SECONDS)
            assert (again["task_id"], again["attempt"]) == (task_id, 2), again
            late = await call_error(
                claimant, "jct_report_progress", task_id=task_id, run_id=claimed["run_id"], message="still here"
            )
    assert late["error"]["code"] == "LEASE_EXPIRED", late


async def test_a_call_fenced_while_the_listen_stream_is_open_is_held_from_then_on(
    make_settings: Callable[..., Settings],
) -> None:
    """A claim made before the agent's stream opened gets the long lease; the agent's next call on its run, with
    the stream open, makes this process hold it (the short lease, renewed)."""
    with anyio.fail_after(LIMIT):
        async with served(make_settings, **HELD) as (base_url, core), agent(base_url, "claude-1") as claimant:
            task_id = await enqueue(core)
            claimed = await call(claimant, "jct_claim_next")
            assert not held(claimed)
            async with claimant.listen(resource_subscriptions=QUEUE):
                await call(
                    claimant, "jct_report_progress", task_id=task_id, run_id=claimed["run_id"], message="Halfway."
                )
                await anyio.sleep(IDLE_SECONDS)
            async with agent(base_url, "claude-2") as other:
                again = await call(other, "jct_claim_next", wait_seconds=WAIT_SECONDS)
    assert (again["task_id"], again["attempt"]) == (task_id, 2), again


async def test_another_agent_s_stream_holds_nothing(make_settings: Callable[..., Settings]) -> None:
    """A stream with another header, or none, vouches for no one: the claim gets JCT_LEASE_SECONDS; a call without
    the header is held by nobody's stream."""
    with anyio.fail_after(LIMIT):
        async with served(make_settings, **HELD) as (base_url, core):
            await enqueue(core)
            await enqueue(core)
            async with (
                agent(base_url, "claude-1") as listener,
                agent(base_url, "claude-2") as stranger,
                agent(base_url, None) as nameless,
                listener.listen(resource_subscriptions=QUEUE),
            ):
                assert not held(await call(stranger, "jct_claim_next"))
                assert not held(await call(nameless, "jct_claim_next"))


async def test_with_tokens_a_stream_vouches_only_for_its_own_principal(make_settings: Callable[..., Settings]) -> None:
    """With tokens the header is self-asserted: another principal's stream with the same header holds nothing;
    the principal's own stream with it does."""
    with anyio.fail_after(LIMIT):
        async with served(make_settings, auth="token", **HELD) as (base_url, core):
            erin, _ = await tokens.create_token(core, "erin", ["worker"])
            mallory, _ = await tokens.create_token(core, "mallory", ["worker"])
            await enqueue(core)
            await enqueue(core)
            async with (
                agent(base_url, "same", mallory) as impostor,
                agent(base_url, "same", erin) as owner,
                impostor.listen(resource_subscriptions=QUEUE),
            ):
                assert not held(await call(owner, "jct_claim_next"))
                async with owner.listen(resource_subscriptions=QUEUE):
                    assert held(await call(owner, "jct_claim_next"))
