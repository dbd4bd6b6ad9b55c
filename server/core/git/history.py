"""Read-only views of verifiable repositories: a branch's log, a diff (of a run or between two refs), a file
at a ref. Everything is read through server/core/git/gitcli.py, cut at `max_chars` with a marker that says so."""

from __future__ import annotations

from typing import Any

from server.core import results
from server.core.git import gitcli
from server.core.git.repos import Place
from server.core.models import Limits, check_text, parse_run_id
from server.core.service import Core
from server.db import queries
from server.errors import ErrorCode, JctError, invalid, not_found

MAX_CHARS = 100_000
MAX_LOG = 100
# A field separator git never prints inside a log's fields, and a record separator.
_US, _RS = "\x1f", "\x1e"
_DIFF = ("diff", "--no-ext-diff", "--no-textconv", "--no-color", "-M")


def marker(shown: int, total: str) -> str:
    return f"\n[... cut by JCT at {shown} characters of {total}; narrow it with path, or raise max_chars]"


async def _place(core: Core, repo: str) -> Place:
    if not isinstance(repo, str) or not repo.strip():
        raise invalid("repo must name a repository, e.g. myorg/api.", "Pass a task's target_repo.")
    check_text(repo, "repo", Limits.REPO, single_line=True)  # NUL or a newline is a bad argument, not a miss
    place = await core.repos.open(repo.strip(), max_age=2.0)
    if place is None:
        raise JctError(
            ErrorCode.REPO_NOT_AVAILABLE,
            f"JCT does not read repository {repo!r}: it is under no JCT_REPOS prefix"
            + (" (and local paths are refused while tokens are on)." if core.settings.auth == "token" else "."),
            "Pass the target_repo of a verifiable task (its prefix is configured in JCT_REPOS).",
        )
    return place


def _check_max(max_chars: int) -> int:
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or not 1 <= max_chars <= MAX_CHARS:
        raise invalid(f"max_chars must be 1..{MAX_CHARS}.", "Pass a smaller max_chars.")
    return max_chars


def _paths(path: str | None) -> list[str]:
    if path is None:
        return []
    checked = gitcli.check_path(path)
    return [checked] if checked else []


def _cut(out: gitcli.Output, max_chars: int) -> tuple[str, bool, int]:
    text = out.text
    cut = out.truncated or len(text) > max_chars
    total = len(text)
    if cut:
        text = text[:max_chars] + marker(max_chars, "more" if out.truncated else str(total))
    return text, cut, total


async def _read(core: Core, place: Place, args: list[str], max_chars: int) -> gitcli.Output:
    try:
        # A UTF-8 character is at most 4 bytes: this reads enough for max_chars, and a little to know it was cut.
        return await gitcli.git(
            place.repo, *args, within=core.settings.git_timeout_seconds, max_bytes=max_chars * 4 + 1
        )
    except gitcli.GitError as exc:
        raise JctError(
            ErrorCode.REPO_NOT_AVAILABLE,
            f"git could not read {place.name!r}: {exc}.",
            "Check the ref and path (jct_git_log lists commits), then call again.",
        ) from None


async def _commit(core: Core, place: Place, ref: str, field: str) -> str:
    checked = gitcli.check_ref(ref, field)
    try:
        sha = await gitcli.resolve(place.repo, checked, within=core.settings.git_timeout_seconds)
    except gitcli.GitError as exc:
        raise JctError(ErrorCode.REPO_NOT_AVAILABLE, f"git could not read {place.name!r}: {exc}.", "Retry.") from None
    if sha is None:
        raise JctError(
            ErrorCode.COMMIT_NOT_FOUND,
            f"Repository {place.name!r} has no commit {checked!r}.",
            "Use jct_git_log to list commits, or push the branch first.",
        )
    return sha


async def git_log(core: Core, repo: str, ref: str = "main", path: str | None = None, limit: int = 20) -> results.GitLog:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LOG:
        raise invalid(f"limit must be 1..{MAX_LOG}.", "Pass a smaller limit.")
    place = await _place(core, repo)
    sha = await _commit(core, place, ref, "ref")
    fmt = _US.join(("%H", "%P", "%an", "%aI", "%s")) + _RS
    args = ["log", f"--format={fmt}", f"--max-count={limit}", "--end-of-options", sha, "--", *_paths(path)]
    out = await _read(core, place, args, 64 * limit * 16)
    commits = []
    for record in out.text.split(_RS):
        fields = record.strip("\n").split(_US)
        if len(fields) == 5:
            commits.append(
                results.GitCommit(
                    commit=fields[0], parents=fields[1].split(), author=fields[2], date=fields[3], subject=fields[4]
                )
            )
    return results.GitLog(repo=place.name, ref=ref, head=sha, commits=commits)


async def git_diff(
    core: Core,
    *,
    run_id: str | None = None,
    repo: str | None = None,
    base: str | None = None,
    head: str | None = None,
    path: str | None = None,
    max_chars: int = 20_000,
) -> results.GitText:
    """A run's change (run_id), or the change between two refs of a repository (repo, base, head)."""
    _check_max(max_chars)
    if run_id is not None:
        if repo is not None or base is not None or head is not None:
            raise invalid(
                "Give run_id, or repo with base and head, not both.", "Pass run_id alone to see a run's change."
            )
        return await run_diff(core, run_id, path=path, max_chars=max_chars)
    if repo is None or base is None:
        raise invalid("Give run_id, or repo and base (and head, default the base's branch tip).", "Pass run_id alone.")
    place = await _place(core, repo)
    base_sha = await _commit(core, place, base, "base")
    head_sha = await _commit(core, place, head or "HEAD", "head")
    args = [*_DIFF, "--end-of-options", base_sha, head_sha, "--", *_paths(path)]
    text, cut, total = _cut(await _read(core, place, args, max_chars), max_chars)
    return results.GitText(repo=place.name, base=base_sha, head=head_sha, text=text, truncated=cut, total_chars=total)


async def run_diff(core: Core, run_id: str, *, path: str | None = None, max_chars: int = 20_000) -> results.GitText:
    """What a run changed in its repository, read by JCT: base_commit to the commit it reported (for a local
    working tree, to the tree as it is now when no commit was reported)."""
    run_id, _key = parse_run_id(run_id)
    async with core.db.read() as conn:
        run = await queries.get_run(conn, run_id)
        task = await queries.get_task(conn, run.task_id) if run is not None else None
    if run is None or task is None:
        raise not_found(ErrorCode.RUN_NOT_FOUND, "Run", run_id, "Use jct_get_task to list its runs.")
    base = run.base_commit
    if base is None:
        raise JctError(
            ErrorCode.REPO_NOT_AVAILABLE,
            f"Run {run_id} has no base commit: JCT did not read its repository {task.target_repo!r} at claim.",
            "Read the run's code_patch artifacts instead (jct_get_run lists them).",
        )
    place = await _place(core, task.target_repo)
    read: dict[str, Any] = run.files_changed or {}
    head = read.get("head")
    revs = [base, head] if head else [base]
    if not head and not place.local_tree:
        raise JctError(
            ErrorCode.COMMIT_NOT_FOUND,
            f"Run {run_id} has no verified commit yet.",
            "The agent reports its work with jct_report_artifact(artifact_type='commit'); then call again.",
        )
    args = [*_DIFF, "--end-of-options", *revs, "--", *_paths(path)]
    text, cut, total = _cut(await _read(core, place, args, max_chars), max_chars)
    return results.GitText(repo=place.name, base=base, head=head, text=text, truncated=cut, total_chars=total)


async def git_show(core: Core, repo: str, ref: str, path: str, max_chars: int = 20_000) -> results.GitText:
    """A file (or a directory's listing) at a ref; a binary file is named, not printed."""
    _check_max(max_chars)
    place = await _place(core, repo)
    sha = await _commit(core, place, ref, "ref")
    checked = gitcli.check_path(path)
    spec = f"{sha}:{checked}"
    try:
        kind = (await gitcli.git(place.repo, "cat-file", "-t", spec, within=core.settings.git_timeout_seconds)).text
        size = int(
            (await gitcli.git(place.repo, "cat-file", "-s", spec, within=core.settings.git_timeout_seconds)).text
        )
    except (gitcli.GitError, ValueError):
        raise JctError(
            ErrorCode.INVALID_ARGUMENT,
            f"{place.name!r} has no path {checked!r} at {sha[:12]}.",
            "Use jct_git_log with path, or show the parent directory to list it.",
        ) from None
    args = ["cat-file", "-p", spec] if kind.strip() == "tree" else ["cat-file", "blob", spec]
    out = await _read(core, place, args, max_chars)
    if kind.strip() == "blob" and b"\0" in out.stdout[:8000]:
        text = f"[binary file, {size} bytes: JCT does not print it]"
        return results.GitText(repo=place.name, head=sha, text=text, truncated=False, total_chars=len(text))
    text, cut, total = _cut(out, max_chars)
    return results.GitText(repo=place.name, head=sha, text=text, truncated=cut, total_chars=total)
