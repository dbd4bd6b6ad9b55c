"""Touches (DESIGN section 16): the files a task will edit, as path globs relative to the repository root, and
whether two of them can name the same file.

A pattern is `/`-separated segments. In a segment, `*` is any run of characters and `?` one character (never a
`/`), `[...]` a character class; a segment that is exactly `**` is any number of segments, none included. A
pattern covers every path it matches **and everything under them**: `src/api` is that file or that directory
and its contents, `src/*` everything in `src`.

Two patterns overlap when some path is covered by both. The answer is exact where it is cheap (a literal
against a literal or a glob) and conservative otherwise: two globs overlap unless their literal beginnings (the
text before the first wildcard) already tell them apart, so `src/api/*.py` and `src/api/*.md` overlap, `src/a*`
and `docs/**` do not. Conservative means a claim may wait that need not; never that two tasks editing one file
run at once.

Pure functions, no I/O: the claim (server/db/claims/) and enqueue's check (server/core/briefings/intake.py)
both use them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache

WILDCARDS = frozenset("*?[")
ANY_DEPTH = "**"


def normalise(pattern: str) -> str:
    """The pattern as stored: no surrounding blanks, no `./`, no empty or `.` segments (a trailing `/` included)."""
    return "/".join(segment for segment in pattern.strip().split("/") if segment not in ("", "."))


def is_glob(pattern: str) -> bool:
    return any(char in WILDCARDS for char in pattern)


@dataclass(frozen=True)
class _Pattern:
    segments: tuple[str, ...]
    glob: bool
    # The literal segments before the first one with a wildcard, and that segment's text before its first
    # wildcard ('' for `**`): every path a glob covers begins with them.
    fixed: tuple[str, ...]
    start: str


@lru_cache(maxsize=4096)
def _parse(pattern: str) -> _Pattern:
    segments = tuple(normalise(pattern).split("/"))
    wild = next((n for n, segment in enumerate(segments) if is_glob(segment)), len(segments))
    start = ""
    if wild < len(segments) and segments[wild] != ANY_DEPTH:
        first = segments[wild]
        start = first[: min(first.index(char) for char in WILDCARDS if char in first)]
    return _Pattern(segments, wild < len(segments), segments[:wild], start)


def overlaps(a: str, b: str) -> bool:
    """Whether some path is covered by both patterns (exact unless both are globs: see the module's docstring)."""
    pa, pb = _parse(a), _parse(b)
    if not pa.glob and not pb.glob:
        return _within(pa.segments, pb.segments) or _within(pb.segments, pa.segments)
    if not pa.glob:
        return _reaches(pb.segments, pa.segments)
    if not pb.glob:
        return _reaches(pa.segments, pb.segments)
    return _beginnings_meet(pa, pb)


def conflicts(mine: Sequence[str], theirs: Sequence[str]) -> list[tuple[str, str]]:
    """Every pair (one of mine, one of theirs) that overlaps."""
    return [(m, t) for m in mine for t in theirs if overlaps(m, t)]


def _within(inner: tuple[str, ...], outer: tuple[str, ...]) -> bool:
    """`inner` is `outer` or a path under it."""
    return inner[: len(outer)] == outer


def _reaches(glob: tuple[str, ...], path: tuple[str, ...]) -> bool:
    """Whether the glob matches `path`, a directory above it, or a path under it: the segments of both walked
    together, `**` taking none or one more at each step. Once the glob is used up it matched a path at or above
    `path`; once `path` is used up, what is left of the glob matches something under it."""
    seen: set[tuple[int, int]] = set()
    pending = [(0, 0)]
    while pending:
        state = pending.pop()
        if state in seen:
            continue
        seen.add(state)
        g, p = state
        if g == len(glob) or p == len(path):
            return True
        if glob[g] == ANY_DEPTH:
            pending += [(g + 1, p), (g, p + 1)]
        elif fnmatchcase(path[p], glob[g]):
            pending.append((g + 1, p + 1))
    return False


def _beginnings_meet(a: _Pattern, b: _Pattern) -> bool:
    """Two globs: whether the literal beginnings of the paths they cover can agree (conservative)."""
    if len(a.fixed) > len(b.fixed):
        a, b = b, a
    if b.fixed[: len(a.fixed)] != a.fixed:
        return False
    if len(a.fixed) == len(b.fixed):
        return a.start.startswith(b.start) or b.start.startswith(a.start)
    # b's next segment is literal; a's first wild segment must match it, so it begins with a's start.
    return b.fixed[len(a.fixed)].startswith(a.start)
