"""`python -S launch.py ZYGOTE ARGS...`: `jct ARGS` forked from a test worker's zygote (tests/support/zygote.py),
for a client that starts its server as a command (the SDK's stdio client).

It hands the zygote its own standard input, output and error, its environment and its working directory, passes
SIGTERM, SIGINT and SIGHUP on to the server, and exits as the server exits. If this process is killed first
(a client's SIGKILL to its process group), the zygote's monitor sees it go and kills the server. Standard
library only, and run without site-packages, so its own start costs milliseconds.
"""

import contextlib
import json
import os
import signal
import socket
import sys


def main() -> None:
    path, *args = sys.argv[1:]
    server: list[int] = []  # its pid, once the zygote answers
    early: list[int] = []  # signals that came before it

    def forward(number: int, _frame: object) -> None:
        if not server:
            early.append(number)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(server[0], number)

    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, forward)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    request = json.dumps({"args": args, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    socket.send_fds(conn, [request], [0, 1, 2])
    answers = conn.makefile("rb")
    server.append(int(answers.readline()))
    for pending in early:
        forward(pending, None)
    line = answers.readline()
    code = int(line) if line else 1
    if code < 0:  # killed by a signal: end the same way
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


if __name__ == "__main__":
    main()
