"""PostgreSQL refusing connections for a few seconds while agents work: they wait it out and finish.

The outage is real and the test's own: its database refuses new connections and its sessions are cut
(tests/world.py), mid-run, once a third of the tasks are done. Every call the agents make meanwhile must
answer UNAVAILABLE with retry_after_seconds (never INTERNAL_ERROR, never a hang); they wait and call
again, and once the database is back everything completes. The lease outlasts the outage, so no claim
is lost to it; a claim whose COMMIT the outage cut (told "cannot tell whether it was recorded") runs out
and is claimed again. Then the database is counted, and the server's log holds a few lines about the
outage and no traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from server.config import Settings
from tests.support.agents import Tally, crowd, enqueue_work_in, run_all
from tests.support.books import Books
from tests.support.servers import serving
from tests.transports.conftest import server_env
from tests.world import refusing_connections

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TASKS = 60
AGENTS = 8
OUTAGE_SECONDS = 3.0
LIMIT = 90
# Longer than the outage: an agent that waits it out still holds its claim.
SETTINGS = {"lease_seconds": 10, "sweep_interval_seconds": 0.5}
# Per part of the server (tool calls, change feed, lease sweeper): a first line and a closing one.
MAX_OUTAGE_LINES = 8


@pytest.mark.dialects("postgresql")
async def test_agents_work_through_a_database_outage_and_finish_every_task(
    database_url: str, tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    task_ids = await enqueue_work_in(make_settings(), TASKS)
    tally = Tally()

    with anyio.fail_after(LIMIT):
        async with serving(server_env(database_url, tmp_path, **SETTINGS), tmp_path) as (server,):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_all, crowd(AGENTS, [server.mcp_url], tally))
                await tally.completed(TASKS // 3).wait()
                async with refusing_connections(database_url):
                    await anyio.sleep(OUTAGE_SECONDS)  # the outage lasts this long; the agents keep calling
                refused_during_outage = len(tally.refusals)
            log = server.log()

    assert refused_during_outage > AGENTS, "the agents met the outage"
    for refusal in tally.refusals:
        assert refusal.code == "UNAVAILABLE", refusal
        assert refusal.error["retry_after_seconds"] > 0, refusal
    assert tally.reconnections == [], "the server stayed up: no connection broke"

    books = await Books.read(database_url)
    assert sorted(books.tasks) == sorted(task_ids)
    assert books.problems(tally) == {}
    assert books.store_differs(tmp_path / "traces") == [], "a refused report left no file behind"

    assert "Traceback" not in log, log
    outage_lines = [line for line in log.splitlines() if "database unreachable" in line]
    assert 1 <= len(outage_lines) <= MAX_OUTAGE_LINES, log
