"""A change to a claimed task, behind the fence, in as few trips to the database as each dialect allows.

The service hands over a `Fence` (whose run must hold a live lease) and a `decide` function. Here
the fence is passed (renewing the lease and locking the run), the facts `decide` needs are read,
`decide` turns them into writes (audit rows among them), and the writes are made, all in one
transaction. `decide` runs off the event loop (it may read or write artifact files):

- SQLite (sqlite.py): the whole transaction is ONE call on aiosqlite's thread
  (Database.write_in_one_call), in plain sqlite3 (server/db/rawsqlite.py).
- PostgreSQL (postgres.py): the fence, then the facts, then `decide` in a worker thread, then every write in
  one statement (one data-modifying CTE per write).

What a change reads (`Facts`) and writes (`Write`) is writes.py. `apply` is the one way in, for both:
the dialect fork is there and nowhere else.

If the fence refuses, nothing is written and the result is None: the service works out why.
"""

from __future__ import annotations

from functools import partial

from server.db.changes import writes
from server.db.changes.postgres import change_postgres
from server.db.changes.sqlite import change_sqlite
from server.db.changes.writes import *  # noqa: F403 - what a change reads and writes, as `changes.X`
from server.db.changes.writes import Changed, Decide, R
from server.db.engine import Database
from server.db.leases import Fence

__all__ = [*writes.__all__, "apply"]


async def apply(
    db: Database,
    fence: Fence,
    decide: Decide[R],
    *,
    completion: bool = False,
    durable: bool = True,
    blocking: bool = True,
) -> Changed[R] | None:
    """Pass the fence and make `decide`'s writes in one transaction; None if the fence refused (nothing was
    written then). `completion`: `decide` is also given the task, its criteria and the run's artifacts.
    `durable=False`: writes that may be lost without harm (Database.write); on PostgreSQL the fence's own
    statement turns the WAL flush off for the transaction, a round trip fewer than a SET LOCAL.
    `blocking=False`: `decide` touches no file, so PostgreSQL runs it on the event loop, without a hop to a
    worker thread and back (SQLite runs it on its driver's thread either way).

    The one dialect fork of a fenced change. SQLite: the whole transaction as ONE call on aiosqlite's
    thread, which pays against the same steps through SQLAlchemy (several thread hops per statement): the
    figures are in bench/README.md. PostgreSQL: three round trips (fence with facts, writes, commit)."""
    if completion and not durable:
        raise ValueError("a completion is always durable: its outcome is answered to the agent and never redone")
    if db.is_sqlite:
        return await db.write_in_one_call(partial(change_sqlite, fence=fence, decide=decide, completion=completion))
    async with db.write() as conn:
        return await change_postgres(conn, fence, decide, completion=completion, durable=durable, blocking=blocking)
