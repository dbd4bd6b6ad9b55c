"""A worker in its own OS process, driven by tests/core/test_processes.py.

Settings come from the environment (JCT_DATABASE_URL, JCT_TRACE_ROOT, JCT_LEASE_SECONDS, ...), as for
the real server. It speaks line by line on stdout:

    drain ACTOR        prints "ready", waits for "go" on stdin, then claims and completes tasks until
                       the queue is empty, printing "claimed <task_id>" for each and "done <n>" at the end.
    hold ACTOR COUNT   claims COUNT tasks, prints "claimed <id> <id> ...", then blocks (holding its
                       pooled connection) until stdin closes: the test kills it with SIGKILL.
"""

from __future__ import annotations

import sys

import anyio

from server.config import Settings
from server.core.claims import queue
from server.core.models import Actor
from server.core.review import completion
from server.core.service import Core


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def drain(core: Core, actor: Actor) -> None:
    async with core.db.read() as conn:  # connect before the starting gun
        await conn.exec_driver_sql("SELECT 1")
    say("ready")
    if (await anyio.to_thread.run_sync(sys.stdin.readline)).strip() != "go":
        raise SystemExit("expected 'go' on stdin")
    claimed = 0
    while True:
        claim = await queue.claim_next(core, actor)
        if not claim.claimed:
            break
        assert claim.task_id is not None
        say(f"claimed {claim.task_id}")
        await completion.complete_task(core, actor, claim.task_id, success=True, summary=f"done by {actor.actor_id}")
        claimed += 1
    say(f"done {claimed}")


async def hold(core: Core, actor: Actor, count: int) -> None:
    task_ids: list[str] = []
    for _ in range(count):
        claim = await queue.claim_next(core, actor)
        if not claim.claimed:
            raise SystemExit(f"only {len(task_ids)} of {count} tasks were available")
        task_ids.append(str(claim.task_id))
    # The pool keeps the connection open while this blocks, as a live worker's would.
    say("claimed " + " ".join(task_ids))
    await anyio.to_thread.run_sync(sys.stdin.read)


async def main(argv: list[str]) -> None:
    mode, actor_id, *rest = argv
    core = Core.build(Settings(_env_file=None))
    actor = Actor(actor_id=actor_id, name=actor_id, session=actor_id)
    try:
        if mode == "drain":
            await drain(core, actor)
        elif mode == "hold":
            await hold(core, actor, int(rest[0]))
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    finally:
        await core.db.dispose()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:])
