"""Reading a git repository through the git CLI, in anyio subprocesses (never on the event loop's thread).

Why the CLI (bench/git_access.py, bench/results/git_access.md): on a repository of 10,000 files and 5,000
commits it is within 1.3x of pygit2 and 4x faster than dulwich on a large diff, the fastest on logs, and a
command past its timeout or output cap can be killed (a library call in a thread cannot); it needs no wheel.
Every command here is read-only except `fetch` into JCT's own cache (what integration writes is in merges.py and
workspaces.py, through `git` below), and each has a timeout and a cap on what it may print.

What a caller passes is checked before git sees it: a ref never starts with `-` and has no `..`; a path is
relative, without `..`; refs go after `--end-of-options`, paths after `--` with literal pathspecs. The
repository's own configuration cannot run programs here (`neutral` and `_CONFIG` below, the one list, and
docs/verified-changes.md): no hook, fsmonitor, filter, external diff, textconv, signature check, credential
helper, askpass or transport.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream, Process

from server.core.text import has_control
from server.errors import invalid

GIT = "git"
SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
# A branch, tag, commit id or a revision such as HEAD~2 or main^: no option, no range, no reflog, no path.
_REF = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/+~^-]{0,255}$")
REF_LIMIT = 256  # Limits.REF
PATH_LIMIT = 1_024
# What a command may print before it is stopped (a diff for a reader is cut much earlier by max_chars).
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
_STDERR_BYTES = 16 * 1024
# The repository's configuration never runs a program for JCT, and repositories owned by another user
# (a team's mirror on a shared server) are readable. What a read would otherwise run: an fsmonitor, a hook
# (none looked up: /dev/null holds none), gpg for a signature `log.showSignature` asks for. External diffs and
# textconv are off by flag on every diff (--no-ext-diff --no-textconv), filters by `neutral`. Integration's
# writes (merges.py, workspaces.py) run with hooks off likewise; a custom merge driver that an integrable
# repository's own configuration names would run in a replay (only repositories the operator made writable).
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
# A filter driver's name: the <name> of filter.<name>.<key> (the name may hold dots).
_FILTER_KEY = re.compile(r"^filter\.(.+)\.[A-Za-z]+$")


class GitError(Exception):
    """git failed: a missing object, an unreadable repository, a timeout, a fetch over its cap."""

    def __init__(self, message: str, *, returncode: int | None = None, stderr: str = "") -> None:
        super().__init__(message)
        self.returncode = returncode
        self.stderr = stderr


class GitTimeout(GitError):
    pass


@dataclass(frozen=True)
class Output:
    stdout: bytes
    returncode: int
    # The command printed more than its cap: stdout holds the first max_bytes and git was stopped.
    truncated: bool = False

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", errors="replace")


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


def environment() -> dict[str, str]:
    """The process environment less every GIT_* variable a caller's shell may carry, plus JCT's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        {
            "GIT_TERMINAL_PROMPT": "0",  # a fetch that needs a password fails instead of waiting for one
            "GIT_OPTIONAL_LOCKS": "0",  # `git status`/`diff` on a working tree never writes its index
            "GIT_LITERAL_PATHSPECS": "1",  # ':(top)' or '*' in a path is that file name, not pathspec magic
            "GIT_CONFIG_NOSYSTEM": "1",
            "LC_ALL": "C",
        }
    )
    return env


@dataclass(frozen=True)
class Repo:
    """A repository git may read: a bare one (`git_dir`), or a working tree (its `.git` beside the files)."""

    path: Path
    worktree: bool = False

    def base_args(self) -> list[str]:
        if self.worktree:
            return [GIT, f"--git-dir={self.path / '.git'}", f"--work-tree={self.path}", *_CONFIG]
        return [GIT, f"--git-dir={self.path}", *_CONFIG]


async def neutral(repo: Repo, *, within: float) -> list[str]:
    """`-c` options that switch off every filter driver the repository's configuration (or an included or the
    user's one) names: `.gitattributes` can attach one to any file, and git runs its `clean` command when it
    reads the working tree (a diff against it), its `process` command likewise. An empty command is no filter;
    `required=false` lets git read the file as it is."""
    out = await run(
        [*repo.base_args(), *_OFFLINE, "config", "--null", "--name-only", "--get-regexp", r"^filter\."],
        within=within,
        max_bytes=256 * 1024,
        ok=(0, 1),
    )
    names = sorted({m.group(1) for key in _fields(out.stdout) if (m := _FILTER_KEY.match(key))})
    options = []
    for name in names:
        for setting in ("clean=", "smudge=", "process=", "required=false"):
            options += ["-c", f"filter.{name}.{setting}"]
    return options


async def run(
    args: Sequence[str],
    *,
    within: float,
    max_bytes: int = DEFAULT_MAX_BYTES,
    cwd: Path | None = None,
    ok: Sequence[int] = (0,),
    extra_env: Mapping[str, str] | None = None,
) -> Output:
    """Run git, reading at most `max_bytes` of its output (then stopping it), within `timeout` seconds."""
    chunks: list[bytes] = []
    errors: list[bytes] = []
    size = 0
    truncated = False
    process: Process | None = None
    try:
        with anyio.fail_after(within):
            process = await anyio.open_process(
                list(args), env=environment() | dict(extra_env or {}), cwd=cwd, stdin=None, start_new_session=True
            )
            assert process.stdout is not None
            assert process.stderr is not None

            async def drain_stderr(stream: ByteReceiveStream) -> None:
                held = 0
                async for chunk in stream:
                    if held < _STDERR_BYTES:
                        errors.append(chunk[: _STDERR_BYTES - held])
                        held += len(chunk)

            async with anyio.create_task_group() as tg:
                tg.start_soon(drain_stderr, process.stderr)
                async for chunk in process.stdout:
                    if size + len(chunk) > max_bytes:
                        chunks.append(chunk[: max_bytes - size])
                        size = max_bytes
                        truncated = True
                        _kill(process)
                        break
                    chunks.append(chunk)
                    size += len(chunk)
            returncode = await process.wait()
    except TimeoutError:
        if process is not None and process.returncode is None:
            _kill(process)
        raise GitTimeout(f"git did not answer within {within:g}s") from None
    finally:
        if process is not None:
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    _kill(process)
                    await process.wait()
                await process.aclose()
    stderr = b"".join(errors).decode("utf-8", errors="replace").strip()
    if not truncated and returncode not in ok:
        raise GitError(
            stderr.splitlines()[-1] if stderr else f"git exited {returncode}", returncode=returncode, stderr=stderr
        )
    return Output(b"".join(chunks), returncode, truncated)


def _kill(process: Process) -> None:
    """Stop git and whatever it started (a fetch runs index-pack, remote helpers): its whole session."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()


async def git(
    repo: Repo,
    *args: str,
    within: float,
    max_bytes: int = DEFAULT_MAX_BYTES,
    ok: Sequence[int] = (0,),
    extra_env: Mapping[str, str] | None = None,
) -> Output:
    # A filter runs only when git reads working-tree files: a bare repository needs no look-up (one git call less).
    filters = await neutral(repo, within=within) if repo.worktree else []
    return await run(
        [*repo.base_args(), *_OFFLINE, *filters, *args], within=within, max_bytes=max_bytes, ok=ok, extra_env=extra_env
    )


# --- what JCT asks of a repository -------------------------------------------------------


async def resolve(repo: Repo, ref: str, *, within: float) -> str | None:
    """The commit `ref` names, or None when there is no such commit."""
    out = await git(
        repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}", within=within, ok=(0, 1, 128)
    )
    sha = out.text.strip()
    return sha if out.returncode == 0 and SHA.match(sha) else None


async def is_ancestor(repo: Repo, ancestor: str, descendant: str, *, within: float) -> bool:
    out = await git(repo, "merge-base", "--is-ancestor", ancestor, descendant, within=within, ok=(0, 1))
    return out.returncode == 0


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
    repo: Repo, base: str, head: str | None, *, within: float, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[list[FileChange], bool]:
    """Files changed from `base` to `head` (to the working tree when head is None), and whether the list was cut."""
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
        within=within,
        max_bytes=max_bytes,
    )
    counts = _parse_numstat(numstat_out.stdout)
    changes = []
    for status, path, old in _parse_name_status(status_out.stdout):
        added, removed = counts.get(path, (None, None))
        changes.append(FileChange(path, status, added, removed, old))
    return changes, status_out.truncated or numstat_out.truncated


def _fields(raw: bytes) -> list[str]:
    return [f.decode("utf-8", errors="replace") for f in raw.split(b"\0")]


def _parse_name_status(raw: bytes) -> list[tuple[str, str, str | None]]:
    fields = _fields(raw)
    out: list[tuple[str, str, str | None]] = []
    i = 0
    while i < len(fields) and fields[i]:
        code = fields[i]
        letter = code[:1]
        if letter in ("R", "C") and i + 2 < len(fields):
            out.append((letter, fields[i + 2], fields[i + 1]))
            i += 3
        elif i + 1 < len(fields):
            out.append((letter, fields[i + 1], None))
            i += 2
        else:
            break
    return out


def _parse_numstat(raw: bytes) -> dict[str, tuple[int | None, int | None]]:
    fields = _fields(raw)
    counts: dict[str, tuple[int | None, int | None]] = {}
    i = 0
    while i < len(fields) and fields[i]:
        parts = fields[i].split("\t")
        if len(parts) < 3:
            break
        added = int(parts[0]) if parts[0].isdigit() else None
        removed = int(parts[1]) if parts[1].isdigit() else None
        if parts[2]:
            counts[parts[2]] = (added, removed)
            i += 1
        elif i + 2 < len(fields):  # a rename: old and new path follow as their own fields
            counts[fields[i + 2]] = (added, removed)
            i += 3
        else:
            break
    return counts


async def untracked_files(repo: Repo, *, within: float, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[list[str], bool]:
    out = await git(repo, "ls-files", "--others", "--exclude-standard", "-z", within=within, max_bytes=max_bytes)
    names = [f for f in _fields(out.stdout) if f]
    if out.truncated and names:
        names.pop()  # the last name may be cut
    return names, out.truncated


async def fetch(repo: Repo, url: str, *, within: float, max_bytes: int) -> None:
    """Bring `url`'s branches into JCT's bare cache `repo`, within a timeout and a cap on the cache's size
    (a force-pushed branch is followed: `+`)."""
    if not (repo.path / "HEAD").is_file():
        repo.path.mkdir(parents=True, exist_ok=True)
        await run([GIT, "init", "--bare", "--quiet", str(repo.path)], within=within)
    args = [
        *repo.base_args(),
        "fetch",
        "--quiet",
        "--prune",
        "--no-tags",
        "--end-of-options",
        url,
        "+refs/heads/*:refs/heads/*",
    ]
    over = False

    async def watch(scope: anyio.CancelScope) -> None:
        nonlocal over
        while True:
            await anyio.sleep(0.2)
            if await anyio.to_thread.run_sync(_tree_bytes, repo.path) > max_bytes:
                over = True
                scope.cancel()
                return

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch, tg.cancel_scope)
        try:
            await run(args, within=within)
        finally:
            tg.cancel_scope.cancel()
    if over or await anyio.to_thread.run_sync(_tree_bytes, repo.path) > max_bytes:
        raise GitError(f"fetching {url} passed the cap of {max_bytes} bytes (JCT_GIT_FETCH_MAX_BYTES)")


def _tree_bytes(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total
