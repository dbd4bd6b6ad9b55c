"""The Claude Code plugins (deploy/claude-code/plugin for HTTP, plugin-local for stdio) and their marketplace
(.claude-plugin/marketplace.json): `claude plugin validate` passes (hooks included), and Claude Code, with the
marketplace added and `jct-local@jct` installed, connects to JCT through the plugin's server and calls its tools."""

from __future__ import annotations

import filecmp
import json
import os
import sys
from pathlib import Path

import anyio
import pytest

from tests.claude_code.harness import ROOT, ClaudeCode
from tests.claude_code.model import Reply, Step, ToolUse, scripted_model, tool_names

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
