"""Running the real Claude Code CLI hermetically: its binary, its environment, one invocation.

The binary comes from scripts/claude-code.sh (the pinned version, installed with npm into .cache/ on
first use). Every run gets the test's own HOME and CLAUDE_CONFIG_DIR, a dummy API key,
ANTHROPIC_BASE_URL at the scripted model (tests/claude_code/model.py), and HTTP(S)_PROXY at an `Egress`
catcher, so anything it tries to reach beyond 127.0.0.1 is refused and recorded instead of leaving the
machine. Without the DISABLE_* variables below it does try: api.anthropic.com, through the proxy.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process

from tests.claude_code.proxy import Egress

ROOT = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = ROOT / "scripts" / "claude-code.sh"
INSTALL_SECONDS = 600.0
RUN_SECONDS = 120.0
MCP_TOOLS = "mcp__jct__*"

# The MCP protocol era Claude Code speaks to an HTTP server. By default ("auto") it asks
# `server/discover` first and, since JCT serves the 2026-07-28 protocol, never opens a session;
# MCP_PROTOCOL_NEGOTIATION=legacy makes it use the `initialize` handshake and `mcp-session-id`.
ERAS: dict[str, dict[str, str]] = {"auto": {}, "legacy": {"MCP_PROTOCOL_NEGOTIATION": "legacy"}}

# Inherited variables that would change what Claude Code does or where it sends requests.
SCRUBBED_PREFIXES = ("ANTHROPIC_", "CLAUDE", "JCT_", "MCP_", "OTEL_", "AWS_", "GOOGLE_", "VERTEX_", "BEDROCK_")
SCRUBBED = {"DATABASE_URL", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "XDG_CONFIG_HOME", "NODE_OPTIONS"}

QUIET = {
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "DISABLE_COST_WARNINGS": "1",
    "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
    "CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL": "1",
}


def claude_binary() -> Path:
    """The pinned Claude Code binary, installed on first use; fails the test (never skips) if it cannot be."""
    try:
        done = subprocess.run(
            [str(INSTALL_SCRIPT)], capture_output=True, text=True, timeout=INSTALL_SECONDS, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{INSTALL_SCRIPT.name} did not install Claude Code within {INSTALL_SECONDS:.0f}s")
    if done.returncode != 0:
        pytest.fail(f"could not install Claude Code with {INSTALL_SCRIPT.name}:\n{done.stderr}")
    return Path(done.stdout.strip().splitlines()[-1])


def stdio_server(env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """An MCP config entry starting `python -m server serve --stdio` with the test's JCT_* settings."""
    return {"command": sys.executable, "args": ["-m", "server", "serve", "--stdio"], "env": env, "cwd": str(cwd)}


@dataclass
class Run:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    def explain(self) -> str:
        return f"claude {' '.join(self.args)}\nexit {self.returncode}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


@dataclass
class ClaudeCode:
    """The Claude Code CLI for one test: its own HOME, working directory and egress catcher."""

    binary: Path
    home: Path
    work: Path
    egress: Egress
    egress_url: str
    runs: list[Run] = field(default_factory=list)

    def env(self, model_url: str, era: str = "auto", **extra: str) -> dict[str, str]:
        """The environment of one run: nothing inherited that points it elsewhere, plus the era and `extra`."""
        base = {
            key: value
            for key, value in os.environ.items()
            if not key.upper().startswith(SCRUBBED_PREFIXES) and key.upper() not in SCRUBBED
        }
        config = self.home / ".claude"
        config.mkdir(parents=True, exist_ok=True)
        return (
            base
            | QUIET
            | {
                "HOME": str(self.home),
                "CLAUDE_CONFIG_DIR": str(config),
                "XDG_CONFIG_HOME": str(self.home / ".config"),
                "ANTHROPIC_BASE_URL": model_url,
                "ANTHROPIC_API_KEY": "test-key",
                "HTTP_PROXY": self.egress_url,
                "HTTPS_PROXY": self.egress_url,
                "http_proxy": self.egress_url,
                "https_proxy": self.egress_url,
                "NO_PROXY": "127.0.0.1,localhost",
                "no_proxy": "127.0.0.1,localhost",
                "MCP_TIMEOUT": "30000",
                "MCP_TOOL_TIMEOUT": "60000",
                # MCP tools in every request's `tools`, rather than deferred behind ToolSearch.
                "ENABLE_TOOL_SEARCH": "false",
            }
            | ERAS[era]
            | extra
        )

    async def run(
        self,
        args: list[str],
        model_url: str,
        era: str = "auto",
        limit: float = RUN_SECONDS,
        extra: dict[str, str] | None = None,
    ) -> Run:
        """`claude *args` to completion (stdin closed); fails the test with its output after `limit` seconds.
        `extra`: more environment (a plugin's stdio server inherits Claude Code's)."""
        name = f"claude-{len(self.runs)}"
        out, err = self.work.parent / f"{name}.out", self.work.parent / f"{name}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            process = await self.start(args, model_url, stdout, stderr, era, extra)
        try:
            with anyio.fail_after(limit):
                await process.wait()
        except TimeoutError:
            with anyio.CancelScope(shield=True):
                os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
            run = Run(args, -9, out.read_text(errors="replace"), err.read_text(errors="replace"))
            pytest.fail(f"Claude Code did not finish within {limit:.0f}s\n{run.explain()}\n{self.mcp_logs()}")
        assert process.returncode is not None
        run = Run(args, process.returncode, out.read_text(errors="replace"), err.read_text(errors="replace"))
        self.runs.append(run)
        return run

    async def start(
        self,
        args: list[str],
        model_url: str,
        stdout: Any,
        stderr: Any,
        era: str = "auto",
        extra: dict[str, str] | None = None,
    ) -> Process:
        """`claude *args` started, stdin closed, in its own process group: killing the group (a timeout, a test's
        SIGKILL) also stops its stdio servers."""
        return await anyio.open_process(
            [str(self.binary), *args],
            env=self.env(model_url, era, **(extra or {})),
            cwd=self.work,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )

    async def print(
        self, prompt: str, servers: dict[str, dict[str, Any]], model_url: str, era: str = "auto", *extra: str
    ) -> Run:
        """`claude -p prompt` with only `servers` (an mcpServers object), the JCT tools allowed, JSON output."""
        config = self.work.parent / f"mcp-{len(self.runs)}.json"
        config.write_text(json.dumps({"mcpServers": servers}, indent=2))
        args = [
            "-p",
            prompt,
            "--mcp-config",
            str(config),
            "--strict-mcp-config",
            "--allowedTools",
            MCP_TOOLS,
            "--output-format",
            "json",
            "--no-session-persistence",
            *extra,
        ]
        return await self.run(args, model_url, era)

    def mcp_logs(self) -> str:
        """Claude Code's own MCP debug logs (one JSON line per event, per server), for failure messages."""
        logs = sorted((self.home / ".cache").glob("claude-cli-nodejs/*/mcp-logs-*/*.jsonl"))
        parts = []
        for path in logs:
            lines = []
            for line in path.read_text(errors="replace").splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    lines.append(line)
                    continue
                text = entry.get("debug") or entry.get("error") or line
                lines.append(f"{entry.get('timestamp', '')} {text}")
            parts.append(f"--- {path.parent.name}\n" + "\n".join(lines))
        return "\n".join(parts) or "(no MCP logs)"
