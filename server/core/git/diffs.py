"""What changed between two commits, or in a working tree: `git diff --name-status` and `--numstat` read
together, and the untracked files (what verified.py and history.py report as files_changed)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from server.core.git.gitcli import DEFAULT_MAX_BYTES, Repo, fields, git


@dataclass(frozen=True)
class FileChange:
    path: str
    # A added, M modified, D deleted, R renamed (old_path set), C copied, T type changed, U unmerged
    status: str
    added: int | None  # None for a binary file
    removed: int | None
    old_path: str | None = None

    def as_dict(self) -> dict[str, object]:
        row: dict[str, object] = {
            "path": self.path,
            "status": self.status,
            "added": self.added,
            "removed": self.removed,
        }
        if self.old_path is not None:
            row["old_path"] = self.old_path
        return row


_DIFF_FLAGS = ("--no-ext-diff", "--no-textconv", "--no-color", "-M")


async def changed_files(
    repo: Repo,
    base: str,
    head: str | None,
    *,
    within: float,
    max_bytes: int = DEFAULT_MAX_BYTES,
    paths: Sequence[str] = (),
) -> tuple[list[FileChange], bool]:
    """Files changed from `base` to `head` (to the working tree when head is None), under `paths` when given, and
    whether the list was cut."""
    revs = [base] if head is None else [base, head]
    status_out = await git(
        repo,
        "diff",
        *_DIFF_FLAGS,
        "--name-status",
        "-z",
        "--end-of-options",
        *revs,
        "--",
        *paths,
        within=within,
        max_bytes=max_bytes,
    )
    numstat_out = await git(
        repo,
        "diff",
        *_DIFF_FLAGS,
        "--numstat",
        "-z",
        "--end-of-options",
        *revs,
        "--",
        *paths,
        within=within,
        max_bytes=max_bytes,
    )
    counts = _parse_numstat(numstat_out.stdout)
    changes = []
    for status, path, old in _parse_name_status(status_out.stdout):
        added, removed = counts.get(path, (None, None))
        changes.append(FileChange(path, status, added, removed, old))
    return changes, status_out.truncated or numstat_out.truncated


def _parse_name_status(raw: bytes) -> list[tuple[str, str, str | None]]:
    parts = fields(raw)
    out: list[tuple[str, str, str | None]] = []
    i = 0
    while i < len(parts) and parts[i]:
        code = parts[i]
        letter = code[:1]
        if letter in ("R", "C") and i + 2 < len(parts):
            out.append((letter, parts[i + 2], parts[i + 1]))
            i += 3
        elif i + 1 < len(parts):
            out.append((letter, parts[i + 1], None))
            i += 2
        else:
            break
    return out


def _parse_numstat(raw: bytes) -> dict[str, tuple[int | None, int | None]]:
    parts = fields(raw)
    counts: dict[str, tuple[int | None, int | None]] = {}
    i = 0
    while i < len(parts) and parts[i]:
        columns = parts[i].split("\t")
        if len(columns) < 3:
            break
        added = int(columns[0]) if columns[0].isdigit() else None
        removed = int(columns[1]) if columns[1].isdigit() else None
        if columns[2]:
            counts[columns[2]] = (added, removed)
            i += 1
        elif i + 2 < len(parts):  # a rename: old and new path follow as their own fields
            counts[parts[i + 2]] = (added, removed)
            i += 3
        else:
            break
    return counts


async def untracked_files(repo: Repo, *, within: float, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[list[str], bool]:
    out = await git(repo, "ls-files", "--others", "--exclude-standard", "-z", within=within, max_bytes=max_bytes)
    names = [f for f in fields(out.stdout) if f]
    if out.truncated and names:
        names.pop()  # the last name may be cut
    return names, out.truncated
