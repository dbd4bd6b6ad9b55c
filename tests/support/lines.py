"""A Python process of the test's own spoken to in lines: text on its stdin, one answer a line on its stdout,
its stderr kept in a file to show when it ends too soon."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

REPO = Path(__file__).resolve().parents[2]
MAX_LINE = 1 << 22


class LineProcess:
    """A running process: `line()` reads its next line (within `seconds`, if given), `send()` writes to it."""

    def __init__(self, process: Process, stderr: Path, seconds: float | None = None) -> None:
        assert process.stdout is not None
        self.process = process
        self.stderr = stderr
        self._out = BufferedByteReceiveStream(process.stdout)
        self._seconds = seconds

    async def line(self) -> str:
        """The next line, without its newline; a process that ended before writing it fails the test."""
        try:
            with anyio.fail_after(self._seconds):
                raw = await self._out.receive_until(b"\n", MAX_LINE)
        except (anyio.EndOfStream, anyio.IncompleteRead):
            raise AssertionError(f"the process exited; stderr:\n{self.stderr.read_text()}") from None
        return raw.decode()

    async def send(self, text: str) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(text.encode())


@asynccontextmanager
async def line_process(args: list[str], env: dict[str, str], stderr: Path) -> AsyncIterator[Process]:
    """`args` run from the repository with stdin and stdout piped, stderr into the file `stderr`; whatever is
    still running at the end is thawed (it may be stopped) and SIGKILLed."""
    with stderr.open("wb") as err:
        process = await anyio.open_process(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=str(REPO), env=env
        )
    try:
        yield process
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.send_signal(signal.SIGCONT)
                process.kill()
            await process.wait()
            await process.aclose()
