"""Verified changes (DESIGN section 13): for a task whose repository JCT can read, JCT reads the change itself.

- At claim: `target_ref` resolved to a commit, recorded on the run as `base_commit`.
- At report: a `commit` artifact must name a commit of the repository that descends from `base_commit`
  (COMMIT_NOT_FOUND, NOT_A_DESCENDANT, REPO_NOT_AVAILABLE); the artifact keeps the full commit id.
- At completion: `files_changed` from `base_commit` to the last verified commit, plus, for a local working
  tree, what is not committed yet (the union); the prover's scope check reads that list, not a pasted diff.

All git work runs in subprocesses (server/core/git/gitcli.py); none of it inside a database transaction.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from server.core.git import diffs, gitcli
from server.core.git.repos import Place
from server.core.service import Core
from server.db.records import Run, Task
from server.errors import ErrorCode, JctError, invalid

log = logging.getLogger(__name__)

# files_changed keeps at most this many files (the rest is counted in `truncated`).
MAX_FILES = 2_000
# An untracked file's lines are counted only up to this size (a larger one counts as binary).
_COUNT_LINES_BYTES = 1024 * 1024


async def base_of(core: Core, run_id: str, target_repo: str, target_ref: str) -> tuple[Place | None, str | None]:
    """Where the task's repository is read and the commit target_ref names now, resolved at claim; (None, None)
    when the task is not verifiable, a None commit when the repository cannot be read now (the claim stands
    either way; the reason is logged). The caller records it on the run."""
    try:
        place = await core.repos.open(target_repo)
        if place is None:
            return None, None
        sha = await gitcli.resolve(place.repo, gitcli.check_ref(target_ref, "target_ref"), within=_within(core))
    except (JctError, gitcli.GitError) as exc:
        log.warning("no base commit for run %s of %s: %s", run_id, target_repo, exc)
        return None, None
    if sha is None:
        log.warning("no base commit for run %s: %s has no ref %r", run_id, target_repo, target_ref)
    return place, sha


async def verify_commit(core: Core, task: Task, run: Run, content: str | None) -> str | None:
    """The full id of the commit a `commit` artifact names, checked; None when the task is not verifiable."""
    place = await core.repos.open(task.target_repo)
    if place is None:
        return None
    if content is None:
        raise invalid(
            "A commit artifact of a verifiable task names its commit as content.",
            "Push your work (or commit it in the working tree), then report content='<commit id or branch>'.",
        )
    ref = gitcli.check_ref(content.strip(), "content")
    try:
        sha = await gitcli.resolve(place.repo, ref, within=_within(core))
        base = run.base_commit
        descends = sha is not None and (
            base is None or await gitcli.is_ancestor(place.repo, base, sha, within=_within(core))
        )
    except gitcli.GitError as exc:
        raise _unreadable(place, exc) from None
    if sha is None:
        raise JctError(
            ErrorCode.COMMIT_NOT_FOUND,
            f"Repository {place.name!r} has no commit {ref!r}.",
            "Push the commit (or the branch) to the repository first, then report it again.",
        )
    if not descends:
        raise JctError(
            ErrorCode.NOT_A_DESCENDANT,
            f"Commit {sha[:12]} does not descend from this run's base commit {str(base)[:12]} "
            f"({task.target_ref} when you claimed the task).",
            "Build your work on the base commit (rebase onto it), push, and report the new commit.",
        )
    return sha


@dataclass(frozen=True)
class Change:
    """What JCT read of a run's change: the place, the range, and whether the working tree counts."""

    place: Place
    base: str
    head: str | None
    working_tree: bool


async def change_of_run(core: Core, task: Task, run: Run, heads: Sequence[str]) -> Change | None:
    """The range a run's change spans: its base commit to the last verified commit it reported (to the working
    tree for a local tree). None when the task is not verifiable or nothing can be read."""
    base = run.base_commit
    if base is None:
        return None
    place = await core.repos.open(task.target_repo, max_age=None)
    if place is None:
        return None
    head = heads[-1] if heads else None
    if head is None and not place.local_tree:
        return None
    return Change(place, base, head, working_tree=place.local_tree)


async def files_changed(core: Core, change: Change) -> dict[str, Any]:
    """{files: [{path, status, added, removed, old_path}], base, head, working_tree, truncated}. For a local
    working tree, the committed change and what is not committed yet (untracked files included), as one list."""
    within = _within(core)
    try:
        if change.working_tree:
            # base -> the working tree covers the commits since base and the uncommitted edits to tracked files.
            files, cut = await diffs.changed_files(change.place.repo, change.base, None, within=within)
            known = {f.path for f in files}
            if change.head is not None:
                committed, cut_more = await diffs.changed_files(
                    change.place.repo, change.base, change.head, within=within
                )
                # A file changed in the reported commit and reverted since in the tree still counts.
                files += [f for f in committed if f.path not in known]
                cut = cut or cut_more
                known |= {f.path for f in committed}
            untracked, cut_untracked = await diffs.untracked_files(change.place.repo, within=within)
            new = [name for name in untracked if name not in known]
            files += await anyio.to_thread.run_sync(_count_new, change.place, new)
            cut = cut or cut_untracked
        else:
            files, cut = await diffs.changed_files(change.place.repo, change.base, change.head, within=within)
    except gitcli.GitError as exc:
        raise _unreadable(change.place, exc) from None
    rows = sorted((f.as_dict() for f in files), key=lambda row: str(row["path"]))
    return {
        "base": change.base,
        "head": change.head,
        "working_tree": change.working_tree,
        "files": rows[:MAX_FILES],
        "truncated": cut or len(rows) > MAX_FILES,
    }


def _count_new(place: Place, names: Sequence[str]) -> list[diffs.FileChange]:
    """Untracked files as additions; lines counted only in a regular file (never through a symlink)."""
    out = []
    for name in names[:MAX_FILES]:
        added: int | None = None
        path = place.repo.path / name
        try:
            st = os.lstat(path)
            if not os.path.islink(path) and os.path.isfile(path) and st.st_size <= _COUNT_LINES_BYTES:
                data = path.read_bytes()
                if b"\0" not in data[:8000]:
                    added = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
        except OSError:
            pass
        out.append(diffs.FileChange(name, "A", added, 0 if added is not None else None))
    return out


def _within(core: Core) -> float:
    return core.settings.git_timeout_seconds


def _unreadable(place: Place, exc: gitcli.GitError) -> JctError:
    return JctError(
        ErrorCode.REPO_NOT_AVAILABLE,
        f"JCT could not read repository {place.name!r}: {exc}.",
        "Retry in a moment; if it persists, check the repository at its configured location (JCT_REPOS).",
    )
