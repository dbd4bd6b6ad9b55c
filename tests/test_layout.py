"""The shape of the code a newcomer opens: no module of server/ past 450 lines.

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
