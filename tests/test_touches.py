"""Touches: when two path globs can name the same file (server/touches.py).

The rule is held against a brute-force reference: a pattern covers the paths it matches and everything under
them, and two overlap when one path of a small universe is covered by both. Overlap must never miss a shared
path (a conflict let through would let two tasks edit one file at once); against a literal it must be exact.
"""

from __future__ import annotations

import itertools
from fnmatch import fnmatchcase

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.touches import conflicts, normalise, overlaps

# --- examples -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("src/api", "src/api"),
        ("src/api", "src/api/users.py"),  # a directory and a file in it
        ("src", "src/api/users/model.py"),
        ("src/*.py", "src/app.py"),
        ("src/**", "src"),  # ** takes no segment too
        ("**", "README.md"),
        ("**/*.md", "docs/guide/intro.md"),
        ("src/**/test_*.py", "src"),  # a directory holding what the glob names
        ("src/*", "src/api/users.py"),  # src/api is matched, and users.py is under it
        ("src/[ab]pi", "src/api/x"),
        ("src/?pi/*.py", "src/api/users.py"),
        ("src/api/*.py", "src/api/*.md"),  # two globs with one beginning: conservative
        ("src/**", "src/*/x"),
        ("src/a*", "src/api/**"),
    ],
)
def test_these_overlap(a: str, b: str) -> None:
    assert overlaps(a, b)
    assert overlaps(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("src/api", "src/apiv2"),  # a prefix of the text, not of the path
        ("src/api/users.py", "src/api/orders.py"),
        ("src/api", "docs"),
        ("src/*.py", "docs/app.py"),
        ("src/*.py", "src/app.md"),
        ("src/*/x", "src/a/y"),
        ("docs/**", "src/a*"),
        ("src/a*", "src/b*"),
        ("src/api/**", "src/web/*.py"),
        ("src/api/*", "src/ab*"),
        ("src/[ab]pi", "src/cpi"),
    ],
)
def test_these_do_not(a: str, b: str) -> None:
    assert not overlaps(a, b)
    assert not overlaps(b, a)


def test_conflicts_names_every_overlapping_pair() -> None:
    mine = ["src/api/**", "docs/api.md", "README.md"]
    theirs = ["src/api/users.py", "docs", "Makefile"]
    assert conflicts(mine, theirs) == [("src/api/**", "src/api/users.py"), ("docs/api.md", "docs")]
    assert conflicts(["Makefile"], ["src/**"]) == []


@pytest.mark.parametrize(
    ("given_", "stored"),
    [
        ("./src/api/", "src/api"),
        (" src//api/./users.py ", "src/api/users.py"),
        ("src/**/", "src/**"),
        ("./", ""),
    ],
)
def test_normalise_drops_what_names_nothing(given_: str, stored: str) -> None:
    assert normalise(given_) == stored


# --- the reference ----------------------------------------------------------------------------

# Patterns over a two-letter alphabet: every segment glob of at most two tokens is matched by a segment of
# at most two letters, so the universe below holds a witness whenever one exists within its depth.
LETTERS = "ab"
SEGMENTS = ["".join(p) for n in (1, 2) for p in itertools.product(LETTERS, repeat=n)]
TOKENS = ["a", "b", "*", "?", "[ab]", "[!a]"]


def _matches(pattern: tuple[str, ...], path: tuple[str, ...]) -> bool:
    if not pattern:
        return not path
    if pattern[0] == "**":
        return _matches(pattern[1:], path) or (bool(path) and _matches(pattern, path[1:]))
    return bool(path) and fnmatchcase(path[0], pattern[0]) and _matches(pattern[1:], path[1:])


def covers(pattern: str, path: tuple[str, ...]) -> bool:
    """The pattern matches the path or a directory above it."""
    segments = tuple(pattern.split("/"))
    return any(_matches(segments, path[:k]) for k in range(1, len(path) + 1))


def universe(depth: int) -> list[tuple[str, ...]]:
    return [p for n in range(1, depth + 1) for p in itertools.product(SEGMENTS, repeat=n)]


UNIVERSE = universe(4)

segment_glob = st.lists(st.sampled_from(TOKENS), min_size=1, max_size=2).map("".join)
segment = st.one_of(st.sampled_from(SEGMENTS), segment_glob, st.just("**"))
pattern = st.lists(segment, min_size=1, max_size=3).map("/".join)
literal = st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=3).map("/".join)


@settings(max_examples=300, deadline=None)
@given(pattern, pattern)
def test_overlap_never_misses_a_path_both_cover(a: str, b: str) -> None:
    shared = next((path for path in UNIVERSE if covers(a, path) and covers(b, path)), None)
    if shared is not None:
        assert overlaps(a, b), f"{a} and {b} both cover {'/'.join(shared)}"
    assert overlaps(a, b) == overlaps(b, a)


@settings(max_examples=300, deadline=None)
@given(literal, pattern)
def test_overlap_with_a_literal_is_exact(path: str, glob: str) -> None:
    """A literal covers itself and what is under it: a witness is the literal or one of its descendants."""
    base = tuple(path.split("/"))
    witnesses = [base] + [base + rest for rest in universe(3)]
    expected = any(covers(glob, witness) for witness in witnesses)
    assert overlaps(path, glob) == expected
    assert overlaps(glob, path) == expected


@settings(max_examples=200, deadline=None)
@given(pattern)
def test_a_pattern_overlaps_itself(a: str) -> None:
    assert overlaps(a, a)
