"""The claim: one atomic statement per dialect (DESIGN section 3).

PostgreSQL does the whole claim in one CTE: pick (or check) the task, flip it to
running, create the run that holds the lease, move the issue, and write both audit
rows. SQLite cannot put DML in a CTE, so it runs the same conditional
UPDATE ... RETURNING and the inserts inside one BEGIN IMMEDIATE transaction, which
holds the database's single write lock from the first statement to the commit.

`claim` is the one way in, for both: the dialect fork is there and nowhere else.

Touches (DESIGN section 16). A claim never hands out a task whose touches overlap those of a task that holds
its own on the same repository (server/db/holds.py says who holds). A task without touches is never held back
and holds nothing, so a claim first tries the task in line as before, in one statement, taking it only if it
has no touches; only when that task has touches does the claim walk on, in the same transaction:

- SQLite: BEGIN IMMEDIATE admits one claimer at a time, so the walk reads the queued tasks in claim order and
  takes the first with no touches or none that overlap its repository's holders, read in the same transaction.
- PostgreSQL: claim-next reads the queued tasks in claim order without locking them; for one with touches it
  takes the repository's transaction-scoped advisory lock with pg_try_advisory_xact_lock (never waiting, so
  claims cannot deadlock on it: a lock held elsewhere skips the repository's tasks, as SKIP LOCKED skips rows),
  then reads the repository's holders and, if none overlaps, claims the task (its row FOR UPDATE SKIP LOCKED,
  its status checked again) before the commit releases the lock. Claim-by-id holds one task's row and may
  wait for its repository's lock. Why this holds at READ COMMITTED: a task only starts holding its touches
  by being claimed (it then stays a holder until it ends or its work is merged; touches never change), and
  every claim of a task with touches makes that change under its repository's lock. The lock is released
  only when its transaction ends, after the commit is visible to every new snapshot; the next holder reads the
  holders in a statement after the one that took the lock, so with a snapshot that sees every claim made
  under the lock before. Two overlapping tasks of one repository can therefore not both pass the check. A
  holder that ends meanwhile may still be seen: the task waits one claim longer, never the other way round.

The walk costs what it passes over: each queued task held back ahead of the one taken is read once, and each
repository's holders once per claim (through ix_tasks_holding_touches, as many rows as there are holders).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from server.db.claims.postgres import claim_postgres
from server.db.claims.request import DECISIONS_SHOWN as DECISIONS_SHOWN
from server.db.claims.request import WALK_BATCH as WALK_BATCH
from server.db.claims.request import ClaimCapReached as ClaimCapReached
from server.db.claims.request import Claimed as Claimed
from server.db.claims.request import ClaimRequest as ClaimRequest
from server.db.claims.request import held_by_budget as held_by_budget
from server.db.claims.sqlite import claim_on_sqlite_thread
from server.db.engine import Database


async def claim(db: Database, req: ClaimRequest) -> Claimed | None:
    """The claim, whichever the database, or None when nothing was claimable. Raises ClaimCapReached, having
    claimed nothing, when the cap of `req.max_claims` is met, and holds.ClaimConflict when the task claimed by
    id overlaps a holder's touches.

    The one dialect fork of the claim. PostgreSQL: one statement in an ordinary transaction (a few more past a
    task with touches, in the same transaction: see the package docstring; postgres.py). SQLite (sqlite.py): the
    whole BEGIN IMMEDIATE transaction as ONE call on aiosqlite's thread, which pays against the same steps
    through SQLAlchemy (several thread hops per statement): the figures are in bench/README.md."""
    row: dict[str, Any] | None
    if db.is_sqlite:
        row = await db.write_in_one_call(partial(claim_on_sqlite_thread, req=req))
    else:
        async with db.write() as conn:
            row = await claim_postgres(conn, req)
    return Claimed.of_flat(row) if row is not None else None
