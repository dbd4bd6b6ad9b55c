"""Integration's git mechanics (DESIGN section 16): replay a run's commits on the target, move the target with a
compare-and-swap or a push that is not forced, and keep a checkout of the target in step with its files (the
check command, in a scratch worktree, is checks.py).

Pure functions over git (gitcli.py); the merge queue, the integrator's lease and the claim and completion hooks
are the caller's. `replay` touches objects only (`git merge-tree --write-tree`, `git commit-tree`), never a
working tree, so it costs about the same on a repository of 10,000 files as on one of ten (bench/integrate.py).
Nothing here runs a hook, a filter, a merge driver or gpg (gitcli.py's `_CONFIG` and `neutral`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from server.core.git import gitcli, workspaces
from server.core.text import has_control
from server.errors import invalid

Strategy = Literal["rebase", "merge", "squash"]
STRATEGIES: tuple[str, ...] = get_args(Strategy)
# The message of the throw-away commit that stands for "the tip, as if its parent were the replayed commit's".
_STAND_IN = b"jct: replay base\n"


def sha(value: str, field: str) -> str:
    if not isinstance(value, str) or not gitcli.SHA.match(value):
        raise invalid(f"{field} must be a full commit id (40 or 64 hex digits).", f"Pass {field} as a commit id.")
    return value


def branch_ref(ref: str, field: str = "ref") -> str:
    """`refs/heads/<ref>` for a branch name gitcli.check_branch accepts (no option, no `..`)."""
    return f"refs/heads/{gitcli.check_branch(ref, field)}"


# --- replay ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Replayed:
    commit: str | None  # the new tip (descends from `onto`), None on conflict
    conflicting_files: list[str]  # empty unless conflict


@dataclass(frozen=True)
class _Commit:
    sha: str
    parent: str | None  # the first parent; None for a root commit
    tree: str
    author: tuple[str, str, str]  # name, email, date ("<seconds> <+hhmm>")
    message: bytes


async def replay(
    repo: gitcli.Repo, *, onto: str, base: str, head: str, strategy: str, message: str, within: float
) -> Replayed:
    """The run's commits `base..head` put on top of `onto`, without a working tree; no ref moves.

    - `rebase`: each commit in turn, as `git cherry-pick` would (a 3-way merge with the commit's parent as the
      merge base), keeping its author, author date and message (`message` is not used); JCT is the committer.
      A merge commit in the range (say the agent merged the target into its branch) is replayed as one commit
      with its change against its first parent: the range is walked along first parents only, so what came
      in through a second parent is not replayed commit by commit (most of it is on the target already).
      When `onto` is `base`, the result is `head` itself (a fast-forward).
    - `merge`: one merge commit, parents (`onto`, `head`), `message`, by JCT.
    - `squash`: one commit on `onto` with `message` and the author (and author date) of `head`.

    Nothing to do returns `onto`: `head` is in `onto` already, `base..head` is empty, or the result would not
    change `onto`'s tree (the work landed before: a re-run after a crash changes nothing). A commit that
    would change nothing on the tip is dropped (it is there already). A conflict returns `commit=None` and
    the files of the first commit that conflicts; the objects written so far are garbage git collects.
    """
    if strategy not in STRATEGIES:
        raise invalid(f"strategy {strategy!r} is not one of {', '.join(STRATEGIES)}.", "Use rebase, merge or squash.")
    clock = gitcli.Clock(within)
    names = [gitcli.check_ref(onto, "onto"), gitcli.check_ref(base, "base"), gitcli.check_ref(head, "head")]
    # All of it on one worker thread: one hand-off for the six git commands (bench/integrate.py).
    return await gitcli.in_thread(lambda g: _replay(g, repo, names, strategy, message, clock))


def _replay(
    g: gitcli.Batch, repo: gitcli.Repo, names: list[str], strategy: str, message: str, clock: gitcli.Clock
) -> Replayed:
    # (2.39's rev-parse takes no --end-of-options: check_ref made sure no name starts with "-".)
    out = g.git(
        repo,
        "rev-parse",
        *(f"{name}^{{commit}}" for name in names),
        f"{names[0]}^{{tree}}",
        within=clock.left(),
        neutralised=[],
    )
    onto, base, head, onto_tree = out.text.split()[-4:]
    # Reachable from head, in neither base nor onto: the run's work not on the target yet (empty: landed).
    commits = _commits(g, repo, f"^{base}", f"^{onto}", head, clock=clock)
    if not commits:
        return Replayed(onto, [])
    if strategy == "rebase" and onto == base:
        return Replayed(head, [])
    neutralised = g.drivers(repo, within=clock.left()).options()
    if strategy == "rebase":
        return _rebase(g, repo, onto, onto_tree, commits, neutralised, clock)
    tree: str | None
    conflicts: list[str] = []
    if strategy == "squash" and onto == base:
        tree = commits[-1].tree  # onto has nothing head lacks: head's tree is the result
    else:
        tree, conflicts = _merge_tree(g, repo, onto, head, neutralised, clock)
    if tree is None:
        return Replayed(None, conflicts)
    if tree == onto_tree:
        return Replayed(onto, [])
    text = message.encode() if message.endswith("\n") else f"{message}\n".encode()
    if strategy == "merge":
        return Replayed(_commit_tree(g, repo, tree, [onto, head], text, None, neutralised, clock), [])
    return Replayed(_commit_tree(g, repo, tree, [onto], text, commits[-1].author, neutralised, clock), [])


def _rebase(
    g: gitcli.Batch,
    repo: gitcli.Repo,
    onto: str,
    onto_tree: str,
    commits: list[_Commit],
    neutralised: list[str],
    clock: gitcli.Clock,
) -> Replayed:
    tip, tip_tree = onto, onto_tree
    for commit in commits:
        # 2.39 has no `merge-tree --merge-base` (2.40 does): a stand-in commit with the tip's tree and the
        # replayed commit's parent as its parent makes that parent the merge base, as cherry-pick has it.
        parents = [commit.parent] if commit.parent else []
        stand_in = _commit_tree(g, repo, tip_tree, parents, _STAND_IN, None, neutralised, clock)
        tree, conflicts = _merge_tree(g, repo, stand_in, commit.sha, neutralised, clock)
        if tree is None:
            return Replayed(None, conflicts)
        if tree == tip_tree:
            continue  # its change is on the tip already
        tip = _commit_tree(g, repo, tree, [tip], commit.message, commit.author, neutralised, clock)
        tip_tree = tree
    return Replayed(tip, [])


_LOG_FIELDS = 7


def _commits(g: gitcli.Batch, repo: gitcli.Repo, *revisions: str, clock: gitcli.Clock) -> list[_Commit]:
    """The commits `revisions` select along first parents, oldest first."""
    out = g.git(
        repo,
        "log",
        "--first-parent",
        "--reverse",
        "--no-color",
        "--encoding=UTF-8",
        "--date=raw",
        "-z",
        "--format=%H%x00%P%x00%T%x00%an%x00%ae%x00%ad%x00%B",
        "--end-of-options",
        *revisions,
        "--",
        within=clock.left(),
        neutralised=[],
    )
    if not out.stdout:
        return []
    fields = out.stdout.removesuffix(b"\0").split(b"\0")  # -z ends every commit with a NUL
    if len(fields) % _LOG_FIELDS:
        raise gitcli.GitError("git log printed a commit message holding a NUL byte; replay it by hand")
    commits = []
    for i in range(0, len(fields), _LOG_FIELDS):
        sha, parents, tree, name, email, date = (f.decode("utf-8", errors="replace") for f in fields[i : i + 6])
        first = parents.split()[0] if parents else None
        commits.append(_Commit(sha, first, tree, (name, email, date), fields[i + 6]))
    return commits


def _commit_tree(
    g: gitcli.Batch,
    repo: gitcli.Repo,
    tree: str,
    parents: list[str],
    message: bytes,
    author: tuple[str, str, str] | None,
    neutralised: list[str],
    clock: gitcli.Clock,
) -> str:
    args = ["commit-tree", "--no-gpg-sign"]
    for parent in parents:
        args += ["-p", parent]
    out = g.git(
        repo,
        *args,
        tree,
        within=clock.left(),
        neutralised=neutralised,
        env=gitcli.write_env(author=author),
        input=message,
    )
    return out.text.strip()


def _merge_tree(
    g: gitcli.Batch, repo: gitcli.Repo, ours: str, theirs: str, neutralised: list[str], clock: gitcli.Clock
) -> tuple[str | None, list[str]]:
    """(the merged tree, []) or (None, the conflicting files)."""
    out = g.git(
        repo,
        "merge-tree",
        "--write-tree",
        "--name-only",
        "--no-messages",
        "--allow-unrelated-histories",  # a root commit in the range: its merge base is the empty tree
        "-z",
        ours,
        theirs,
        within=clock.left(),
        neutralised=neutralised,
        ok=(0, 1),
    )
    fields = [f.decode("utf-8", errors="replace") for f in out.stdout.split(b"\0")]
    if out.returncode == 0:
        return fields[0], []
    return None, list(dict.fromkeys(f for f in fields[1:] if f))


# --- moving the target -------------------------------------------------------------------------------------


async def move_ref(
    repo: gitcli.Repo, ref: str, new: str, old: str, *, within: float, message: str = "jct: integrate"
) -> bool:
    """Compare-and-swap of `refs/heads/<ref>` from `old` to `new` (`git update-ref`): True when it moved, False
    when the ref is not `old` any more (someone moved it: replay on the new head and try again). Raises
    gitcli.Locked when git's lock on the ref is held (`<ref>.lock` or `packed-refs.lock`, maybe stale)."""
    name = branch_ref(ref)
    sha(new, "new")
    sha(old, "old")
    clock = gitcli.Clock(within)
    return await gitcli.in_thread(lambda g: _move_ref(g, repo, name, new, old, message, clock))


def _move_ref(
    g: gitcli.Batch, repo: gitcli.Repo, name: str, new: str, old: str, message: str, clock: gitcli.Clock
) -> bool:
    try:
        g.git(
            repo,
            "update-ref",
            "-m",
            message,
            "--end-of-options",
            name,
            new,
            old,
            within=clock.left(),
            neutralised=[],
            env=gitcli.write_env(),
        )
    except gitcli.GitTimeout:
        raise
    except gitcli.GitError as exc:
        common = _common_dir(g, repo, clock)
        for lock in (common / f"{name}.lock", common / "packed-refs.lock"):
            if lock.exists() or f"{lock.name}': File exists" in exc.stderr:
                raise gitcli.Locked(
                    f"{lock} exists: another git is writing {name}, or one died and left it (remove it if no git runs)",
                    lock=lock,
                    returncode=exc.returncode,
                    stderr=exc.stderr,
                ) from exc
        if g.resolve(repo, name, within=clock.left()) != old:
            return False
        raise
    return True


def _common_dir(g: gitcli.Batch, repo: gitcli.Repo, clock: gitcli.Clock) -> Path:
    out = g.git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir", within=clock.left(), neutralised=[])
    return Path(out.text.strip())


async def push(repo: gitcli.Repo, url: str, new: str, ref: str, *, within: float) -> bool:
    """`git push <url> <new>:refs/heads/<ref>`, never forced, with the operator's credentials (no hook, no
    signing, no submodule pushed): True when the remote's ref is `new` now, False when the remote refused it
    as not a fast-forward (the remote moved: fetch, replay on its head and try again)."""
    if not isinstance(url, str) or not url or url.startswith("-") or has_control(url):
        raise invalid("url must be a repository URL or path, not an option.", "Pass the location's URL.")
    name = branch_ref(ref)
    sha(new, "new")
    out = await gitcli.git(
        repo,
        "push",
        "--porcelain",
        "--no-verify",
        "--no-signed",
        "--recurse-submodules=no",
        "--end-of-options",
        url,
        f"{new}:{name}",
        within=within,
        neutralised=[],
        env=gitcli.write_env(),
        offline=False,
        ok=(0, 1),
    )
    if out.returncode == 0:
        return True
    # --porcelain: one line per ref, "<flag>\t<from>:<to>\t<summary>"; `!` is refused.
    for line in out.text.splitlines():
        flag, _, rest = line.partition("\t")
        if flag == "!" and rest.endswith(("[rejected] (non-fast-forward)", "[rejected] (fetch first)")):
            return False
    raise gitcli.GitError(f"git push to {url} failed: {out.text.strip()[-500:]}", returncode=out.returncode)


# --- the checkout of the target ------------------------------------------------------------------------------


async def checkout_of(repo: gitcli.Repo, ref: str, *, within: float) -> Path | None:
    """The working tree (the main one or a linked worktree) that has `refs/heads/<ref>` checked out, else None
    (one whose directory is gone counts as none)."""
    name = branch_ref(ref)
    for tree in await workspaces.worktrees(repo, within=within):
        if tree.branch == name and not tree.bare and not tree.prunable:
            return tree.path
    return None


async def uncommitted(worktree: Path, *, within: float) -> list[str]:
    """Paths with changes to tracked files in `worktree`, staged or not (untracked files are not counted; a
    submodule counts when its commit changed, not for edits inside it)."""
    out = await gitcli.git(
        gitcli.Repo(worktree, worktree=True),
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=no",
        "--ignore-submodules=dirty",
        "--no-renames",
        within=within,
    )
    return [field[3:] for field in gitcli.fields(out.stdout) if len(field) > 3]


class Filtered(gitcli.GitError):
    """The files a fast-forward would write pass through a filter (say Git LFS) JCT does not run: written
    without it they would not be the user's files. Move that checkout by hand (`git merge --ff-only`)."""


async def fast_forward(worktree: Path, new: str, *, within: float, branch: str | None = None) -> bool:
    """Move the branch checked out in `worktree` to `new`, files and index with it, so `git status` stays as it
    was (`git merge --ff-only`). False, with nothing changed, when it is not a fast-forward (someone committed
    there), when local changes or untracked files would be overwritten, or when `branch` is given and is not
    the one checked out any more. Raises gitcli.Locked when the worktree's `index.lock` is there, Filtered
    when a file it would write has a filter driver."""
    sha(new, "new")
    clock = gitcli.Clock(within)
    repo = gitcli.Repo(worktree, worktree=True)
    gitcli.check_index_lock(worktree)
    found = await gitcli.drivers(repo, within=clock.left())
    neutralised = found.options()
    out = await gitcli.git(repo, "symbolic-ref", "-q", "HEAD", within=clock.left(), neutralised=neutralised, ok=(0, 1))
    checked_out = out.text.strip()
    if out.returncode != 0:
        raise gitcli.GitError(f"{worktree} has no branch checked out (a detached HEAD)")
    if branch is not None and checked_out != branch_ref(branch, "branch"):
        return False
    if found.filters and await _filtered(repo, new, found.filters, neutralised, clock):
        raise Filtered(f"files {new[:12]} would write in {worktree} use a filter driver JCT does not run")
    try:
        await gitcli.git(
            repo,
            "merge",
            "--ff-only",
            "--quiet",
            "--no-stat",
            "--no-edit",
            "--no-verify-signatures",
            "--no-autostash",
            "--end-of-options",
            new,
            within=clock.left(),
            neutralised=neutralised,
            env=gitcli.write_env(),
        )
    except gitcli.GitTimeout:
        raise
    except gitcli.GitError as exc:
        if "index.lock': File exists" in exc.stderr:
            raise gitcli.index_locked(worktree) from exc
        if "Not possible to fast-forward" in exc.stderr or "would be overwritten" in exc.stderr:
            return False
        raise
    return True


async def _filtered(
    repo: gitcli.Repo, new: str, filters: tuple[str, ...], neutralised: list[str], clock: gitcli.Clock
) -> bool:
    """Whether a file that differs between HEAD and `new` has one of `filters` (or a .gitattributes changes)."""
    out = await gitcli.git(
        repo,
        "diff",
        "--no-ext-diff",
        "--no-textconv",
        "--no-renames",
        "--name-only",
        "-z",
        "--end-of-options",
        "HEAD",
        new,
        "--",
        within=clock.left(),
        neutralised=neutralised,
    )
    paths = [p for p in gitcli.fields(out.stdout) if p]
    if not paths:
        return False
    if any(p == ".gitattributes" or p.endswith("/.gitattributes") for p in paths):
        return True
    out = await gitcli.git(
        repo,
        "check-attr",
        "-z",
        "--stdin",
        "filter",
        within=clock.left(),
        neutralised=neutralised,
        input=b"\0".join(p.encode() for p in paths) + b"\0",
    )
    fields = gitcli.fields(out.stdout)
    return any(value in filters for value in fields[2::3])
