"""Agents that carry on the way a well-behaved MCP client does when the world fails, and what they were told.

An `Agent` drains the queue through the real MCP SDK client (`mcp.Client`, legacy or 2026-07-28): it claims
the next task, works a moment, reports a code_patch and completes the task citing it, always naming the
run_id the claim returned. It is tolerant:

- `UNAVAILABLE`: it waits `retry_after_seconds` (at most `retry_cap`: a test does not wait the minute a full
  disk asks for) and calls again;
- the connection breaks (its server died): it connects again, to the next server of `urls`, and carries on
  with the task it holds (or, with `resume=False`, drops it as a client that restarted would, and the
  lease runs out);
- `LEASE_EXPIRED`: it drops the task and claims another.

Any other error is one the scenario did not expect, and fails the test with the error JSON; so does a call
that hangs (`call_seconds`). The agent stops once nothing is queued or running. Every answer that matters
is kept in the shared `Tally`: acknowledged claims, artifacts and completions (tests/support/books.py checks
each is in the database), refusals, reconnections.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

from server.config import Settings
from server.core.briefings import intake
from server.core.models import Actor, parse_run_id
from server.core.service import Core

LEGACY = "legacy"
MODERN = "2026-07-28"
ADMIN = Actor(actor_id="root", actor_kind="human", admin=True, session="root-session")
TARGET_PATH = "src"
# Leases that run out within a test's patience, and a sweeper that notices soon after.
SHORT_LEASES = {"lease_seconds": 5, "live_lease_seconds": 3, "sweep_interval_seconds": 0.5}


async def enqueue_work(core: Core, count: int) -> list[str]:
    """`count` code changes under src/, each with one acceptance criterion: an agent's patch passes the prover.
    They declare no touches (DESIGN section 16): any number of them may run at once."""
    return [
        (
            await intake.enqueue_task(
                core,
                ADMIN,
                objective=f"Change module {n}",
                operation="code_change",
                target_repo="myorg/api",
                target_path=TARGET_PATH,
                acceptance_criteria=["The module is changed"],
                # Each patch is a module of its own: the tasks declare no touches, so they run at once (by
                # default each would touch its target_path, src, and wait for the others).
                touches=[],
            )
        ).task_id
        for n in range(count)
    ]


async def enqueue_work_in(settings: Settings, count: int) -> list[str]:
    """`enqueue_work` through a Core of its own, closed before the servers under test start."""
    core = Core.build(settings)
    try:
        return await enqueue_work(core, count)
    finally:
        await core.db.dispose()


def patch(task_id: str, size: int = 0) -> str:
    """A unified diff of one file under src/, padded with added lines to about `size` bytes."""
    path = f"{TARGET_PATH}/module_{task_id[:8]}.py"
    lines = [f"diff --git a/{path} b/{path}", f"--- a/{path}", f"+++ b/{path}", "@@ -1 +1,2 @@", "-old", "+new"]
    text = "\n".join(lines) + "\n"
    filler = "+# padding to make the patch weigh something\n"
    return text + filler * max(0, (size - len(text)) // len(filler))


@dataclass(frozen=True)
class Refusal:
    """A tool error an agent was answered."""

    agent: str
    tool: str
    error: dict[str, Any]

    @property
    def code(self) -> str:
        return str(self.error["code"])


@dataclass
class Tally:
    """What the agents were told, for the test to hold against the database."""

    claims: dict[str, str] = field(default_factory=dict)  # run_id -> task_id
    artifacts: dict[str, str] = field(default_factory=dict)  # artifact_id -> run_id
    completions: dict[str, str] = field(default_factory=dict)  # run_id -> task_id
    refusals: list[Refusal] = field(default_factory=list)
    reconnections: list[tuple[str, str]] = field(default_factory=list)  # (agent, what broke)
    dropped: list[str] = field(default_factory=list)  # runs whose lease expired under their agent
    _watches: list[tuple[Callable[[Tally], bool], anyio.Event]] = field(default_factory=list)

    def when(self, condition: Callable[[Tally], bool]) -> anyio.Event:
        """An event set as soon as `condition` holds of what the agents have been told."""
        event = anyio.Event()
        self._watches.append((condition, event))
        self.changed()
        return event

    def completed(self, count: int) -> anyio.Event:
        """An event set once the agents have been told of `count` completions."""
        return self.when(lambda told: len(told.completions) >= count)

    def codes(self) -> set[str]:
        return {refusal.code for refusal in self.refusals}

    def changed(self) -> None:
        """Called by an agent after each record: sets the events whose condition now holds."""
        for condition, event in self._watches:
            if not event.is_set() and condition(self):
                event.set()


class LeaseLost(Exception):
    """LEASE_EXPIRED: the agent drops the task."""


@dataclass
class Job:
    task_id: str
    run_id: str
    artifact_id: str | None = None


def connection_lost(exc: BaseException) -> bool:
    """The connection broke under the client: its server died, a stream ended without an answer."""
    if isinstance(exc, BaseExceptionGroup):
        return all(connection_lost(inner) for inner in exc.exceptions)
    if isinstance(exc, MCPError):
        return exc.code == CONNECTION_CLOSED
    return isinstance(
        exc, httpx2.TransportError | OSError | anyio.BrokenResourceError | anyio.ClosedResourceError | anyio.EndOfStream
    )


@dataclass
class Agent:
    name: str
    urls: list[str]
    mode: str
    tally: Tally
    work_seconds: float = 0.05
    retry_cap: float = 0.2
    idle_seconds: float = 0.1
    call_seconds: float = 30.0
    resume: bool = True
    patch_bytes: int = 0
    # Called with the job after its artifact is reported, before the completion (a test pacing one agent).
    before_complete: Callable[[Job], Awaitable[None]] | None = None
    job: Job | None = None
    _server: int = 0

    async def run(self) -> None:
        """Drain the queue, connecting again (to the next server) whenever the connection breaks."""
        while True:
            url = self.urls[self._server % len(self.urls)]
            try:
                async with Client(url, mode=self.mode) as client:
                    await self._drain(client)
                return
            except Exception as exc:
                if not connection_lost(exc):
                    raise
                self.tally.reconnections.append((self.name, repr(exc)[:200]))
                self._server += 1
                if not self.resume:
                    self.job = None

    async def _drain(self, client: Client) -> None:
        while True:
            if self.job is None:
                claim = await self._call(client, "jct_claim_next")
                if not claim["claimed"]:
                    if await self._nothing_left(client):
                        return
                    await anyio.sleep(self.idle_seconds)  # claims held elsewhere may come back to the queue
                    continue
                self.job = Job(claim["task_id"], claim["run_id"])
                self.tally.claims[parse_run_id(self.job.run_id)[0]] = self.job.task_id
                self.tally.changed()
            try:
                await self._finish(client, self.job)
            except LeaseLost:
                self.tally.dropped.append(parse_run_id(self.job.run_id)[0])
            self.job = None

    async def _finish(self, client: Client, job: Job) -> None:
        await anyio.sleep(self.work_seconds)  # the agent's own work on the task
        if job.artifact_id is None:
            reported = await self._call(
                client,
                "jct_report_artifact",
                task_id=job.task_id,
                run_id=job.run_id,
                title="Code changes",
                artifact_type="code_patch",
                content=patch(job.task_id, self.patch_bytes),
                media_type="text/x-diff",
            )
            job.artifact_id = reported["artifact_id"]
            self.tally.artifacts[reported["artifact_id"]] = parse_run_id(job.run_id)[0]
            self.tally.changed()
        if self.before_complete is not None:
            await self.before_complete(job)
        completed = await self._call(
            client,
            "jct_complete_task",
            task_id=job.task_id,
            run_id=job.run_id,
            success=True,
            summary="Changed the module.",
            criteria_results=[{"criterion": 0, "status": "satisfied", "evidence": [job.artifact_id]}],
        )
        assert completed["task_status"] == "completed", completed
        self.tally.completions[parse_run_id(job.run_id)[0]] = job.task_id
        self.tally.changed()

    async def _nothing_left(self, client: Client) -> bool:
        counts: dict[str, int] = (await self._call(client, "jct_queue_stats"))["counts"]
        return counts["queued"] == 0 and counts["running"] == 0

    async def _call(self, client: Client, tool: str, **args: Any) -> dict[str, Any]:
        """The tool's result; UNAVAILABLE is waited out, LEASE_EXPIRED raises LeaseLost, anything else fails."""
        while True:
            try:
                with anyio.fail_after(self.call_seconds):
                    result = await client.call_tool(tool, args)
            except TimeoutError:
                raise AssertionError(f"{self.name}: {tool} hung for {self.call_seconds}s") from None
            if not result.is_error:
                assert result.structured_content is not None, f"{tool} returned no structuredContent"
                return dict(result.structured_content)
            text = result.content[0].text if result.content and hasattr(result.content[0], "text") else str(result)
            try:
                error = json.loads(text)["error"]
            except (ValueError, KeyError, TypeError):
                raise AssertionError(f"{self.name}: {tool} failed without a JCT error: {text}") from None
            refusal = Refusal(self.name, tool, error)
            self.tally.refusals.append(refusal)
            self.tally.changed()
            if refusal.code == "UNAVAILABLE":
                await anyio.sleep(min(float(error["retry_after_seconds"]), self.retry_cap))
                continue
            if refusal.code == "LEASE_EXPIRED":
                raise LeaseLost(error["message"])
            raise AssertionError(f"{self.name}: {tool} answered an error no scenario expects: {error}")


def crowd(count: int, urls: list[str], tally: Tally, **options: Any) -> list[Agent]:
    """`count` agents spread over the servers of `urls` and over both protocol eras, each one's first server
    its own, the others to fall back on."""
    agents = []
    for n in range(count):
        home = n % len(urls)
        mode = LEGACY if (n // len(urls)) % 2 == 0 else MODERN
        agents.append(Agent(f"agent{n + 1}-{mode}", urls[home:] + urls[:home], mode, tally, **options))
    return agents


async def run_all(agents: list[Agent]) -> None:
    async with anyio.create_task_group() as tg:
        for agent in agents:
            tg.start_soon(agent.run)
