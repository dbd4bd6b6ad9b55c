"""Which repositories JCT may read, and where they are (DESIGN section 13).

A task is **verifiable** when JCT can read its `target_repo` itself:

- its name starts with a `JCT_REPOS` prefix: the rest of the name is a repository under that location (a
  local directory of repositories, read in place, or a git URL fetched into `$JCT_HOME/git`);
- or, with `JCT_AUTH=none` only (one developer, local sessions), it is the absolute path of a local git
  working tree, whose uncommitted changes count too.

JCT reads nothing outside those places: a repository's path is resolved (symlinks followed) and must stay
under its configured location. With tokens on, a `target_repo` that is a local path is refused at enqueue.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import anyio

from server.config import Settings, is_git_url
from server.core.git import gitcli
from server.errors import ErrorCode, JctError

# One segment of the part of a repository name below its prefix: no option, no hidden name, no '..'.
_SEGMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$")
# A fetched repository is fetched again only after this many seconds (several reads share one fetch).
REFETCH_SECONDS = 2.0


def looks_local(target_repo: str) -> bool:
    """A target_repo that names a place on the server's disk rather than a repository name."""
    repo = target_repo.strip()
    return (
        repo.startswith(("/", "~", "./", "../", "\\"))
        or repo.lower().startswith("file:")
        or re.match(r"^[A-Za-z]:[\\/]", repo) is not None
        or repo in (".", "..")
    )


@dataclass(frozen=True)
class Place:
    """Where one verifiable repository is read."""

    name: str
    repo: gitcli.Repo
    # Everything read lies under this directory (its real path).
    root: Path
    # Fetched from here into repo.path (JCT's cache), or None for a repository read in place.
    url: str | None = None
    # A local working tree (JCT_AUTH=none): its uncommitted changes are part of the run's change.
    local_tree: bool = False
    # Integrable (DESIGN section 16): JCT may write it (branches, worktrees, the target ref).
    writable: bool = False
    # Where JCT makes its runs' worktrees (JCT_WORKTREES_DIR): a writable repository's linked worktrees may lie
    # there as well as under its location.
    worktrees: Path | None = None


@dataclass
class Repos:
    settings: Settings
    _locks: dict[str, anyio.Lock] = field(default_factory=dict)
    _fetched: dict[str, float] = field(default_factory=dict)

    @property
    def timeout(self) -> float:
        return self.settings.git_timeout_seconds

    @property
    def cache(self) -> Path:
        return self.settings.home / "git"

    def place_of_any(self) -> bool:
        """Whether any task can be verifiable here (JCT_REPOS set, or local working trees allowed)."""
        return bool(self.settings.repos) or self.settings.auth == "none"

    def place(self, target_repo: str) -> Place | None:
        """Where `target_repo` is read, or None when the task is not verifiable. Touches no disk."""
        name = target_repo.strip()
        for prefix, location in self.settings.repo_locations:
            if name.startswith(prefix):
                place = self._configured(name, name[len(prefix) :], location)
                if prefix in self.settings.repos_writable:
                    return replace(place, writable=True, worktrees=self.settings.worktrees)
                return place
        if self.settings.auth == "none" and name.startswith("/"):
            path = Path(name)
            return Place(
                name, gitcli.Repo(path, worktree=True), path, local_tree=True, writable=self.settings.integrate_local
            )
        return None

    def _configured(self, name: str, rest: str, location: str) -> Place:
        segments = [s for s in rest.strip("/").split("/") if s]
        if not all(_SEGMENT.match(s) for s in segments):
            raise JctError(
                ErrorCode.REPO_NOT_AVAILABLE,
                f"Repository name {name!r} has a part JCT will not read (a '..', a hidden or option-like name).",
                "Use the repository's plain name under its configured prefix (JCT_REPOS).",
            )
        if is_git_url(location):
            url = location.rstrip("/") + ("/" + "/".join(segments) if segments else "")
            slug = re.sub(r"[^A-Za-z0-9._-]+", "-", "-".join(segments) or "repo")[:60]
            digest = hashlib.sha256(url.encode()).hexdigest()[:16]
            cache = self.cache / f"{slug}-{digest}.git"
            return Place(name, gitcli.Repo(cache), self.cache, url=url)
        root = Path(location).expanduser()
        path = root.joinpath(*segments) if segments else root
        return Place(name, gitcli.Repo(path), root)

    async def open(self, target_repo: str, *, max_age: float | None = 0.0) -> Place | None:
        """The place of a verifiable repository, checked readable; a URL's is fetched first unless it was
        fetched less than `max_age` seconds ago (None: only when JCT has no copy yet). None when the task is
        not verifiable. REPO_NOT_AVAILABLE when JCT cannot read it."""
        place = self.place(target_repo)
        if place is None:
            return None
        if place.url is not None:
            await self._fetch(place, max_age=max_age)
            return place
        checked = await anyio.to_thread.run_sync(_confined, place)
        return checked

    async def _fetch(self, place: Place, *, max_age: float | None) -> None:
        assert place.url is not None
        key = str(place.repo.path)
        lock = self._locks.setdefault(key, anyio.Lock())
        async with lock:
            age = time.monotonic() - self._fetched.get(key, float("-inf"))
            have = (place.repo.path / "HEAD").is_file()
            if have and (max_age is None or age < max_age):
                return
            try:
                await fetch(place.repo, place.url, within=self.timeout, max_bytes=self.settings.git_fetch_max_bytes)
            except gitcli.GitError as exc:
                raise unavailable(place.name, str(exc)) from None
            self._fetched[key] = time.monotonic()


def _confined(place: Place) -> Place:
    """Resolve a repository read in place (symlinks followed) and check it lies under its location and is
    a git repository: a bare one, or a working tree with its `.git` directory."""
    path = place.repo.path
    if not place.local_tree and not path.exists() and path.with_name(path.name + ".git").exists():
        path = path.with_name(path.name + ".git")  # myorg/api read from <location>/api.git
    try:
        root = place.root.resolve(strict=True)
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise unavailable(place.name, "there is no such directory") from None
    if not real.is_relative_to(root):
        raise unavailable(place.name, "it leads outside its configured location (a symlink?)")
    git_dir = real / ".git"
    if git_dir.is_symlink() or git_dir.is_file():
        # A .git file or link points somewhere else (a linked worktree, a submodule): read it only when that
        # place is itself under the location.
        target = _gitdir_of(git_dir)
        if target is None or not (place.local_tree or target.is_relative_to(root)):
            raise unavailable(place.name, "its .git leads outside its configured location")
        _git_dir_inside(place, target, root)
        return replace(place, repo=gitcli.Repo(real, worktree=True), root=root)
    if git_dir.is_dir():
        _git_dir_inside(place, git_dir, root)
        return replace(place, repo=gitcli.Repo(real, worktree=True), root=root)
    if place.local_tree:
        raise unavailable(place.name, "it is not a git working tree")
    if (real / "HEAD").is_file() and (real / "objects").is_dir():
        _git_dir_inside(place, real, root)
        return replace(place, repo=gitcli.Repo(real), root=root)
    raise unavailable(place.name, "it is not a git repository")


def _git_dir_inside(place: Place, git_dir: Path, root: Path) -> None:
    """Every path git may open for this repository lies under `root`, or the repository is refused: its
    common directory (`commondir`), its object store, every store its alternates name (and theirs), its
    linked worktrees (`worktrees/*/gitdir`), the files its config includes, and the target of every symlink
    inside any of them (a pack, a loose object directory, `info/grafts`, `packed-refs`, a ref)."""
    if place.local_tree:
        return
    seen: set[Path] = set()
    pending = [(git_dir, "its git directory")]
    while pending:
        directory, what = pending.pop()
        real = directory.resolve()
        if real in seen:
            continue
        seen.add(real)
        if not real.is_relative_to(root):
            raise unavailable(place.name, f"{what} leads outside its configured location")
        _links_inside(place, real, root)
        common = _pointer(real / "commondir", real)
        if common is not None:
            pending.append((common, "its commondir"))
        objects = (real / "objects").resolve()
        if objects.exists():
            if not objects.is_relative_to(root):
                raise unavailable(place.name, "its object store leads outside its configured location")
            if not objects.is_relative_to(real):  # a link to another directory: not walked above
                _links_inside(place, objects, root)
            _alternates_inside(place, objects, root)
        for link in sorted((real / "worktrees").glob("*/gitdir")):
            target = _pointer(link, link.parent)
            own = place.worktrees is not None and target is not None and target.is_relative_to(_real(place.worktrees))
            if target is not None and not target.is_relative_to(root) and not own:
                raise unavailable(place.name, "a linked worktree of it (worktrees/*/gitdir) is outside its location")
        _includes_inside(place, real / "config", root, depth=0)


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path


def _pointer(file: Path, base: Path) -> Path | None:
    """The directory a one-line pointer file (`commondir`, `gitdir`) names, resolved; None without one."""
    try:
        text = file.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    if not text:
        return None
    target = Path(text)
    return (target if target.is_absolute() else base / target).resolve()


# Directories found to hold no symlink at all, by (directory, root): their mtime then, and their subdirectories.
# A directory whose mtime is unchanged has the same entries (adding or replacing one changes it), so a repository
# opened again costs a stat per directory, not a listing of every loose object. A directory holding a link is
# listed every time: where its link leads can change without it.
_CLEAN_DIRS: dict[tuple[str, Path], tuple[int, tuple[str, ...]]] = {}


def _links_inside(place: Place, directory: Path, root: Path) -> None:
    """No symlink under `directory` (a pack, a loose object's directory, grafts, a ref) leads outside."""
    stack = [str(directory)]
    while stack:
        current = stack.pop()
        try:
            mtime = os.stat(current).st_mtime_ns
        except OSError:
            continue
        known = _CLEAN_DIRS.get((current, root))
        if known is not None and known[0] == mtime:
            stack.extend(known[1])
            continue
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        subdirs, links = [], False
        for entry in entries:
            if entry.is_symlink():
                links = True
                if not Path(entry.path).resolve().is_relative_to(root):
                    rel = os.path.relpath(entry.path, directory)
                    raise unavailable(place.name, f"its {rel} is a link that leads outside its configured location")
            elif entry.is_dir(follow_symlinks=False):
                subdirs.append(entry.path)
        if not links:
            _CLEAN_DIRS[(current, root)] = (mtime, tuple(subdirs))
        stack.extend(subdirs)


_MAX_ALTERNATES_DEPTH = 5  # git follows alternates of alternates this deep


def _alternates_inside(place: Place, objects: Path, root: Path, depth: int = 0) -> None:
    """objects/info/alternates names more object stores git reads as its own (and theirs, in turn)."""
    try:
        listed = (objects / "info" / "alternates").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return
    for entry in (line.strip() for line in listed):
        if not entry or entry.startswith("#"):
            continue
        store = (objects / entry).resolve()
        if not store.is_relative_to(root):
            raise unavailable(place.name, "its object store borrows objects from outside its configured location")
        if depth < _MAX_ALTERNATES_DEPTH:
            _links_inside(place, store, root)
            _alternates_inside(place, store, root, depth + 1)


# A section of a git config file, and a `path = ...` line in it.
_SECTION = re.compile(r'^\s*\[\s*([A-Za-z0-9.-]+)(?:\s+"[^"]*")?\s*\]')
_PATH = re.compile(r"^\s*path\s*=\s*(.*?)\s*$", re.IGNORECASE)


def _includes_inside(place: Place, config: Path, root: Path, *, depth: int) -> None:
    """A config's `[include]`/`[includeIf]` paths make git read other files: each must be inside too."""
    try:
        lines = config.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return
    section = ""
    for line in lines:
        if header := _SECTION.match(line):
            section = header.group(1).lower()
            line = line[header.end() :]
        if section not in ("include", "includeif") or not (found := _PATH.match(line)):
            continue
        value = found.group(1).split("#")[0].split(";")[0].strip().strip('"')
        if not value:
            continue
        target = Path(value).expanduser()
        target = (target if target.is_absolute() else config.parent / target).resolve()
        if not target.is_relative_to(root):
            raise unavailable(place.name, "its config includes a file outside its configured location")
        if depth < _MAX_ALTERNATES_DEPTH:
            _includes_inside(place, target, root, depth=depth + 1)


def _gitdir_of(dot_git: Path) -> Path | None:
    try:
        if dot_git.is_symlink():
            return dot_git.resolve(strict=True)
        text = dot_git.read_text(encoding="utf-8", errors="replace").strip()
    except (OSError, RuntimeError):
        return None
    if not text.startswith("gitdir:"):
        return None
    target = Path(text.removeprefix("gitdir:").strip())
    if not target.is_absolute():
        target = dot_git.parent / target
    try:
        return target.resolve(strict=True)
    except (OSError, RuntimeError):
        return None


def unavailable(name: str, why: str) -> JctError:
    return JctError(
        ErrorCode.REPO_NOT_AVAILABLE,
        f"JCT cannot read repository {name!r}: {why}.",
        "Check that the repository exists at its configured location (JCT_REPOS) and that JCT may read it, "
        "or push your work there; then call again.",
    )


async def fetch(repo: gitcli.Repo, url: str, *, within: float, max_bytes: int) -> None:
    """Bring `url`'s branches into JCT's bare cache `repo`, within a timeout and a cap on the cache's size
    (a force-pushed branch is followed: `+`)."""
    if not (repo.path / "HEAD").is_file():
        repo.path.mkdir(parents=True, exist_ok=True)
        await gitcli.run([gitcli.GIT, "init", "--bare", "--quiet", str(repo.path)], within=within)
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
            await gitcli.run(args, within=within, remote=True)
        finally:
            tg.cancel_scope.cancel()
    if over or await anyio.to_thread.run_sync(_tree_bytes, repo.path) > max_bytes:
        raise gitcli.GitError(f"fetching {url} passed the cap of {max_bytes} bytes (JCT_GIT_FETCH_MAX_BYTES)")


def _tree_bytes(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total
