"""The Claude Code plugins (deploy/claude-code/plugin for HTTP, plugin-local for stdio) and their marketplace
(.claude-plugin/marketplace.json): `claude plugin validate` passes (hooks included), and Claude Code, with the
marketplace added and `jct-local@jct` installed, connects to JCT through the plugin's server and calls its tools;
with `jct@jct` installed, each Claude Code session is its own agent."""

from __future__ import annotations

import filecmp
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tests.claude_code.harness import ROOT, ClaudeCode
from tests.claude_code.model import Reply, Step, ToolUse, scripted_model, tool_names
from tests.transports.conftest import call

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LIMIT = 240.0
PLUGINS = ROOT / "deploy" / "claude-code"
SHARED = ["skills/jct-work/SKILL.md", "skills/jct-review/SKILL.md", "agents/jct-worker.md", "commands", "hooks"]


def test_both_plugins_carry_the_same_skills_agent_and_commands() -> None:
    for part in SHARED:
        http, local = PLUGINS / "plugin" / part, PLUGINS / "plugin-local" / part
        if http.is_dir():
            compared = filecmp.dircmp(http, local)
            assert compared.left_list == compared.right_list
            assert not compared.diff_files, compared.diff_files
        else:
            assert http.read_text() == local.read_text(), part
    http = json.loads((PLUGINS / "plugin" / ".claude-plugin" / "plugin.json").read_text())
    assert http["mcpServers"]["jct"]["url"] == "${user_config.url}"
    assert http["userConfig"]["token"]["sensitive"] is True


def agent_header(command: str, plugin_root: Path, *, nested: bool = False) -> str:
    """The X-JCT-Agent value the headersHelper `command` prints, run as Claude Code runs it: through a shell, with
    the plugin root substituted; `nested`: from a shell that is another process than this one."""
    command = command.replace("${CLAUDE_PLUGIN_ROOT}", str(plugin_root))
    argv = ["sh", "-c", f"sh -c {shlex.quote(command)}"] if nested else ["sh", "-c", command]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30)
    headers = json.loads(done.stdout)
    assert list(headers) == ["X-JCT-Agent"], headers
    return str(headers["X-JCT-Agent"])


def test_the_http_plugins_headers_helper_names_one_agent_per_claude_code_process() -> None:
    """The helper's value depends on its shell's parent (Claude Code): the same from one process, another from
    another; 32 hex digits, which JCT accepts."""
    plugin = PLUGINS / "plugin"
    server = json.loads((plugin / ".claude-plugin" / "plugin.json").read_text())["mcpServers"]["jct"]
    command = server["headersHelper"]
    first, again = agent_header(command, plugin), agent_header(command, plugin)
    other = agent_header(command, plugin, nested=True)
    assert first == again
    assert other != first
    assert re.fullmatch(r"[0-9a-f]{32}", first), first


async def test_claude_plugin_validate_passes(claude_code: ClaudeCode) -> None:
    with anyio.fail_after(LIMIT):
        async with scripted_model([]) as (model, model_url):
            runs = [
                await claude_code.run(["plugin", "validate", str(path)], model_url)
                for path in (PLUGINS / "plugin", PLUGINS / "plugin-local", ROOT)
            ]
    for run in runs:
        assert run.returncode == 0, run.explain()
        assert "Validation passed" in run.stdout, run.explain()
        assert "error" not in run.stdout.lower().replace("0 errors", ""), run.explain()
    # The stdio plugin passes the plugin directory's checks too; the HTTP one has no privacy policy URL to give.
    assert "These checks found nothing to report" in runs[1].stdout, runs[1].explain()
    assert "ICON_MISSING" not in runs[0].stdout, runs[0].explain()
    provided = runs[0].stdout
    for part in ("mcpServers: jct http", "skills: jct:jct-work", "skills: jct:jct-review", "agents: jct:jct-worker"):
        assert part in provided, runs[0].explain()
    for command in ("work", "review", "status"):
        assert f"commands: jct:{command}" in provided, runs[0].explain()
    for run in runs[:2]:  # both plugins' hooks (tests/claude_code/test_unattended.py runs them in Claude Code)
        for hook in ("Stop command", "SubagentStop command", "SessionStart resume|compact command"):
            assert f"hooks: {hook}" in run.stdout, run.explain()
    assert model.requests == []


async def test_the_http_plugin_installs_for_a_server_without_tokens(claude_code: ClaudeCode, jct: str) -> None:
    """The README's install for a server without tokens: the URL given, the token left out (an empty one is
    refused, and with it every --config value); the plugin's server then connects to JCT."""
    with anyio.fail_after(LIMIT):
        async with scripted_model([]) as (model, model_url):
            added = await claude_code.run(["plugin", "marketplace", "add", str(ROOT)], model_url)
            assert added.returncode == 0, added.explain()
            empty = await claude_code.run(
                ["plugin", "install", "jct@jct", "--config", f"url={jct}/mcp", "--config", "token="], model_url
            )
            installed = await claude_code.run(["plugin", "install", "jct@jct", "--config", f"url={jct}/mcp"], model_url)
            listed = await claude_code.run(["mcp", "list"], model_url)
    assert "--config not applied" in empty.stdout + empty.stderr, empty.explain()
    assert installed.returncode == 0, installed.explain()
    assert "not applied" not in installed.stdout + installed.stderr, installed.explain()
    assert listed.returncode == 0, listed.explain()
    [line] = [line for line in listed.stdout.splitlines() if line.startswith("plugin:jct:jct")]
    assert f"{jct}/mcp" in line, listed.explain()
    assert "✔ Connected" in line, f"{listed.explain()}\n{claude_code.mcp_logs()}"
    assert model.requests == []
    assert claude_code.egress.attempts == []


async def test_each_claude_code_session_through_the_http_plugin_is_its_own_agent(
    claude_code: ClaudeCode, jct: str
) -> None:
    """Claude Code speaks the stateless protocol over HTTP, which has no session: without the plugin's
    headersHelper every session was the one agent `local`. Two sessions, one after the other, each claims a
    task and ends holding it (its hooks off): jct_list_agents shows two agents, each holding one claim."""
    async with Client(f"{jct}/mcp") as observer:
        for n in range(2):
            await call(observer, "jct_enqueue_task", objective=f"Task {n}", operation="docs", target_repo="myorg/api")
    claim = "mcp__plugin_jct_jct__jct_claim_next"
    extra = {"MCP_CONNECTION_NONBLOCKING": "false", "JCT_HOOKS": "off"}
    with anyio.fail_after(LIMIT):
        async with scripted_model([]) as (model, model_url):
            added = await claude_code.run(["plugin", "marketplace", "add", str(ROOT)], model_url)
            assert added.returncode == 0, added.explain()
            installed = await claude_code.run(["plugin", "install", "jct@jct", "--config", f"url={jct}/mcp"], model_url)
            assert installed.returncode == 0, installed.explain()
        claims = []
        for _ in range(2):
            steps: list[Step] = [ToolUse(claim, {}), lambda result: Reply("Claimed.")]
            async with scripted_model(steps) as (model, model_url):
                args = ["-p", "Claim a JCT task.", "--allowedTools", claim, "--output-format", "json"]
                run = await claude_code.run(args, model_url, extra=extra)
            assert run.returncode == 0, f"{run.explain()}\n{claude_code.mcp_logs()}"
            assert model.errors == [], "\n".join(model.errors)
            [result] = model.tool_results
            assert not result.is_error, result.text
            claims.append(result.json())
        async with Client(f"{jct}/mcp") as observer:
            agents = (await call(observer, "jct_list_agents"))["agents"]
    assert all(claimed["claimed"] is True for claimed in claims), claims
    assert len(agents) == 2, agents
    assert all(agent["agent"].startswith("local-") and agent["claims_held"] == 1 for agent in agents), agents
    assert {agent["claims"][0]["task_id"] for agent in agents} == {claimed["task_id"] for claimed in claims}
    assert claude_code.egress.attempts == []


async def test_jct_through_the_installed_plugin(
    claude_code: ClaudeCode, jct_env: dict[str, str], tmp_path: Path
) -> None:
    """`claude plugin marketplace add <repo>`, `claude plugin install jct-local@jct`; the plugin's stdio server
    runs `jct` from the PATH (here: this checkout's, as `make install` links it) on the test's database."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "jct").symlink_to(Path(sys.executable).with_name("jct"))
    extra = jct_env | {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    # Print mode waits for the plugin's server before the first model request (it does not by default).
    extra["MCP_CONNECTION_NONBLOCKING"] = "false"

    with anyio.fail_after(LIMIT):
        async with scripted_model([Reply("Looked.")]) as (model, model_url):
            added = await claude_code.run(["plugin", "marketplace", "add", str(ROOT)], model_url, extra=extra)
            assert added.returncode == 0, added.explain()
            installed = await claude_code.run(["plugin", "install", "jct-local@jct"], model_url, extra=extra)
            assert installed.returncode == 0, installed.explain()
            listed = await claude_code.run(["mcp", "list"], model_url, extra=extra)
            looked = await claude_code.run(
                ["-p", "What is in the JCT queue?", "--output-format", "json", "--no-session-persistence"],
                model_url,
                extra=extra,
            )
    assert listed.returncode == 0, listed.explain()
    [line] = [line for line in listed.stdout.splitlines() if "jct-local" in line and "serve --stdio" in line]
    assert "✔ Connected" in line, f"{listed.explain()}\n{claude_code.mcp_logs()}"
    assert looked.returncode == 0, looked.explain()
    offered = [tool_names(r.body) for r in model.requests]
    assert model.main_requests(), f"{offered}\n{claude_code.mcp_logs()}\n{looked.explain()}"
    names = tool_names(model.main_requests()[0].body)
    [stats] = [name for name in names if name.endswith("__jct_queue_stats")]
    assert stats.startswith("mcp__plugin_jct-local_"), names

    with anyio.fail_after(LIMIT):
        steps: list[Step] = [ToolUse(stats, {}), lambda result: Reply("Stats read.")]
        async with scripted_model(steps) as (model, model_url):
            run = await claude_code.run(
                [
                    "-p",
                    "Show the JCT queue stats.",
                    "--allowedTools",
                    stats,
                    "--output-format",
                    "json",
                    "--no-session-persistence",
                ],
                model_url,
                extra=extra,
            )
    assert model.errors == [], "\n".join(model.errors)
    assert run.returncode == 0, f"{run.explain()}\n{claude_code.mcp_logs()}"
    [result] = model.tool_results
    assert not result.is_error, result.text
    assert json.loads(result.text)["success"] is True
    assert claude_code.egress.attempts == []
