"""The shape of the code a newcomer opens: no module of server/ past 450 lines.

A module that grows past that is split by what its parts do (as db/claims/ and db/changes/ are, one file per
dialect beside what both share), not by cutting it anywhere. The schema is the one exception: every table in
one declarative file reads better than tables spread over several, and migrations are history.
"""

from __future__ import annotations

from pathlib import Path

SERVER = Path(__file__).resolve().parent.parent / "server"
MOST_LINES = 450
WHOLE = {"db/tables.py"}  # the schema: every table and index in one place


def test_no_server_module_is_over_450_lines() -> None:
    over = {}
    for path in sorted(SERVER.rglob("*.py")):
        name = path.relative_to(SERVER).as_posix()
        if name.startswith("db/migrations/") or name in WHOLE:
            continue
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MOST_LINES:
            over[name] = lines
    assert not over, f"split these by what their parts do: {over}"


def test_the_exceptions_are_still_needed() -> None:
    # An exception for a file that moved, went or shrank would hide the next one of that name or size.
    for name in WHOLE:
        assert len((SERVER / name).read_text(encoding="utf-8").splitlines()) > MOST_LINES, name
