"""An MCP agent in a process of its own, so a test can kill it (SIGKILL) or freeze it (SIGSTOP) mid-task.

`async with process_agent(url, mode, cwd) as agent` starts `python -m tests.support.process_agent URL MODE`:
one `mcp.Client` (legacy or 2026-07-28) that calls whatever tool it is told, one JSON line in, one out.
`await agent.call(tool, **args)` gives the structured result, `await agent.refused(tool, **args)` the error
of a call that must fail (`{"code", "message", ...}`); `kill()` makes
it vanish without a word (no release, no DELETE of its session); `pause()` and `resume()` freeze and thaw
it, so it comes back late on the very connection it claimed through.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from tests.support.lines import REPO, LineProcess, line_process

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


@asynccontextmanager
async def process_agent(url: str, mode: str, cwd: Path, name: str = "agent") -> AsyncIterator[ProcessAgent]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JCT_")} | {"PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "tests.support.process_agent", url, mode]
    stderr = cwd / f"{name}.stderr"
    async with line_process(command, environ, stderr) as process:
        agent = ProcessAgent(process, stderr, CALL_SECONDS)
        with anyio.fail_after(START_SECONDS):
            assert await agent.line() == "ready"
        yield agent


# --- the process ---------------------------------------------------------------------------------


async def _serve(url: str, mode: str) -> None:
    from mcp import Client

    async with Client(url, mode=mode) as client:
        await client.list_tools()
        print("ready", flush=True)
        stdin = anyio.wrap_file(sys.stdin)
        async for line in stdin:
            command = json.loads(line)
            result = await client.call_tool(command["tool"], command["args"])
            if result.is_error:
                answer = {"error": json.loads(result.content[0].text)["error"]}  # type: ignore[union-attr]
            else:
                answer = {"result": result.structured_content}
            print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    anyio.run(_serve, sys.argv[1], sys.argv[2])
