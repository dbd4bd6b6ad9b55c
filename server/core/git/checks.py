"""The check command (DESIGN section 16): a repository's own command run on the replayed commit, in a scratch
worktree, before the target moves. A shell command in its own process group, with a timeout and a cap on what
it prints; what it leaves running is killed with the group."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import Process

from server.core.git import gitcli, merges, workspaces

log = logging.getLogger(__name__)

# How long the git commands around a check (worktree add, remove, prune) may take, unless the caller says.
_CHECK_GIT_SECONDS = 120.0
# After a check command exits, how long what it left running may keep its output open before it is cut.
_DRAIN_SECONDS = 2.0


@dataclass(frozen=True)
class Checked:
    ok: bool
    output: str  # the tail, at most max_bytes
    timed_out: bool


async def run_check(
    repo: gitcli.Repo,
    commit: str,
    command: str,
    *,
    scratch: Path,
    timeout: float,  # noqa: ASYNC109 - the command's own time limit, not the call's: git has `within`
    max_bytes: int,
    within: float = _CHECK_GIT_SECONDS,
) -> Checked:
    """Run `command` (`sh -c`) in a scratch worktree at `scratch`, detached at `commit`: ok when it exits 0
    within `timeout` seconds. Its standard output and error, merged, are read as they come and only their
    last `max_bytes` kept (a command that floods its output costs no memory). It runs in its own process
    group, killed whole at the timeout, on cancellation, and once the command exits (what it left running).
    The worktree is removed afterwards whatever happened, cancellation included; `scratch` is JCT's: a
    directory left there by an earlier crash is removed first. `within` bounds the git commands around it."""
    merges.sha(commit, "commit")
    await workspaces.remove(repo, scratch, within=within)
    try:
        await anyio.Path(scratch.parent).mkdir(parents=True, exist_ok=True)
        await workspaces.worktree(
            repo,
            "add",
            "--detach",
            "--quiet",
            "--end-of-options",
            str(scratch),
            commit,
            within=within,
            neutralised=await gitcli.neutral(repo, within=within),
            env=gitcli.write_env(),
        )
        return await _run_command(command, scratch, timeout, max_bytes)
    finally:
        with anyio.CancelScope(shield=True):
            try:
                await workspaces.remove(repo, scratch, within=within)
            except gitcli.GitError as exc:  # the verdict stands; the next check there removes it first
                log.warning("scratch worktree %s not removed: %s", scratch, exc)


async def _run_command(command: str, cwd: Path, seconds: float, max_bytes: int) -> Checked:
    tail = bytearray()
    cut = False
    timed_out = False
    process: Process | None = None
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    try:
        process = await anyio.open_process(
            ["sh", "-c", command],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        stream = process.stdout
        assert stream is not None

        drained = anyio.Event()

        async def read() -> None:
            nonlocal cut
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                async for chunk in stream:
                    tail.extend(chunk)
                    if len(tail) > max_bytes:
                        del tail[: len(tail) - max_bytes]
                        cut = True
            drained.set()

        with anyio.move_on_after(seconds) as deadline:
            async with anyio.create_task_group() as tg:
                tg.start_soon(read)
                await process.wait()
                # What the command left running in its group goes with it; then its output ends.
                _kill_group(process)
                with anyio.move_on_after(_DRAIN_SECONDS):
                    await drained.wait()
                tg.cancel_scope.cancel()
        timed_out = deadline.cancelled_caught
    finally:
        if process is not None:
            with anyio.CancelScope(shield=True):
                _kill_group(process)
                if process.returncode is None:
                    await process.wait()
                await process.aclose()
    ok = not timed_out and process.returncode == 0
    return Checked(ok=ok, output=_tail_text(tail, cut), timed_out=timed_out)


def _kill_group(process: Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _tail_text(tail: bytearray, cut: bool) -> str:
    """The kept bytes as text, without the broken character a cut may have left at the start."""
    start = 0
    while cut and start < min(len(tail), 3) and tail[start] & 0xC0 == 0x80:
        start += 1
    return bytes(tail[start:]).decode("utf-8", errors="replace")
