"""An MCP agent in a process of its own, so a test can kill it (SIGKILL) or freeze it (SIGSTOP) mid-task.

`async with process_agent(url, mode, cwd) as agent` starts `python -m tests.support.process_agent URL MODE`:
one `mcp.Client` (legacy or 2026-07-28) that calls whatever tool it is told, one JSON line in, one out.
`await agent.call(tool, **args)` gives the structured result, `await agent.refused(tool, **args)` the error
of a call that must fail (`{"code", "message", ...}`); `kill()` makes
it vanish without a word (no release, no DELETE of its session); `pause()` and `resume()` freeze and thaw
it, so it comes back late on the very connection it claimed through.

Mode `stdio` (`stdio_agent`): the agent starts its own `jct serve --stdio` with the given JCT_* settings, as
Claude Code does, and `server_pid` is that server's process id, so a test can kill or freeze the server, or the
agent alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from tests.support.lines import REPO, LineProcess, line_process

STDIO = "stdio"
START_SECONDS = 60.0
CALL_SECONDS = 30.0


class ProcessAgent(LineProcess):
    async def call(self, tool: str, **args: Any) -> dict[str, Any]:
        """The tool's structured result; a tool error fails the test."""
        answer = await self._ask(tool, args)
        assert "result" in answer, f"{tool} failed: {answer['error']}"
        result: dict[str, Any] = answer["result"]
        return result

    async def refused(self, tool: str, **args: Any) -> dict[str, Any]:
        """The error of a call that must fail."""
        answer = await self._ask(tool, args)
        assert "error" in answer, f"{tool} unexpectedly succeeded: {answer['result']}"
        error: dict[str, Any] = answer["error"]
        return error

    async def _ask(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        await self.send(json.dumps({"tool": tool, "args": args}) + "\n")
        answer: dict[str, Any] = json.loads(await self.line())
        return answer

    async def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        await self.process.wait()

    def pause(self) -> None:
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    server_pid: int | None = None  # stdio: the agent's own `jct serve --stdio`


@asynccontextmanager
async def process_agent(url: str, mode: str, cwd: Path, name: str = "agent") -> AsyncIterator[ProcessAgent]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JCT_")} | {"PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "tests.support.process_agent", url, mode]
    stderr = cwd / f"{name}.stderr"
    async with line_process(command, environ, stderr) as process:
        agent = ProcessAgent(process, stderr, CALL_SECONDS)
        with anyio.fail_after(START_SECONDS):
            ready, *pid = (await agent.line()).split()
        assert ready == "ready"
        agent.server_pid = int(pid[0]) if pid else None
        try:
            yield agent
        finally:
            if agent.server_pid is not None:  # frozen or orphaned: it must not outlive the test
                with contextlib.suppress(ProcessLookupError):
                    os.kill(agent.server_pid, signal.SIGCONT)
                    os.kill(agent.server_pid, signal.SIGKILL)


def stdio_agent(env: dict[str, str], cwd: Path, name: str = "agent") -> AbstractAsyncContextManager[ProcessAgent]:
    """An agent with its own `jct serve --stdio` on the JCT_* settings `env`."""
    return process_agent(json.dumps(env), STDIO, cwd, name)


# --- the process ---------------------------------------------------------------------------------


async def _serve(url: str, mode: str) -> None:
    from mcp import Client, StdioServerParameters

    target: Any = url
    if mode == STDIO:  # `url` is the server's JCT_* settings
        server = [sys.executable, "-m", "server", "serve", "--stdio"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("JCT_")} | json.loads(url)
        target, mode = StdioServerParameters(command=server[0], args=server[1:], env=env, cwd=str(REPO)), "legacy"
    async with Client(target, mode=mode) as client:
        await client.list_tools()
        children = _children() if isinstance(target, StdioServerParameters) else []
        print(" ".join(["ready", *map(str, children[:1])]), flush=True)
        stdin = anyio.wrap_file(sys.stdin)
        async for line in stdin:
            command = json.loads(line)
            result = await client.call_tool(command["tool"], command["args"])
            if result.is_error:
                answer = {"error": json.loads(result.content[0].text)["error"]}  # type: ignore[union-attr]
            else:
                answer = {"result": result.structured_content}
            print(json.dumps(answer), flush=True)


def _children() -> list[int]:
    """This process's child processes (Linux)."""
    found: list[int] = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        found += [int(pid) for pid in (task / "children").read_text().split()]
    return found


if __name__ == "__main__":
    anyio.run(_serve, sys.argv[1], sys.argv[2])
