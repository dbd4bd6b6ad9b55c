"""What of Claude Code's HTTP connection to JCT stays open while it works, and whether it closes when Claude
Code is killed: whether JCT can tell a live HTTP agent from a dead one by its connection (DESIGN section 17).

The script: one JCT call, then a Bash command that runs for a while without a word to JCT (a long test run).
During it the proxy lists the requests whose answer it is still relaying (open event streams); then Claude
Code's process group is SIGKILLed and the list is read again.

Observed with Claude Code 2.1.328:

- By default (the 2026-07-28 protocol) it opens one `subscriptions/listen` stream (a POST) at the start and
  keeps it open all session long; SIGKILL closes it. But nothing ties it to the tool calls: they are
  stateless POSTs with no session id, and every request carries the same headers and `clientInfo` as any
  other Claude Code's. So, configured by hand without a header, JCT cannot tell whose claims a listen stream
  vouches for: a claim made this way is renewed only by its agent's calls, and JCT_LEASE_SECONDS bounds it.
- Through the HTTP plugin (deploy/claude-code/plugin), every request of the connection carries the headersHelper's
  X-JCT-Agent value, the listen stream's included: JCT holds the claims of stateless calls whose agent's listen
  stream (same header, same principal) is open in the process they reach (server/sessions.py `agent_holder`).
  The third test runs the plugin's session through a Bash call six live leases long; the fourth SIGKILLs it
  mid-Bash, and a waiting agent claims the task after the short lease.
- With `MCP_PROTOCOL_NEGOTIATION=legacy` it opens a session and its standalone GET stream, kept open all
  session long and closed by SIGKILL; its calls carry the session id. JCT renews the claims made through a
  session while its GET stream is open (server/core/claims/holding.py): the second test runs Claude Code
  through a Bash call five live leases long and completes afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from server.config import Settings
from tests.claude_code.harness import MCP_TOOLS, ROOT, ClaudeCode
from tests.claude_code.model import Reply, Step, ToolResult, ToolUse, scripted_model
from tests.claude_code.proxy import SESSION_HEADER, Exchange, McpProxy, mcp_proxy
from tests.core.helpers import built_core, enqueue
from tests.transports.conftest import call, http_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LIMIT = 120.0
WORK_SECONDS = 40
SETTLE_SECONDS = 5.0
LIVE_LEASE = 2
# Without the renewal a claim would have this lease, shorter than the Bash call: the test fails then.
UNHELD_LEASE = 5
BASH_SECONDS = 6 * LIVE_LEASE


def bash(seconds: float) -> ToolUse:
    """A command that runs `seconds` (Claude Code refuses a bare `sleep`)."""
    command = f"python3 -c 'import time; time.sleep({seconds})'"
    return ToolUse("Bash", {"command": command, "description": "Run the test suite"})


def held_env(jct_env: dict[str, str], lease: int) -> dict[str, str]:
    return jct_env | {
        "JCT_LIVE_LEASE_SECONDS": str(LIVE_LEASE),
        "JCT_LEASE_SECONDS": str(lease),
        "JCT_SWEEP_INTERVAL_SECONDS": "0.2",
    }


async def one_task(make_settings: Callable[..., Settings]) -> str:
    """A task enqueued through a core closed again: its id."""
    async with built_core(make_settings()) as core:
        return await enqueue(core)


def held_through_bash(claimed: dict[str, Any], claim_tool: str, complete_tool: str) -> list[Step]:
    """The model claims a task (its answer goes into `claimed`), runs a Bash call BASH_SECONDS long without a
    word to JCT, completes the task, and finds the completion accepted: not LEASE_EXPIRED, the claim was held."""

    def work(result: ToolResult | None) -> ToolUse:
        assert result is not None
        assert not result.is_error, result
        claimed.update(result.json())
        return bash(BASH_SECONDS)

    def complete(result: ToolResult | None) -> ToolUse:
        assert result is not None
        assert not result.is_error, result
        args = {"task_id": claimed["task_id"], "run_id": claimed["run_id"], "success": True, "summary": "Done."}
        return ToolUse(complete_tool, args)

    def finish(result: ToolResult | None) -> Reply:
        assert result is not None
        assert not result.is_error, result
        assert result.json()["success"] is True, result
        return Reply("done")

    return [ToolUse(claim_tool, {}), work, complete, finish]


def claude_args(config: Path) -> list[str]:
    return [
        "-p",
        "Work.",
        "--mcp-config",
        str(config),
        "--strict-mcp-config",
        "--allowedTools",
        f"{MCP_TOOLS},Bash",
        "--output-format",
        "json",
        "--no-session-persistence",
    ]


def mcp_config(tmp_path: Path, url: str) -> Path:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"jct": {"type": "http", "url": f"{url}/mcp"}}}))
    return config


@pytest.mark.parametrize("era", ["auto", "legacy"])
async def test_what_stays_open_while_claude_code_works_and_after_it_is_killed(
    claude_code: ClaudeCode, jct: str, tmp_path: Path, era: str
) -> None:
    steps: list[Step] = [ToolUse("mcp__jct__jct_queue_stats", {}), bash(WORK_SECONDS), Reply("done")]
    output = tmp_path / "claude.out"
    with anyio.fail_after(LIMIT):
        async with mcp_proxy(jct) as (proxy, proxy_url), scripted_model(steps) as (model, model_url):
            with output.open("wb") as out:
                args = claude_args(mcp_config(tmp_path, proxy_url))
                process = await claude_code.start(args, model_url, out, subprocess.STDOUT, era)
            try:
                while len(model.main_requests()) < 2:  # the Bash call is asked for
                    await anyio.sleep(0.2)
                await anyio.sleep(SETTLE_SECONDS)
                assert process.returncode is None, f"{output.read_text()}\n{model.tool_results}"
                working = proxy.open_streams()
                os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
                await anyio.sleep(SETTLE_SECONDS)
                killed = proxy.open_streams()
            finally:
                if process.returncode is None:
                    os.killpg(process.pid, signal.SIGKILL)
                    await process.wait()
    log = proxy.log()
    assert killed == [], f"{log}\nstill open after SIGKILL: {[e.describe() for e in killed]}"
    (stream,) = working
    calls = [e for e in proxy.exchanges if e.rpc == ["tools/call"]]
    assert calls, log
    if era == "auto":
        # One listen stream, open while Claude Code works; no session ties it, or anything else, to the calls.
        assert (stream.http_method, stream.rpc, stream.session) == ("POST", ["subscriptions/listen"], None), log
        assert all(e.session is None and SESSION_HEADER not in e.headers for e in calls), log
    else:
        # The session's GET stream, open while Claude Code works; the calls name that session.
        assert (stream.http_method, stream.rpc) == ("GET", []), log
        assert stream.session is not None
        assert {e.session for e in calls} == {stream.session}, log


async def test_jct_holds_a_legacy_claude_code_s_claim_through_a_long_bash_call(
    claude_code: ClaudeCode, jct_env: dict[str, str], tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    """Claude Code (legacy handshake) claims a task, runs a Bash call six live leases long (and longer than
    JCT_LEASE_SECONDS) without a word to JCT, then completes the task: JCT renewed the claim while the
    session's GET stream was open."""
    task_id = await one_task(make_settings)
    claimed: dict[str, Any] = {}
    steps = held_through_bash(claimed, "mcp__jct__jct_claim_next", "mcp__jct__jct_complete_task")
    with anyio.fail_after(LIMIT):
        async with (
            http_server(held_env(jct_env, UNHELD_LEASE), tmp_path) as jct,
            scripted_model(steps) as (model, model_url),
        ):
            run = await claude_code.run(claude_args(mcp_config(tmp_path, jct)), model_url, "legacy")
    assert model.errors == [], "\n".join(model.errors)
    assert run.returncode == 0, run.explain()
    assert claimed["task_id"] == task_id
    assert [r.step for r in model.main_requests()] == [0, 1, 2, 3], run.explain()


PLUGIN_TOOLS = "mcp__plugin_jct_jct__*"
PLUGIN_CLAIM = "mcp__plugin_jct_jct__jct_claim_next"
PLUGIN_COMPLETE = "mcp__plugin_jct_jct__jct_complete_task"
AGENT_HEADER = "x-jct-agent"
# Print mode waits for the plugin's server before the first model request; the plugin's hooks stay out of it.
PLUGIN_ENV = {"MCP_CONNECTION_NONBLOCKING": "false", "JCT_HOOKS": "off"}
# The long lease, long enough that only the live lease can bring a killed agent's task back within the wait.
LONG_LEASE = 600
WAIT_SECONDS = 60


async def install_plugin(claude_code: ClaudeCode, url: str) -> None:
    """The HTTP plugin, from this repository's marketplace, with its server at `url` (no token)."""
    async with scripted_model([]) as (_model, model_url):
        added = await claude_code.run(["plugin", "marketplace", "add", str(ROOT)], model_url)
        assert added.returncode == 0, added.explain()
        installed = await claude_code.run(["plugin", "install", "jct@jct", "--config", f"url={url}/mcp"], model_url)
        assert installed.returncode == 0, installed.explain()


def plugin_args() -> list[str]:
    return ["-p", "Work.", "--allowedTools", f"{PLUGIN_TOOLS},Bash", "--output-format", "json"]


def the_agent_s_header(proxy: McpProxy) -> str:
    """The X-JCT-Agent value of the plugin's listen stream: the one its tool calls carry too."""
    listens = [e for e in proxy.exchanges if e.rpc == ["subscriptions/listen"]]
    calls = [e for e in proxy.exchanges if e.rpc == ["tools/call"]]
    assert listens, proxy.log()
    assert calls, proxy.log()
    seen = [(e.describe(), e.headers.get(AGENT_HEADER)) for e in listens + calls]
    values = {value for _, value in seen}
    assert len(values) == 1, seen
    [value] = values
    assert value is not None, seen
    assert all(e.session is None for e in calls), proxy.log()  # stateless: no session ties them
    return value


async def test_jct_holds_the_http_plugin_s_claim_through_a_long_bash_call(
    claude_code: ClaudeCode, jct_env: dict[str, str], tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    """Claude Code through the HTTP plugin, by default (stateless calls, one listen stream), claims a task, runs a
    Bash call six live leases long (and longer than JCT_LEASE_SECONDS) without a word to JCT, then completes the
    task: JCT renewed the claim while the listen stream carrying the same X-JCT-Agent was open."""
    task_id = await one_task(make_settings)
    claimed: dict[str, Any] = {}
    steps = held_through_bash(claimed, PLUGIN_CLAIM, PLUGIN_COMPLETE)
    with anyio.fail_after(2 * LIMIT):
        async with http_server(held_env(jct_env, UNHELD_LEASE), tmp_path) as jct, mcp_proxy(jct) as (proxy, url):
            await install_plugin(claude_code, url)
            async with scripted_model(steps) as (model, model_url):
                run = await claude_code.run(plugin_args(), model_url, extra=PLUGIN_ENV)
    assert model.errors == [], "\n".join(model.errors)
    assert run.returncode == 0, f"{run.explain()}\n{claude_code.mcp_logs()}"
    assert claimed["task_id"] == task_id
    assert [r.step for r in model.main_requests()] == [0, 1, 2, 3], run.explain()
    the_agent_s_header(proxy)


async def test_a_killed_http_plugin_session_s_task_comes_back_after_the_live_lease(
    claude_code: ClaudeCode, jct_env: dict[str, str], tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    """Claude Code through the HTTP plugin claims a task and starts a long Bash call; SIGKILL closes its listen
    stream, and an agent waiting on the queue claims the task as attempt 2 after the short lease (JCT_LEASE_SECONDS
    is ten times the wait)."""
    task_id = await one_task(make_settings)
    steps: list[Step] = [ToolUse(PLUGIN_CLAIM, {}), bash(WORK_SECONDS), Reply("done")]
    output = tmp_path / "claude.out"
    with anyio.fail_after(2 * LIMIT):
        async with http_server(held_env(jct_env, LONG_LEASE), tmp_path) as jct, mcp_proxy(jct) as (proxy, url):
            await install_plugin(claude_code, url)
            async with scripted_model(steps) as (model, model_url):
                with output.open("wb") as out:
                    process = await claude_code.start(
                        plugin_args(), model_url, out, subprocess.STDOUT, extra=PLUGIN_ENV
                    )
                try:
                    while len(model.main_requests()) < 2:  # the claim answered, the Bash call asked for
                        await anyio.sleep(0.2)
                    assert process.returncode is None, f"{output.read_text()}\n{model.tool_results}"
                    [claimed] = [r.json() for r in model.tool_results]
                    assert claimed["task_id"] == task_id, claimed
                    await anyio.sleep(SETTLE_SECONDS)  # several renewals: still held
                    listening: list[Exchange] = [e for e in proxy.open_streams() if e.rpc == ["subscriptions/listen"]]
                    assert listening, proxy.log()
                    async with Client(f"{jct}/mcp") as other:
                        assert (await call(other, "jct_claim_next"))["claimed"] is False
                        os.killpg(process.pid, signal.SIGKILL)
                        await process.wait()
                        again = await call(other, "jct_claim_next", wait_seconds=WAIT_SECONDS)
                finally:
                    if process.returncode is None:
                        os.killpg(process.pid, signal.SIGKILL)
                        await process.wait()
    the_agent_s_header(proxy)
    assert again["claimed"] is True, again
    assert (again["task_id"], again["attempt"]) == (task_id, 2), again
