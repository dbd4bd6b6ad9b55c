"""What the prover reads in a run's artifacts: the test-runner summaries in a log (pytest, jest, cargo, go)
and the files a unified diff touches. Pure functions over text."""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_COUNT = re.compile(r"(\d+) ([a-z]+)")
_ITEMS = r"\d+ [a-z]+(?:, \d+ [a-z]+)*"
# Anchored to the whole line so prose such as "2 failed attempts" in a log is never read as a summary.
_PYTEST = re.compile(rf"^=*\s*({_ITEMS})(?: in [\d.]+m?s(?: \([\d:]+\))?)?\s*=*$")
_JEST = re.compile(rf"^Tests:\s+({_ITEMS})\s*$")
_CARGO = re.compile(r"^test result: \w+\. (\d+) passed; (\d+) failed;")
_GO_OK = re.compile(r"^ok\s+\S+\t")
_GO_FAIL_PKG = re.compile(r"^FAIL\t\S+")
_GO_FAIL_TEST = re.compile(r"^--- FAIL: ")
_FAILURE_WORDS = frozenset({"failed", "error", "errors"})

_DIFF_GIT = re.compile(r'^diff --git "?a/(.+?)"? "?b/(.+?)"?$')
_OLD_FILE = re.compile(r'^--- "?(?:a/)?(.+?)"?(?:\t.*)?$')
_NEW_FILE = re.compile(r'^\+\+\+ "?(?:b/)?(.+?)"?(?:\t.*)?$')


def parse_test_summary(text: str) -> tuple[int, int] | None:
    """Sum the (passed, failed) counts of every test-runner summary in a log, or None if there is none."""
    passed = failed = 0
    found = False
    go_pending = 0  # go prints "--- FAIL: TestX" lines before its package's "FAIL\tpkg" line
    for raw in text.splitlines():
        line = _ANSI.sub("", raw).rstrip()
        counts = _line_counts(line.strip())
        if counts is not None:
            passed, failed, found = passed + counts[0], failed + counts[1], True
        elif _GO_OK.match(line):
            passed, found = passed + 1, True
        elif _GO_FAIL_TEST.match(line):
            go_pending += 1
        elif _GO_FAIL_PKG.match(line):
            failed, go_pending, found = failed + max(go_pending, 1), 0, True
    if go_pending:
        failed, found = failed + go_pending, True
    return (passed, failed) if found else None


def _line_counts(line: str) -> tuple[int, int] | None:
    """Counts from one line if it is a cargo, jest or pytest/plain summary; each line is read by one format only."""
    if cargo := _CARGO.match(line):
        return int(cargo.group(1)), int(cargo.group(2))
    match = _JEST.match(line) or _PYTEST.match(line)
    if match is None:
        return None
    counts = [(int(n), word) for n, word in _COUNT.findall(match.group(1))]
    if not any(word == "passed" or word in _FAILURE_WORDS for _, word in counts):
        return None
    return sum(n for n, w in counts if w == "passed"), sum(n for n, w in counts if w in _FAILURE_WORDS)


def diff_files(patch: str) -> tuple[str, ...]:
    """Files a unified diff touches, in order of first mention, without duplicates or /dev/null."""
    files: list[str] = []
    lines = patch.splitlines()
    for i, line in enumerate(lines):
        if git := _DIFF_GIT.match(line):
            files.extend(git.groups())
        # A "--- " line is a header only when "+++ " follows; inside a hunk it is a removed "-- ..." line.
        elif (old := _OLD_FILE.match(line)) and i + 1 < len(lines) and (new := _NEW_FILE.match(lines[i + 1])):
            files.extend((old.group(1), new.group(1)))
    return tuple(f for f in dict.fromkeys(files) if f != "/dev/null")
