"""Touches under real concurrency (DESIGN section 16): twenty SDK agents drain a queue of tasks whose touches
overlap or not, through real `jct serve` processes (two sharing PostgreSQL; one on SQLite) over streamable HTTP.

Counted from the database afterwards: no two tasks of one repository whose touches overlap ever ran at once (the
audit log orders each claim after the end it waited for), the tasks that overlap nothing ran side by side, and
the books balance (no double claim, no lost task, every acknowledged write recorded).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from server.config import Settings
from server.core.briefings import intake
from server.core.service import Core
from tests.support.agents import ADMIN, Tally, crowd, run_all
from tests.support.books import Books
from tests.support.servers import serving
from tests.transports.conftest import server_env

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

AGENTS = 20
LIMIT = 240

# (repository, touches) of each task: a group that all overlap one another, a group that overlaps nothing but
# `docs/**`, the same paths on another repository (no conflict with the first), and tasks that declare none.
SHARED = ["src/shared", "src/shared/util.py", "src/shared/**/*.py", "src/sha*"]
WORK = (
    [("myorg/api", [pattern]) for pattern in SHARED * 2]
    + [("myorg/api", [f"src/pkg{n}/**", f"docs/pkg{n}.md"]) for n in range(16)]
    + [("myorg/api", ["docs/**"])] * 2
    + [("myorg/web", ["src/shared"])] * 4
    + [("myorg/api", [])] * 4
)


async def enqueue(settings: Settings) -> None:
    core = Core.build(settings)
    try:
        for n, (repo, touches) in enumerate(WORK):
            await intake.enqueue_task(
                core,
                ADMIN,
                objective=f"Change module {n}",
                operation="code_change",
                target_repo=repo,
                acceptance_criteria=["The module is changed"],
                priority=f"P{n % 4}",
                touches=touches,
            )
    finally:
        await core.db.dispose()


def most_at_once(holds: list[tuple[str, int, float]]) -> int:
    """The most holds of touches that were open at one point of the audit log."""
    edges = sorted([(start, 1) for _task, start, _end in holds] + [(end, -1) for _task, _start, end in holds])
    open_now = most = 0
    for _at, step in edges:
        open_now += step
        most = max(most, open_now)
    return most


async def test_agents_never_run_two_tasks_whose_touches_overlap_at_once(
    dialect: str, database_url: str, tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    await enqueue(make_settings())
    tally = Tally()
    processes = 2 if dialect == "postgresql" else 1
    with anyio.fail_after(LIMIT):
        async with serving(server_env(database_url, tmp_path), tmp_path, count=processes) as servers:
            await run_all(crowd(AGENTS, [server.mcp_url for server in servers], tally, work_seconds=0.05))

    books = await Books.read(database_url)
    assert len(books.tasks) == len(WORK)
    assert books.problems(tally) == {}
    assert books.overlapping_holds() == []
    assert len(books.holds()) == len(WORK) - 4  # every task with touches ran once
    assert most_at_once(books.holds()) > 2, "the tasks that overlap nothing never ran side by side"
    assert tally.codes() == set()  # claim-next passes over a held-back task: it never refuses
