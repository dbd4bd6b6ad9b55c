"""`jct serve` processes forked from one that has already imported JCT, so a test's server starts in a fifth of
the CPU.

A `python -m server serve` spends 2.6-2.8 s of CPU (on a 2-core machine) before it answers `/readyz`, most of it
importing JCT, the MCP SDK, SQLAlchemy and Alembic and building its first app, and the suite starts a few
hundred servers. Each test worker starts one zygote, a process that does all of that once and then forks a
fresh server for each `spawn`, ready after about 0.55 s: the child is a real process, with its own pid,
environment, working directory, output files and signals, and it runs the same `server.cli.main` that
`python -m server` runs. `spawn` gives the test the process (`jct serve --port`); `command` gives a client a
command to start (`jct serve --stdio` for the SDK's stdio client), a small stand-in (tests/support/launch.py)
that hands the zygote its pipes. Tests whose subject is the process start itself (stdio start-up, the installed
`jct`, Claude Code's sessions, agents that freeze their server) and the one that measures a server's memory
still start `python -m server`.

The zygote forks a monitor per request and the monitor forks the server: the monitor answers the server's
pid, waits for it and answers its exit status (`os.waitstatus_to_exitcode`: negative for a signal), and kills
the server if the test's end of the socket closes first; the zygote itself never waits and never runs a
thread. It ends when its worker closes its stdin.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import pkgutil
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, Process

READY_SECONDS = 60.0
# What a server imports only once it starts: the migration check and uvicorn's parts.
_STARTED_LATER = (
    "alembic.runtime.migration",
    "alembic.ddl.postgresql",
    "alembic.ddl.sqlite",
    "uvicorn.lifespan.on",
    "uvicorn.loops.auto",
    "uvicorn.protocols.http.auto",
    "uvicorn.protocols.websockets.auto",
)
_ROOT = Path(__file__).resolve().parents[2]
_LAUNCH = Path(__file__).with_name("launch.py")


# --- the zygote process ----------------------------------------------------------------------


def _child(request: dict[str, object], fds: list[int]) -> None:
    """In the forked server: its files, directory, environment, arguments and signals, then `jct` itself, ended
    as `python -m server` ends (non-daemon threads joined, atexit run, streams flushed)."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(str(request["cwd"]))
    environ = request["env"]
    assert isinstance(environ, dict)
    os.environ.clear()
    os.environ.update(environ)
    args = request["args"]
    assert isinstance(args, list)
    sys.argv = ["jct", *args]
    code = 0
    try:
        from server.cli import main

        main()
    except SystemExit as exit_:
        if isinstance(exit_.code, int) or exit_.code is None:
            code = exit_.code or 0
        else:  # as the interpreter does: the message on stderr, status 1
            print(exit_.code, file=sys.stderr)
            code = 1
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter's own exit does first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def _monitor(conn: socket.socket, request: dict[str, object], fds: list[int]) -> None:
    """In the forked monitor: fork the server, answer its pid, wait for it, answer its exit status. A test that
    goes away first (its end of `conn` closed: cancelled, killed, or a stdio stand-in killed by its client) takes
    the server with it, so no server outlives whoever started it."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        conn.close()
        _child(request, fds)
    for fd in fds:
        os.close(fd)
    ended = os.pidfd_open(pid)
    try:
        conn.sendall(f"{pid}\n".encode())
        while True:
            readable, _, _ = select.select([ended, conn.fileno()], [], [])
            if ended in readable:
                break
            if not conn.recv(1):  # the test has gone
                os.kill(pid, signal.SIGKILL)
                break
    except OSError:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    with contextlib.suppress(OSError):  # the test may have gone
        conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
    os._exit(0)


def _warm_up() -> None:
    """Build an app once (nothing started, nothing connected): the tools' argument and result models and their
    schemas are made on a process's first build, 0.6 s of CPU that every forked server would spend again."""
    from server.app import create_app
    from server.config import Settings

    with tempfile.TemporaryDirectory(prefix="jct-zygote-") as home:
        create_app(Settings(_env_file=None, database_url=f"sqlite:///{home}/warm.db", home=Path(home)))


def zygote(path: str) -> None:
    """Import what `jct serve` imports, then fork a monitor (and through it a server) for each request."""
    import server

    for found in pkgutil.walk_packages(server.__path__, "server."):
        # alembic runs the migrations' files itself, and `server.__main__` runs `jct`
        if not found.name.startswith(("server.db.migrations", "server.__main__")):
            importlib.import_module(found.name)
    for module in _STARTED_LATER:
        importlib.import_module(module)
    _warm_up()
    gc.collect()
    gc.freeze()  # the imported objects are left out of the children's collections, so their pages stay shared
    assert threading.active_count() == 1, "a process with threads must not fork"
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # monitors are reaped by the kernel
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C of the run is for the tests and the servers
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        readable, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1):
            return  # the worker has gone
        if listener not in readable:
            continue
        conn, _ = listener.accept()
        with conn:
            message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            if os.fork() == 0:
                listener.close()
                _monitor(conn, json.loads(message), fds)
            for fd in fds:
                os.close(fd)


# --- the test side ---------------------------------------------------------------------------


class Forked(Process):
    """A server forked by the zygote: signalled by its pid, its exit status read from the monitor's socket."""

    def __init__(self, conn: socket.socket, pid: int) -> None:
        self._conn = conn
        self._pid = pid
        self._code: int | None = None
        self._buffer = b""

    def _poll(self) -> None:
        while self._code is None:
            try:
                data = self._conn.recv(64)
            except BlockingIOError:
                return
            self._buffer += data
            if b"\n" in self._buffer:
                self._code = int(self._buffer.split(b"\n", 1)[0])
            elif not data:  # the monitor died without an answer: end the server too, and say so as a failure
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self._pid, signal.SIGKILL)
                self._code = -signal.SIGKILL
            if self._code is not None:
                self._conn.close()

    async def wait(self) -> int:
        while self.returncode is None:
            await anyio.wait_readable(self._conn)
        assert self._code is not None
        return self._code

    def send_signal(self, signal_: signal.Signals) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal_)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def aclose(self) -> None:
        if self.returncode is None:
            self.kill()
            await self.wait()

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def returncode(self) -> int | None:
        self._poll()
        return self._code

    @property
    def stdin(self) -> ByteSendStream | None:
        return None

    @property
    def stdout(self) -> ByteReceiveStream | None:
        return None

    @property
    def stderr(self) -> ByteReceiveStream | None:
        return None


class _Zygote:
    """This worker's zygote, started on first use and ended with the worker."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._path = ""

    def path(self) -> str:
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._path = os.path.join(tempfile.mkdtemp(prefix="jct-zygote-"), "socket")
                process = subprocess.Popen(
                    [sys.executable, "-m", "tests.support.zygote", self._path],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    env={k: v for k, v in os.environ.items() if not k.startswith("JCT_")},
                    cwd=_ROOT,
                )
                assert process.stdout is not None
                if process.stdout.readline() != b"ready\n":
                    raise RuntimeError(f"the zygote did not start (exit {process.wait()})")
                self._process = process
                atexit.register(self.close)
            return self._path

    def close(self) -> None:
        if self._process is not None and self._process.stdin is not None:
            self._process.stdin.close()
            self._process.wait(timeout=10)
            self._process = None
            shutil.rmtree(os.path.dirname(self._path), ignore_errors=True)


_ZYGOTE = _Zygote()


async def spawn(args: list[str], env: dict[str, str], cwd: Path, out: IO[bytes]) -> Process:
    """`jct ARGS` forked from this worker's zygote: environment `env` (the whole of it), in `cwd`, with stdin
    from /dev/null and stdout and stderr into `out`."""
    path = await anyio.to_thread.run_sync(_ZYGOTE.path)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        with open(os.devnull, "rb") as devnull:
            request = json.dumps({"args": args, "env": env, "cwd": str(cwd)}).encode()
            socket.send_fds(conn, [request], [devnull.fileno(), out.fileno(), out.fileno()])
        conn.setblocking(False)
        answer = b""
        with anyio.fail_after(READY_SECONDS):
            while not answer.endswith(b"\n"):
                await anyio.wait_readable(conn)
                chunk = conn.recv(1)  # the exit status may follow at once: read the pid's line only
                if not chunk:
                    raise RuntimeError("the zygote's monitor ended before it answered a pid")
                answer += chunk
    except BaseException:
        conn.close()
        raise
    return Forked(conn, int(answer))


async def command(args: list[str]) -> list[str]:
    """The command that starts `jct ARGS` forked from this worker's zygote, for a client that starts its server
    itself (the SDK's stdio client): tests/support/launch.py, which stands in for the server's process."""
    return [sys.executable, "-S", str(_LAUNCH), await anyio.to_thread.run_sync(_ZYGOTE.path), *args]


if __name__ == "__main__":
    zygote(sys.argv[1])
