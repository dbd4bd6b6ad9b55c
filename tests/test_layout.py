"""The shape of the code a newcomer opens: no module of server/ past 450 lines, and no rule of core/ that
depends on the database it runs on.

A module that grows past that is split by what its parts do (as db/claims/ and db/changes/ are, one file per
dialect beside what both share; the schema's tables of the work in db/tables.py, which names every table, and
its bookkeeping in db/bookkeeping.py), not by cutting it anywhere. Migrations are history: not counted.
"""

from __future__ import annotations

from pathlib import Path

SERVER = Path(__file__).resolve().parent.parent / "server"
MOST_LINES = 450


def test_no_server_module_is_over_450_lines() -> None:
    over = {}
    for path in sorted(SERVER.rglob("*.py")):
        name = path.relative_to(SERVER).as_posix()
        if name.startswith("db/migrations/"):
            continue
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MOST_LINES:
            over[name] = lines
    assert not over, f"split these by what their parts do: {over}"


def test_core_never_asks_which_database_it_runs_on() -> None:
    """Every dialect fork is in db/ (db/claims/, db/changes/, the clock in db/engine.py): core/ calls one
    function per operation."""
    asking = {}
    for path in sorted((SERVER / "core").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        found = [word for word in ("is_sqlite", "dialect") if word in text]
        if found:
            asking[path.relative_to(SERVER).as_posix()] = found
    assert not asking, f"move the dialect fork into db/: {asking}"
