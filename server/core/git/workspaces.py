"""Workspaces (DESIGN section 16): a branch per run at its base commit and, where JCT runs beside the agent, a
linked git worktree on it; what the agent left uncommitted, committed for it; the worktrees the sweeper removes.

Paths: `<JCT_WORKTREES_DIR>/<repo-slug>-<8 hex digits of the repository's path>/<run id>` (`worktree_path`), so two
repositories of one name, or two server processes, never share a directory.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from server.core.git import gitcli
from server.errors import invalid

_SLUG = re.compile(r"[^A-Za-z0-9._-]+")
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


def branch_name(run_id: str) -> str:
    """The run's branch: `jct/run-<run_id>`."""
    return gitcli.check_branch(f"jct/run-{_run_id(run_id)}", "run_id")


def _run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise invalid(f"run id {run_id!r} is not a plain id.", "Pass the run's id (letters, digits, '-', '_').")
    return run_id


def _real(path: Path) -> Path:
    """The path with symbolic links resolved (a few lstat calls: too small to move to a thread)."""
    return Path(os.path.realpath(path))


def _absolute(path: Path) -> Path:
    return Path(os.path.abspath(path))


def _repo_dir(root: Path, repo_path: Path) -> Path:
    real = _real(repo_path)
    name = real.name.removesuffix(".git") or "repo"
    slug = _SLUG.sub("-", name).strip("-.")[:40] or "repo"
    return root / f"{slug}-{hashlib.sha256(str(real).encode()).hexdigest()[:8]}"


def worktree_path(root: Path, repo_path: Path, run_id: str) -> Path:
    """Where the run's worktree of the repository at `repo_path` goes, under `root` (JCT_WORKTREES_DIR)."""
    return _repo_dir(root, repo_path) / _run_id(run_id)


async def create(repo: gitcli.Repo, *, branch: str, base: str, path: Path | None, within: float) -> None:
    """Create `branch` at `base` and, when `path` is given, a linked worktree at `path` on it (its parent
    directories too). A branch of that name that exists at another commit is an error (nothing is forced); one
    at `base`, with its worktree at `path`, is what a retried claim finds: fine."""
    name = gitcli.check_branch(branch)
    ref = f"refs/heads/{name}"
    clock = gitcli.Clock(within)
    commit = await gitcli.resolve(repo, gitcli.check_ref(base, "base"), within=clock.left())
    if commit is None:
        raise gitcli.GitError(f"no commit {base!r} to start branch {name} from")
    existing = await gitcli.resolve(repo, ref, within=clock.left())
    if existing is None:
        try:
            await gitcli.write_refs(repo, "branch", "--no-track", "--end-of-options", name, commit, within=clock.left())
        except gitcli.GitTimeout:
            raise
        except gitcli.GitError:
            existing = await gitcli.resolve(repo, ref, within=clock.left())
            if existing is None:
                raise
    if existing is not None and existing != commit:
        raise gitcli.GitError(
            f"branch {name} exists at {existing[:12]}, not at {commit[:12]}: delete it or pick another name"
        )
    if path is None:
        return
    path = _absolute(path)
    for tree in await worktrees(repo, within=clock.left()):
        if _real(tree.path) != _real(path):
            continue
        if tree.branch == ref and not tree.prunable:
            return
        if not tree.prunable:
            raise gitcli.GitError(f"{path} is a worktree of {tree.branch or 'a detached HEAD'}, not of {name}")
        await worktree(repo, "prune", within=clock.left(), neutralised=[])
    await anyio.Path(path.parent).mkdir(parents=True, exist_ok=True)
    await worktree(
        repo,
        "add",
        "--quiet",
        "--end-of-options",
        str(path),
        name,
        within=clock.left(),
        neutralised=await gitcli.neutral(repo, within=clock.left()),
        env=gitcli.write_env(),
    )


async def remove(repo: gitcli.Repo, path: Path, *, within: float) -> None:
    """Remove the linked worktree at `path` (`git worktree remove --force`, whatever it holds), its directory
    if git left it (one git no longer knows, after a crash), then git's records of worktrees that are gone.
    Nothing there: nothing to do. Refuses the repository's own working tree and any directory holding a
    repository of its own (a `.git` directory)."""
    path = _absolute(path)
    if repo.worktree and _real(path) == _real(repo.path):
        raise invalid(f"{path} is the repository's own working tree.", "Pass a worktree JCT made for a run.")
    if await anyio.Path(path).exists():
        try:
            # Twice --force: also a worktree with changes, untracked files, or locked.
            await worktree(repo, "remove", "--force", "--force", str(path), within=within, neutralised=[])
        except gitcli.GitTimeout:
            raise
        except gitcli.GitError:
            if await anyio.Path(path / ".git").is_dir():
                raise
        if await anyio.Path(path).exists():
            await anyio.to_thread.run_sync(shutil.rmtree, path)
    await worktree(repo, "prune", within=within, neutralised=[])


async def delete_branch(repo: gitcli.Repo, branch: str, *, within: float, tip: str | None = None) -> None:
    """Delete `branch` (after its work merged); nothing to do when it is gone. A branch checked out in a
    worktree is an error (remove the worktree first). With `tip`, only while the branch is still there (a
    compare-and-delete: a commit that reached it meanwhile fails this, GitError, and keeps it)."""
    name = gitcli.check_branch(branch)
    clock = gitcli.Clock(within)
    if await gitcli.resolve(repo, f"refs/heads/{name}", within=clock.left()) is None:
        return
    if tip is not None:
        await gitcli.write_refs(repo, "update-ref", "-d", f"refs/heads/{name}", tip, within=clock.left())
        return
    try:
        await gitcli.write_refs(repo, "branch", "-D", "--end-of-options", name, within=clock.left())
    except gitcli.GitTimeout:
        raise
    except gitcli.GitError:
        if await gitcli.resolve(repo, f"refs/heads/{name}", within=clock.left()) is not None:
            raise


async def commit_leftovers(worktree: Path, *, message: str, within: float) -> str | None:
    """Commit what the agent left in its worktree: changes to tracked files and untracked files that are not
    ignored (`git add -A`), on the branch checked out there, authored and committed by "JCT
    <jct@localhost>". The new commit, or None when there was nothing to commit. The branch moves with a
    compare-and-swap: a commit the agent makes meanwhile fails this one (GitError) rather than being lost.
    Raises gitcli.Locked when the worktree's `index.lock` is there."""
    clock = gitcli.Clock(within)
    repo = gitcli.Repo(worktree, worktree=True)
    gitcli.check_index_lock(worktree)
    neutralised = await gitcli.neutral(repo, within=clock.left())
    await _index_git(repo, worktree, "add", "-A", within=clock.left(), neutralised=neutralised)
    tree = (await _index_git(repo, worktree, "write-tree", within=clock.left(), neutralised=neutralised)).text.strip()
    head, head_tree = (
        await gitcli.git(repo, "rev-parse", "HEAD", "HEAD^{tree}", within=clock.left(), neutralised=[])
    ).text.split()[-2:]
    if tree == head_tree:
        return None
    text = message.encode() if message.endswith("\n") else f"{message}\n".encode()
    commit = (
        await gitcli.write_refs(
            repo,
            "commit-tree",
            "--no-gpg-sign",
            "-p",
            head,
            tree,
            within=clock.left(),
            input=text,
        )
    ).text.strip()
    await gitcli.write_refs(
        repo, "update-ref", "-m", "jct: commit what the agent left", "HEAD", commit, head, within=clock.left()
    )
    return commit


async def _index_git(
    repo: gitcli.Repo, worktree: Path, *args: str, within: float, neutralised: list[str]
) -> gitcli.Output:
    """A command that writes the worktree's index: a lock in the way is Locked, not just an error."""
    try:
        return await gitcli.git(repo, *args, within=within, neutralised=neutralised)
    except gitcli.GitTimeout:
        raise
    except gitcli.GitError as exc:
        if "index.lock': File exists" in exc.stderr:
            raise gitcli.index_locked(worktree) from exc
        raise


async def stale(
    repo: gitcli.Repo, root: Path, live: Callable[[str], bool] | Collection[str], *, within: float
) -> list[Path]:
    """The run worktrees of `repo` under `root` (JCT_WORKTREES_DIR) whose run id, the directory's name, is not
    `live` (a set of run ids, or a test of one): git's linked worktrees there (also those whose directory is
    gone), and directories in the repository's place under `root` that git no longer knows (a crash between
    making one and recording it). For the sweeper to `remove`. Only `worktree_path`'s: nothing elsewhere under
    `root` (a check's scratch worktree, say) and no name starting with a dot."""
    is_live = live if callable(live) else live.__contains__
    place = _real(_repo_dir(root, repo.path))
    found: dict[Path, Path] = {}
    for tree in (await worktrees(repo, within=within))[1:]:  # the first is the main one
        real = _real(tree.path)
        if real.parent == place and not real.name.startswith(".") and not is_live(real.name):
            found[real] = tree.path
    for entry in await anyio.to_thread.run_sync(_entries, place):
        if entry not in found and not entry.name.startswith(".") and not is_live(entry.name):
            found[entry] = entry
    return sorted(found.values())


def _entries(directory: Path) -> list[Path]:
    try:
        return [entry for entry in directory.iterdir() if entry.is_dir() and not entry.is_symlink()]
    except FileNotFoundError:
        return []


@dataclass(frozen=True)
class Worktree:
    """One entry of `git worktree list`: the main working tree (or the bare repository itself), or a linked one."""

    path: Path
    head: str | None = None  # None for a bare repository or an unborn branch
    branch: str | None = None  # "refs/heads/<name>"; None when detached or bare
    bare: bool = False
    prunable: bool = False  # a linked worktree whose directory is gone (`git worktree prune` forgets it)


# A `git worktree` command reads every linked worktree's records (to list them, or to see whether a branch is
# checked out elsewhere before adding one); one that `git worktree add` is making at that moment (another
# claim, another server process) may have its `commondir` file created but not yet written, and the reader
# dies on it before changing anything. Measured: ten concurrent adds on one repository, one in six failed.
_WORKTREE_RACE = re.compile(r"failed to read \S*worktrees/[^/\s]+/commondir")
_WORKTREE_TRIES = 12  # 10 ms doubling up to 200 ms between tries: about 1.5 s in all


async def worktree(repo: gitcli.Repo, *args: str, within: float, **options: Any) -> gitcli.Output:
    """`git worktree <args>` (options as for `git`), run again while it dies on a worktree another git is still
    making (the race above), within the same `within`."""
    clock = gitcli.Clock(within)
    for attempt in range(_WORKTREE_TRIES):
        try:
            return await gitcli.git(repo, "worktree", *args, within=clock.left(), **options)
        except gitcli.GitError as exc:
            if (
                isinstance(exc, gitcli.GitTimeout)
                or attempt == _WORKTREE_TRIES - 1
                or not _WORKTREE_RACE.search(exc.stderr)
            ):
                raise
        await anyio.sleep(min(0.01 * 2**attempt, 0.2, clock.left()))
    raise AssertionError("unreachable")


async def worktrees(repo: gitcli.Repo, *, within: float) -> list[Worktree]:
    """The repository's working trees, main first (a bare repository lists itself, then its linked ones)."""
    out = await worktree(repo, "list", "--porcelain", "-z", within=within, neutralised=[])
    found: list[Worktree] = []
    attrs: dict[str, str] = {}
    for field in [*gitcli.fields(out.stdout), ""]:
        if field:
            key, _, value = field.partition(" ")
            attrs[key] = value
            continue
        if "worktree" in attrs:
            found.append(
                Worktree(
                    path=Path(attrs["worktree"]),
                    head=attrs.get("HEAD") or None,
                    branch=attrs.get("branch") or None,
                    bare="bare" in attrs,
                    prunable="prunable" in attrs,
                )
            )
        attrs = {}
    return found
