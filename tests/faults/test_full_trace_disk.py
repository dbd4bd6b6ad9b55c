"""The trace store's disk fills up under working agents: reports wait, completions go on, nothing is lost.

The server's JCT_TRACE_ROOT is a real tmpfs of 384 KiB (tests/world.py), nearly filled by a file the test
places there. Agents report 8 KiB patches until it is full: those reports answer UNAVAILABLE (disk full),
record no artifact and leave no partial file, and the agents wait and report again. The rest of JCT works
meanwhile: an observer reads the queue between refused reports, and a completion, which reads the trace
store and writes only the run's small manifest there (going without it while the disk is full), goes
through (one agent holds its completion until the disk is full). The
log says so in a line or two, not two lines per refused report. Once the test deletes its file, reporting
works again and every task completes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from mcp import Client

from server.config import Settings
from server.core.models import parse_run_id
from tests.support.agents import LEGACY, SHORT_LEASES, Job, Tally, crowd, enqueue_work_in, run_all
from tests.support.books import Books
from tests.support.servers import serving
from tests.transports.conftest import call, server_env
from tests.world import fill, small_disk

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TASKS = 24
AGENTS = 4
PATCH_BYTES = 8 * 1024
ROOM = 64 * 1024  # a few patches' worth
READS = 10
# A first line, and one when reports work again (two more if the disk stays full past the 10 s interval).
MAX_DISK_FULL_LINES = 4
LIMIT = 90
DISK_FULL = "JCT's disk is full; this call was not carried out."


async def test_a_full_trace_disk_holds_reports_back_until_there_is_room_and_loses_nothing(
    database_url: str, tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    task_ids = await enqueue_work_in(make_settings(), TASKS)
    tally = Tally()
    full = tally.when(lambda told: any(r.error["message"] == DISK_FULL for r in told.refusals))
    held: list[Job] = []

    async def complete_once_the_disk_is_full(job: Job) -> None:
        held.append(job)
        await full.wait()

    # The tally keys runs by their bare id (a claim's run_id may carry a key).
    finisher_done = tally.when(lambda told: bool(held) and parse_run_id(held[0].run_id)[0] in told.completions)

    # Room for every patch and every run's manifest (a page each) once the test's file is gone.
    with small_disk(tmp_path / "disk", "384k") as disk, anyio.fail_after(LIMIT):
        traces = disk / "traces"
        filler = fill(disk, leave=ROOM)
        env = server_env(database_url, tmp_path, trace_root=traces, **SHORT_LEASES)
        async with serving(env, tmp_path) as (server,):
            agents = crowd(AGENTS, [server.mcp_url], tally, patch_bytes=PATCH_BYTES)
            finisher = agents[0]
            finisher.before_complete = complete_once_the_disk_is_full
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_all, agents)
                await full.wait()
                # Refused reports recorded nothing. (Other agents' writes may be in flight: their temp files are
                # passed over here, and the check once the server has stopped finds any left behind.)
                assert (await Books.read(database_url)).store_differs(traces, writing=True) == []
                # Reading the queue works between refused reports, and the completion held back goes through.
                async with Client(server.mcp_url, mode=LEGACY) as observer:
                    for _ in range(READS):
                        refused_so_far = len(tally.refusals)

                        def more_refused(told: Tally, n: int = refused_so_far) -> bool:
                            return len(told.refusals) > n

                        await tally.when(more_refused).wait()
                        await call(observer, "jct_queue_stats")
                await finisher_done.wait()
                finisher.before_complete = None
                assert (await Books.read(database_url)).store_differs(traces, writing=True) == []
                reported_while_full = len(tally.artifacts)
                filler.unlink()
            log = server.log()
        books = await Books.read(database_url)
        assert books.store_differs(traces) == []

    refused = [r for r in tally.refusals if r.code == "UNAVAILABLE"]
    assert refused, "the disk filled up"
    for refusal in refused:
        assert refusal.tool == "jct_report_artifact", refusal
        assert refusal.error["message"] == DISK_FULL, refusal
        assert refusal.error["retry_after_seconds"] == 60, refusal
    assert tally.codes() <= {"UNAVAILABLE", "LEASE_EXPIRED"}, tally.refusals
    assert len(tally.artifacts) > reported_while_full, "reports worked again once there was room"

    assert sorted(books.tasks) == sorted(task_ids)
    assert sorted(books.artifacts) == sorted(tally.artifacts), "every artifact recorded was acknowledged"
    assert books.problems(tally) == {}
    assert "Traceback" not in log, log
    disk_full_lines = [line for line in log.splitlines() if "disk full" in line]
    assert 1 <= len(disk_full_lines) <= MAX_DISK_FULL_LINES, log
