"""Running one git command: a subprocess driven to its end from a worker thread, with a deadline and caps on
what it may print; what every git call shares (its errors, its output, its environment, JCT's identity).

Why a worker thread that blocks on the pipes rather than an asyncio subprocess: a command costs one wake-up when
git is done, where an asyncio subprocess takes several (a child-watcher thread, each pipe, the loop), each a wait
for a core on a busy machine; and a function that runs several commands (a replay) hands them all to one thread
(gitcli.in_thread). bench/integrate.py measures the difference.
"""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# What a command may print before it is stopped (a diff for a reader is cut much earlier by max_chars).
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
_STDERR_BYTES = 16 * 1024

# Who JCT is in the commits and reflog entries it writes.
COMMITTER_NAME = "JCT"
COMMITTER_EMAIL = "jct@localhost"


class GitError(Exception):
    """git failed: a missing object, an unreadable repository, a timeout, a fetch over its cap."""

    def __init__(self, message: str, *, returncode: int | None = None, stderr: str = "") -> None:
        super().__init__(message)
        self.returncode = returncode
        self.stderr = stderr


class GitTimeout(GitError):
    pass


class Locked(GitError):
    """A lock file git leaves while it writes (`index.lock`, `refs/heads/<ref>.lock`) is there: another git is
    writing, or one died and left it (a person removes a stale one)."""

    def __init__(self, message: str, *, lock: Path, returncode: int | None = None, stderr: str = "") -> None:
        super().__init__(message, returncode=returncode, stderr=stderr)
        self.lock = lock


class Clock:
    """One deadline for a function that runs several git commands: each gets what is left of `within`."""

    def __init__(self, within: float) -> None:
        self.within = within
        self.end = time.monotonic() + within

    def left(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise GitTimeout(f"git did not finish within {self.within:g}s")
        return left


@dataclass(frozen=True)
class Output:
    stdout: bytes
    returncode: int
    # The command printed more than its cap: stdout holds the first max_bytes and git was stopped.
    truncated: bool = False

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", errors="replace")


def environment() -> dict[str, str]:
    """The process environment less every GIT_* variable a caller's shell may carry, plus JCT's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        {
            "GIT_TERMINAL_PROMPT": "0",  # a fetch that needs a password fails instead of waiting for one
            "GIT_OPTIONAL_LOCKS": "0",  # `git status`/`diff` on a working tree never writes its index
            "GIT_LITERAL_PATHSPECS": "1",  # ':(top)' or '*' in a path is that file name, not pathspec magic
            "GIT_CONFIG_NOSYSTEM": "1",
            "LC_ALL": "C",
        }
    )
    return env


def write_env(*, author: tuple[str, str, str] | None = None) -> dict[str, str]:
    """`environment()` for a command that writes commits or reflog entries: committed by JCT, authored by JCT
    or by `author` (name, email, date in git's format, e.g. "1700000000 +0100")."""
    env = environment()
    name, email, date = author if author is not None else (COMMITTER_NAME, COMMITTER_EMAIL, "")
    env.update(
        {
            "GIT_COMMITTER_NAME": COMMITTER_NAME,
            "GIT_COMMITTER_EMAIL": COMMITTER_EMAIL,
            "GIT_AUTHOR_NAME": name,
            "GIT_AUTHOR_EMAIL": email,
        }
    )
    if date:
        env["GIT_AUTHOR_DATE"] = date
    return env


class Process:
    """One git command, run to its end on the calling thread (a worker thread: never the event loop's): its
    pipes pumped with a selector until both outputs end (stdout cut at `max_bytes`, stderr at _STDERR_BYTES),
    its input written as it reads. `cancel()`, from any thread, kills it and whatever it started."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        cwd: Path | None,
        input: bytes | None,
        within: float,
        max_bytes: int,
        *,
        session: bool = False,
    ) -> None:
        self.args, self.env, self.cwd, self.input = args, env, cwd, input
        self.within, self.max_bytes, self.session = within, max_bytes, session
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.returncode: int | None = None
        self.truncated = False
        self.timed_out = False
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._cancelled = False

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            if self._process is not None:
                _kill(self._process)

    def run(self) -> None:
        """Run it; then `result()`."""
        deadline = time.monotonic() + self.within
        with self._lock:
            if self._cancelled:
                return
            process = self._process = subprocess.Popen(
                self.args,
                env=self.env,
                cwd=self.cwd,
                stdin=subprocess.PIPE if self.input is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                # Its own process group, killed whole (_kill). A command that may reach a remote gets its own
                # session too: no terminal, so an ssh never waits for a passphrase there. Only then: a session
                # leader's exit costs up to milliseconds more on a busy machine (bench/integrate.py).
                start_new_session=self.session,
                process_group=None if self.session else 0,
            )
        try:
            self._pump(process, deadline)
            if not self.timed_out:
                self._reap(process, deadline)
        finally:
            if process.poll() is None:
                _kill(process)
                process.wait()
            for pipe in (process.stdin, process.stdout, process.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()

    def _reap(self, process: subprocess.Popen[bytes], deadline: float) -> None:
        """Wait, by the deadline, for git to exit (its output has ended). On a pidfd where there is one:
        `Popen.wait(timeout)` polls with sleeps from 0.5 ms up, which costs a short command a third of its time."""
        if process.poll() is not None:
            self.returncode = process.returncode
            return
        try:
            pidfd = os.pidfd_open(process.pid)
        except (AttributeError, OSError):
            try:
                self.returncode = process.wait(timeout=max(deadline - time.monotonic(), 0.001))
            except subprocess.TimeoutExpired:
                self.timed_out = True
            return
        try:
            ready, _, _ = select.select([pidfd], [], [], max(deadline - time.monotonic(), 0))
        finally:
            os.close(pidfd)
        if not ready:
            self.timed_out = True
            return
        self.returncode = process.wait()

    def _pump(self, process: subprocess.Popen[bytes], deadline: float) -> None:
        assert process.stdout is not None
        assert process.stderr is not None
        pending = memoryview(self.input or b"")
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            selector.register(process.stderr, selectors.EVENT_READ)
            if process.stdin is not None:
                if pending:
                    selector.register(process.stdin, selectors.EVENT_WRITE)
                else:
                    process.stdin.close()
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    self.timed_out = True
                    _kill(process)
                    return
                for key, _events in selector.select(left):
                    if key.fileobj is process.stdin:
                        try:
                            # At most PIPE_BUF: a pipe select calls writable takes that much without blocking.
                            pending = pending[os.write(key.fd, pending[: select.PIPE_BUF]) :]
                        except BrokenPipeError:  # git stopped reading (it failed): its answer says why
                            pending = pending[:0]
                        if not pending:
                            selector.unregister(key.fileobj)
                            process.stdin.close()
                        continue
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        selector.unregister(key.fileobj)
                    elif key.fileobj is process.stderr:
                        self.stderr += chunk[: max(_STDERR_BYTES - len(self.stderr), 0)]
                    elif len(self.stdout) + len(chunk) > self.max_bytes:
                        self.stdout += chunk[: self.max_bytes - len(self.stdout)]
                        self.truncated = True
                        _kill(process)
                        return
                    else:
                        self.stdout += chunk

    def result(self, ok: Sequence[int]) -> Output:
        if self._cancelled:
            raise GitError("git was stopped: the call was cancelled")
        if self.timed_out:
            raise GitTimeout(f"git did not answer within {self.within:g}s")
        stderr = self.stderr.decode("utf-8", errors="replace").strip()
        if not self.truncated and self.returncode not in ok:
            raise GitError(
                stderr.splitlines()[-1] if stderr else f"git exited {self.returncode}",
                returncode=self.returncode,
                stderr=stderr,
            )
        return Output(bytes(self.stdout), self.returncode if self.returncode is not None else -1, self.truncated)


def _kill(process: subprocess.Popen[bytes]) -> None:
    """Stop git and whatever it started (a fetch runs index-pack, remote helpers): its whole session."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(OSError):
            process.kill()
