"""What integration writes in a repository (DESIGN section 16): a run's commits replayed onto the target, the
target ref moved by compare-and-swap, the checkout of the target branch fast-forwarded with its files, a check
command run in a scratch worktree, a push that is never forced.

The replay needs no working tree: each commit is a three-way merge of trees (`git merge-tree --write-tree`,
git 2.38+) and a `commit-tree`, so integrating into a repository of any size costs what the change costs.
Git 2.39 (Debian bookworm) has no `merge-tree --merge-base`: to merge a commit C onto a tip T with C's parent
P as the base (a cherry-pick), JCT merges C with a commit X that holds T's tree and has P as its parent, whose
merge base with C is P. Merge commits inside a run's range are replayed as the diff from their first parent.

Every command runs with hooks, filters and every other program the repository's configuration names switched
off (server/core/git/gitcli.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import anyio

from server.core.git import gitcli

# Who JCT commits as (the author of a replayed commit stays its author).
JCT_NAME, JCT_EMAIL = "JCT", "jct@localhost"


class Locked(gitcli.GitError):
    """A lock file (`index.lock`, `<ref>.lock`) holds the repository: another git is at work, or one died."""


@dataclass(frozen=True)
class Replayed:
    commit: str | None
    conflicting_files: list[str]


@dataclass(frozen=True)
class Checked:
    ok: bool
    output: str
    timed_out: bool


def _env(author: tuple[str, str, str] | None = None) -> dict[str, str]:
    env = {"GIT_COMMITTER_NAME": JCT_NAME, "GIT_COMMITTER_EMAIL": JCT_EMAIL}
    name, email, date = author or (JCT_NAME, JCT_EMAIL, "")
    env |= {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email}
    if date:
        env["GIT_AUTHOR_DATE"] = date
    return env


async def _git(
    repo: gitcli.Repo, *args: str, within: float, ok: tuple[int, ...] = (0,), env: dict[str, str] | None = None
) -> gitcli.Output:
    try:
        return await gitcli.git(repo, *args, within=within, ok=ok, extra_env=env)
    except gitcli.GitError as exc:
        if ".lock" in exc.stderr and ("exists" in exc.stderr or "Unable to create" in exc.stderr):
            raise Locked(str(exc), returncode=exc.returncode, stderr=exc.stderr) from None
        raise


def _out(output: gitcli.Output) -> str:
    return output.stdout.decode("utf-8", errors="replace").strip()


async def replay(
    repo: gitcli.Repo, *, onto: str, base: str, head: str, strategy: str, message: str, within: float
) -> Replayed:
    """The run's commits `base..head` on top of `onto`: the new tip, or the files that conflicted."""
    if await gitcli.is_ancestor(repo, head, onto, within=within):
        return Replayed(onto, [])  # already there
    if strategy == "rebase" and onto == base:
        return Replayed(head, [])  # nothing to replay onto: the run's commits as they are
    if strategy == "merge":
        tree, conflicts = await _merge_tree(repo, onto, head, within=within)
        if tree is None:
            return Replayed(None, conflicts)
        commit = await _commit_tree(repo, tree, [onto, head], message, None, within=within)
        return Replayed(commit, [])
    if strategy == "squash":
        tree, conflicts = await _pick(repo, onto, base, head, within=within)
        if tree is None:
            return Replayed(None, conflicts)
        author = await _author(repo, head, within=within)
        return Replayed(await _commit_tree(repo, tree, [onto], message, author, within=within), [])
    listed = _out(
        await _git(repo, "rev-list", "--reverse", "--first-parent", f"{base}..{head}", "--", within=within)
    ).split()
    tip = onto
    for commit in listed:
        parent = _out(await _git(repo, "rev-parse", "--verify", "--end-of-options", f"{commit}^1", within=within))
        tree, conflicts = await _pick(repo, tip, parent, commit, within=within)
        if tree is None:
            return Replayed(None, conflicts)
        author = await _author(repo, commit, within=within)
        body = _out(await _git(repo, "log", "-1", "--format=%B", commit, "--", within=within))
        tip = await _commit_tree(repo, tree, [tip], body or message, author, within=within)
    return Replayed(tip, [])


async def _pick(
    repo: gitcli.Repo, onto: str, parent: str, commit: str, *, within: float
) -> tuple[str | None, list[str]]:
    """The tree of `onto` with the change `parent..commit` applied (three-way, `parent` as the base)."""
    onto_tree = _out(await _git(repo, "rev-parse", "--verify", "--end-of-options", f"{onto}^{{tree}}", within=within))
    stand_in = await _commit_tree(repo, onto_tree, [parent], "stand-in", None, within=within)
    return await _merge_tree(repo, stand_in, commit, within=within)


async def _merge_tree(repo: gitcli.Repo, ours: str, theirs: str, *, within: float) -> tuple[str | None, list[str]]:
    out = await _git(
        repo, "merge-tree", "--write-tree", "--name-only", "--no-messages", ours, theirs, within=within, ok=(0, 1)
    )
    lines = out.stdout.decode("utf-8", errors="replace").split("\n")
    if out.returncode == 0:
        return lines[0].strip(), []
    return None, sorted({line for line in lines[1:] if line.strip()})


async def _author(repo: gitcli.Repo, commit: str, *, within: float) -> tuple[str, str, str]:
    raw = _out(await _git(repo, "log", "-1", "--format=%an%x00%ae%x00%ad", "--date=raw", commit, "--", within=within))
    name, email, date = [*raw.split("\0"), "", "", ""][:3]
    return name or JCT_NAME, email or JCT_EMAIL, date


async def _commit_tree(
    repo: gitcli.Repo,
    tree: str,
    parents: list[str],
    message: str,
    author: tuple[str, str, str] | None,
    *,
    within: float,
) -> str:
    args = ["commit-tree", tree]
    for parent in parents:
        args += ["-p", parent]
    args += ["-m", message]
    return _out(await _git(repo, *args, within=within, env=_env(author)))


async def move_ref(repo: gitcli.Repo, ref: str, new: str, old: str, *, within: float) -> bool:
    """`refs/heads/<ref>` from `old` to `new`, only if it still is `old`: False when it moved meanwhile."""
    name = "refs/heads/" + gitcli.check_ref(ref, "ref")
    try:
        await _git(repo, "update-ref", "-m", "jct: integrate", name, new, old, within=within)
    except Locked:
        raise
    except gitcli.GitError as exc:
        current = await gitcli.resolve(repo, name, within=within)
        if current != old:
            return False
        raise exc from None
    return True


async def checkout_of(repo: gitcli.Repo, ref: str, *, within: float) -> Path | None:
    """The working tree (the main one or a linked worktree) that has `refs/heads/<ref>` checked out."""
    out = _out(await _git(repo, "worktree", "list", "--porcelain", within=within))
    wanted = "branch refs/heads/" + ref
    path: str | None = None
    bare = False
    for line in [*out.splitlines(), ""]:
        if line.startswith("worktree "):
            path, bare = line.removeprefix("worktree "), False
        elif line == "bare":
            bare = True
        elif line == wanted and path is not None and not bare:
            return Path(path)
    return None


async def uncommitted(worktree: Path, *, within: float) -> list[str]:
    """Tracked files with uncommitted changes (staged or not) in that working tree."""
    repo = _linked(worktree)
    out = await _git(repo, "status", "--porcelain=v1", "-z", "--untracked-files=no", within=within)
    entries = [e for e in out.stdout.decode("utf-8", errors="replace").split("\0") if e]
    return [entry[3:] for entry in entries if len(entry) > 3]


async def fast_forward(worktree: Path, new: str, *, within: float) -> bool:
    """The branch checked out in `worktree` moved to `new` with its files; False (nothing changed) when that is
    not a fast-forward or files in the way would be overwritten."""
    repo = _linked(worktree)
    if (await _git_dir(worktree) / "index.lock").exists():
        raise Locked(f"{worktree} holds index.lock", returncode=128, stderr="index.lock exists")
    try:
        await _git(repo, "merge", "--ff-only", "--no-edit", "--quiet", new, within=within, env=_env())
    except Locked:
        raise
    except gitcli.GitError:
        return False
    return True


async def _git_dir(worktree: Path) -> Path:
    dot = worktree / ".git"
    if dot.is_file():
        text = dot.read_text(errors="replace").strip()
        return Path(text.removeprefix("gitdir:").strip())
    return dot


def _linked(worktree: Path) -> gitcli.Repo:
    """A working tree as gitcli runs it: its .git (a directory, or a linked worktree's file) beside the files."""
    return gitcli.Repo(worktree, worktree=True)


async def run_check(
    repo: gitcli.Repo,
    commit: str,
    command: str,
    *,
    scratch: Path,
    timeout: float,  # noqa: ASYNC109 (the check's own time limit, not the caller's)
    max_bytes: int,
) -> Checked:
    """Run `command` (sh -c) in a scratch worktree at `commit`: its exit status and its output's tail. The
    worktree is removed afterwards, whatever happened (a cancelled check too)."""
    within = 60.0
    await _remove_worktree(repo, scratch, within=within)
    scratch.parent.mkdir(parents=True, exist_ok=True)
    await _git(repo, "worktree", "add", "--detach", "--quiet", str(scratch), commit, within=max(within, timeout))
    tail: deque[bytes] = deque()
    held = 0
    timed_out = False
    returncode: int | None = None
    try:
        process = await anyio.open_process(
            ["sh", "-c", command],
            cwd=scratch,
            env=gitcli.environment(),
            stdin=None,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            with anyio.move_on_after(timeout) as scope:
                assert process.stdout is not None
                async for chunk in process.stdout:
                    tail.append(chunk)
                    held += len(chunk)
                    while held - len(tail[0]) >= max_bytes:
                        held -= len(tail.popleft())
                returncode = await process.wait()
            timed_out = scope.cancelled_caught
        finally:
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    try:
                        os.killpg(process.pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        process.kill()
                    await process.wait()
                await process.aclose()
    finally:
        with anyio.CancelScope(shield=True):
            await _remove_worktree(repo, scratch, within=within)
    output = b"".join(tail)[-max_bytes:].decode("utf-8", errors="replace")
    return Checked(ok=not timed_out and returncode == 0, output=output, timed_out=timed_out)


async def _remove_worktree(repo: gitcli.Repo, path: Path, *, within: float) -> None:
    if await anyio.Path(path).exists():
        await _git(repo, "worktree", "remove", "--force", "--force", str(path), within=within, ok=(0, 128))
        if await anyio.Path(path).exists():
            await anyio.to_thread.run_sync(lambda: shutil.rmtree(path, ignore_errors=True))
    await _git(repo, "worktree", "prune", within=within)


async def push(repo: gitcli.Repo, url: str, new: str, ref: str, *, within: float) -> bool:
    """`new` pushed to `url` as `refs/heads/<ref>`, never forced: False when the remote refused it as not a
    fast-forward (it moved)."""
    name = "refs/heads/" + gitcli.check_ref(ref, "ref")
    args = [*repo.base_args(), "push", "--quiet", "--end-of-options", url, f"{new}:{name}"]
    try:
        await gitcli.run(args, within=within)
    except gitcli.GitError as exc:
        if "rejected" in exc.stderr or "non-fast-forward" in exc.stderr or "fetch first" in exc.stderr:
            return False
        raise
    return True
