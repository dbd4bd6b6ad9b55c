"""Running git through the git CLI: each command a subprocess driven from a worker thread (runner.py), never
from the event loop's thread; a function that runs several hands them to one thread (`in_thread`, `Batch`).

Why the CLI (bench/git_access.py, bench/results/git_access.md): on a repository of 10,000 files and 5,000
commits it is within 1.3x of pygit2 and 4x faster than dulwich on a large diff, the fastest on logs, and a
command past its timeout or output cap can be killed (a library call in a thread cannot); it needs no wheel.
The reads are here (diffs.py parses `git diff`; repos.py fetches into JCT's own cache); integration's writes
(merges.py: replay, ref updates, pushes; workspaces.py: branches, worktrees, commits) run through the same
`Batch.git`, with `write_env()` (JCT commits as "JCT <jct@localhost>") and the same neutralised configuration.
Each command has a timeout and a cap on what it may print.

What a caller passes is checked before git sees it: a ref never starts with `-` and has no `..`; a path is
relative, without `..`; refs go after `--end-of-options`, paths after `--` with literal pathspecs. The
repository's own configuration cannot run programs here (`neutral` and `_CONFIG` below, the one list, and
docs/verified-changes.md): no hook, fsmonitor, filter, merge driver, external diff, textconv, signature
check or signing, credential helper, askpass or transport (a push keeps the operator's credentials).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

import anyio

from server.core.git.runner import DEFAULT_MAX_BYTES as DEFAULT_MAX_BYTES
from server.core.git.runner import Clock as Clock
from server.core.git.runner import GitError as GitError
from server.core.git.runner import GitTimeout as GitTimeout
from server.core.git.runner import Locked as Locked
from server.core.git.runner import Output as Output
from server.core.git.runner import Process
from server.core.git.runner import environment as environment
from server.core.git.runner import write_env as write_env
from server.core.text import has_control
from server.errors import invalid

T = TypeVar("T")
P = ParamSpec("P")
# git commands running at once in this process, each on a worker thread of its own: their own limit, so the
# database's thread hops (aiosqlite, changes.apply) never queue behind git on anyio's default one.
_THREADS = anyio.CapacityLimiter(32)

GIT = "git"
SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
# A branch, tag, commit id or a revision such as HEAD~2 or main^: no option, no range, no reflog, no path.
_REF = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/+~^-]{0,255}$")
REF_LIMIT = 256  # Limits.REF
PATH_LIMIT = 1_024
# The repository's configuration never runs a program for JCT, and repositories owned by another user
# (a team's mirror on a shared server) are readable. What a read would otherwise run: an fsmonitor, a hook
# (none looked up: /dev/null holds none), gpg for a signature `log.showSignature` asks for. External diffs and
# textconv are off by flag on every diff (--no-ext-diff --no-textconv), filters and merge drivers by `neutral`.
# Integration merges, checks out and commits (merges.py, workspaces.py): no hook runs (hooksPath above), no
# smudge filter or merge driver (`neutral`), nothing signs (below).
_CONFIG = (
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "log.showSignature=false",
    "-c",
    "safe.directory=*",
    "-c",
    "protocol.ext.allow=never",
    "-c",
    "core.quotePath=false",
    "-c",
    "diff.renameLimit=2000",
    # What writes: no commit or tag is signed (gpg), no merge stashes local changes (the stash is shared by
    # every worktree of a repository), no new branch tracks another.
    "-c",
    "commit.gpgSign=false",
    "-c",
    "tag.gpgSign=false",
    "-c",
    "merge.autoStash=false",
    "-c",
    "branch.autoSetupMerge=false",
)
# A command that reads a repository reaches no remote: no transport at all (a partial clone's lazy fetch of
# a missing object would follow the repository's remote, its ssh command and credential helper), and no
# credential helper or askpass program. `fetch` into JCT's own cache keeps the operator's (~/.gitconfig).
_OFFLINE = (
    "-c",
    "protocol.allow=never",
    "-c",
    "credential.helper=",
    "-c",
    "core.askPass=",
    "-c",
    "core.sshCommand=",
)
# A filter driver's name: the <name> of filter.<name>.<key> (the name may hold dots); a merge driver's likewise.
_FILTER_KEY = re.compile(r"^filter\.(.+)\.[A-Za-z]+$")
_MERGE_DRIVER_KEY = re.compile(r"^merge\.(.+)\.driver$")


def check_ref(ref: object, field: str = "ref") -> str:
    """A ref git may be given: a branch, tag, commit id, or HEAD~n / name^; never an option or a range."""
    if not isinstance(ref, str) or not ref.strip():
        raise invalid(f"{field} must be a non-empty branch, tag or commit id.", f"Pass {field} such as 'main'.")
    ref = ref.strip()
    if len(ref) > REF_LIMIT:
        raise invalid(f"{field} is {len(ref)} characters; the limit is {REF_LIMIT}.", "Pass a branch or commit id.")
    if ref.startswith("-"):
        raise invalid(f"{field} {ref!r} starts with '-'.", "Pass a branch, tag or commit id, not an option.")
    if ".." in ref or "//" in ref or ref.endswith(("/", ".lock", ".")) or "/." in ref or not _REF.match(ref):
        raise invalid(
            f"{field} {ref!r} is not a plain branch, tag or commit id (no '..' ranges, spaces, ':' or '@{{').",
            "Pass one name such as 'main', 'feature/x', 'v1.2' or a commit id.",
        )
    return ref


def check_branch(name: object, field: str = "branch") -> str:
    """A branch name (what follows refs/heads/): a ref as check_ref wants it, and no revision suffix."""
    branch = check_ref(name, field)
    if "~" in branch or "^" in branch or branch == "HEAD" or branch.startswith("refs/"):
        raise invalid(f"{field} {branch!r} is not a branch name.", "Pass a branch name such as 'main' or 'feature/x'.")
    return branch


def check_path(path: object, field: str = "path") -> str:
    """A path inside the repository: relative, no `..`, no control characters. Returns it normalised."""
    if not isinstance(path, str):
        raise invalid(f"{field} must be a string.", "Pass a path relative to the repository root.")
    if len(path) > PATH_LIMIT:
        raise invalid(f"{field} is {len(path)} characters; the limit is {PATH_LIMIT}.", "Shorten the path.")
    if has_control(path):
        raise invalid(f"{field} contains control characters.", "Pass a plain relative path.")
    cleaned = path.strip().replace("\\", "/")
    while cleaned.startswith("./"):
        cleaned = cleaned[2:]
    if cleaned.startswith("/") or re.match(r"^[A-Za-z]:", cleaned) or cleaned.startswith("~"):
        raise invalid(f"{field} {path!r} is absolute.", "Give a path relative to the repository root.")
    parts = [p for p in cleaned.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise invalid(f"{field} {path!r} contains '..'.", "Give a path inside the repository, without '..'.")
    return "/".join(parts)


def git_dir(worktree: Path) -> Path:
    """A working tree's own git directory: `.git`, or where a linked worktree's `.git` file points."""
    dot = worktree / ".git"
    if dot.is_file():
        pointed = dot.read_text().strip().removeprefix("gitdir:").strip()
        return (worktree / pointed).resolve()
    return dot


def index_locked(worktree: Path) -> Locked:
    lock = git_dir(worktree) / "index.lock"
    return Locked(
        f"{lock} exists: another git is using {worktree}, or one died and left it (remove it if no git runs)",
        lock=lock,
    )


def check_index_lock(worktree: Path) -> None:
    """Raise Locked when the working tree's index is locked (a git writing it, or one that died and left it)."""
    if (git_dir(worktree) / "index.lock").exists():
        raise index_locked(worktree)


@dataclass(frozen=True)
class Repo:
    """A repository git may read: a bare one (`git_dir`), or a working tree (its `.git` beside the files)."""

    path: Path
    worktree: bool = False

    def base_args(self) -> list[str]:
        if self.worktree:
            return [GIT, f"--git-dir={self.path / '.git'}", f"--work-tree={self.path}", *_CONFIG]
        return [GIT, f"--git-dir={self.path}", *_CONFIG]


@dataclass(frozen=True)
class Drivers:
    """The filter and merge drivers a repository's configuration (or an included or the user's one) names."""

    filters: tuple[str, ...] = ()
    merges: tuple[str, ...] = ()

    def options(self) -> list[str]:
        """`-c` options that switch every one of them off (`neutral`)."""
        options = []
        for name in self.filters:
            for setting in ("clean=", "smudge=", "process=", "required=false"):
                options += ["-c", f"filter.{name}.{setting}"]
        for name in self.merges:
            options += ["-c", f"merge.{name}.driver=false"]
        return options


class Batch:
    """git commands run one after another on the worker thread `in_thread` gives a function: one hand-off to
    that thread for all of them (a replay runs six). Cancelled, the running command is killed and every later
    one raises GitError."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: Process | None = None
        self._cancelled = False

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            if self._current is not None:
                self._current.cancel()

    def run(
        self,
        args: Sequence[str],
        *,
        within: float,
        max_bytes: int = DEFAULT_MAX_BYTES,
        cwd: Path | None = None,
        ok: Sequence[int] = (0,),
        env: Mapping[str, str] | None = None,
        input: bytes | None = None,
        remote: bool = False,
    ) -> Output:
        """Run git, reading at most `max_bytes` of its output (then stopping it), within `within` seconds;
        `input` is its standard input (none when None), `env` its environment (`environment()` when None);
        `remote` when it may reach a remote (it then runs without a terminal)."""
        process = Process(
            list(args),
            dict(env) if env is not None else environment(),
            cwd,
            input,
            within,
            max_bytes,
            session=remote,
        )
        with self._lock:
            if self._cancelled:
                process.cancel()
            self._current = process
        process.run()
        return process.result(ok)

    def git(
        self,
        repo: Repo,
        *args: str,
        within: float,
        max_bytes: int = DEFAULT_MAX_BYTES,
        ok: Sequence[int] = (0,),
        neutralised: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        input: bytes | None = None,
        offline: bool = True,
    ) -> Output:
        """git on `repo`. `neutralised`: `neutral()`'s options when the caller looked them up already (one
        look-up for many commands; `[]` for a command that reads no working-tree file and merges nothing), else
        looked up for a working tree. A write passes `env=write_env()`; `offline=False` lets a push reach its
        remote with the operator's credentials."""
        # A filter runs only when git reads working-tree files: a bare repository needs no look-up.
        if neutralised is None:
            neutralised = self.drivers(repo, within=within).options() if repo.worktree else []
        return self.run(
            [*repo.base_args(), *(_OFFLINE if offline else ()), *neutralised, *args],
            # In the working tree: git reads .gitattributes relative to where it runs (a merge driver, a filter,
            # `binary`); from elsewhere it would read that directory's, or none.
            cwd=repo.path if repo.worktree else None,
            within=within,
            max_bytes=max_bytes,
            ok=ok,
            env=env,
            input=input,
            remote=not offline,
        )

    def resolve(self, repo: Repo, ref: str, *, within: float) -> str | None:
        out = self.git(
            repo,
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            f"{ref}^{{commit}}",
            within=within,
            ok=(0, 1, 128),
            neutralised=[],
        )
        sha = out.text.strip()
        return sha if out.returncode == 0 and SHA.match(sha) else None

    def drivers(self, repo: Repo, *, within: float) -> Drivers:
        out = self.run(
            [*repo.base_args(), *_OFFLINE, "config", "--null", "--name-only", "--get-regexp", r"^(filter|merge)\."],
            within=within,
            max_bytes=256 * 1024,
            ok=(0, 1),
        )
        keys = fields(out.stdout)
        return Drivers(
            tuple(sorted({m.group(1) for key in keys if (m := _FILTER_KEY.match(key))})),
            tuple(sorted({m.group(1) for key in keys if (m := _MERGE_DRIVER_KEY.match(key))})),
        )


async def in_thread(work: Callable[[Batch], T]) -> T:
    """`work(batch)` on a worker thread, its git commands run through `batch`, never on the event loop's thread.
    Cancelled, the command running is killed at once and the thread is left to finish on its own."""
    batch = Batch()
    try:
        return await anyio.to_thread.run_sync(work, batch, abandon_on_cancel=True, limiter=_THREADS)
    except anyio.get_cancelled_exc_class():
        batch.cancel()
        raise


def _on_thread(method: Callable[Concatenate[Batch, P], T]) -> Callable[P, Awaitable[T]]:
    """The Batch method `method` as a coroutine that runs it on a worker thread (through in_thread)."""

    async def call(*args: P.args, **kwargs: P.kwargs) -> T:
        return await in_thread(lambda batch: method(batch, *args, **kwargs))

    call.__name__ = call.__qualname__ = method.__name__
    call.__doc__ = f"Batch.{method.__name__} on a worker thread."
    return call


# Batch.run and Batch.git on a worker thread (git's neutral look-up, when it needs one, on the same thread).
run = _on_thread(Batch.run)
git = _on_thread(Batch.git)


async def write_refs(repo: Repo, *args: str, within: float, input: bytes | None = None) -> Output:
    """git that writes objects and refs only (branch, update-ref, commit-tree), as JCT (`write_env`): it reads no
    working-tree file, so it needs no neutral look-up."""
    return await git(repo, *args, within=within, neutralised=[], env=write_env(), input=input)


async def drivers(repo: Repo, *, within: float) -> Drivers:
    return await in_thread(lambda batch: batch.drivers(repo, within=within))


async def neutral(repo: Repo, *, within: float) -> list[str]:
    """`-c` options that switch off every filter and merge driver the repository's configuration (or an included
    or the user's one) names: `.gitattributes` can attach one to any file, and git runs a filter's `clean`
    command when it reads the working tree (a diff against it), its `smudge` one when it writes it (a checkout),
    its `process` command likewise. An empty command is no filter; `required=false` lets git take the file as
    it is. A merge driver's command runs when a merge meets a file changed on both sides: `false` instead makes
    that file a conflict (an empty command would fail the whole merge)."""
    return (await drivers(repo, within=within)).options()


# --- what JCT asks of a repository -------------------------------------------------------


async def resolve(repo: Repo, ref: str, *, within: float) -> str | None:
    """The commit `ref` names, or None when there is no such commit."""
    return await in_thread(lambda batch: batch.resolve(repo, ref, within=within))


async def is_ancestor(repo: Repo, ancestor: str, descendant: str, *, within: float) -> bool:
    out = await git(repo, "merge-base", "--is-ancestor", ancestor, descendant, within=within, ok=(0, 1))
    return out.returncode == 0


def fields(raw: bytes) -> list[str]:
    return [f.decode("utf-8", errors="replace") for f in raw.split(b"\0")]
