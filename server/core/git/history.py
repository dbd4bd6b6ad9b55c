"""Read-only views of verifiable repositories: a branch's log, a diff (of a run or between two refs), a file
at a ref. Everything is read through server/core/git/gitcli.py, cut at `max_chars` with a marker that says so."""

from __future__ import annotations

from typing import Any

from server.core import results
from server.core.git import diffs, gitcli
from server.core.git.repos import Place
from server.core.models import Limits, check_text, parse_run_id
from server.core.service import Core, decode_cursor, encode_cursor
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


async def git_log(
    core: Core,
    repo: str,
    ref: str = "main",
    path: str | None = None,
    limit: int = 20,
    *,
    since_ref: str | None = None,
    cursor: str | None = None,
    tags: bool = False,
) -> results.GitLog:
    """Commits reachable from `ref` and not from `since_ref`, newest first, `limit` a page; `next_cursor` carries
    the commits the first page was read at, so later pages continue the same list even if the branch moved.
    With `tags`, the repository's tags instead, newest first."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LOG:
        raise invalid(f"limit must be 1..{MAX_LOG}.", "Pass a smaller limit.")
    place = await _place(core, repo)
    if cursor is not None:
        sha, since, skip = decode_cursor(cursor, "word", "word", "serial")
        sha, since = gitcli.check_ref(sha, "cursor"), gitcli.check_ref(since, "cursor") if since else None
    else:
        sha = await _commit(core, place, ref, "ref")
        since = await _commit(core, place, since_ref, "since_ref") if since_ref is not None else None
        skip = 0
    if tags:
        listed, more = await _tags(core, place, skip, limit)
        following = encode_cursor(sha, "", skip + limit) if more else None
        return results.GitLog(repo=place.name, ref=ref, head=sha, commits=[], tags=listed, next_cursor=following)
    fmt = _US.join(("%H", "%P", "%an", "%aI", "%s")) + _RS
    revs = [sha, f"^{since}"] if since else [sha]
    args = ["log", f"--format={fmt}", f"--max-count={limit + 1}", f"--skip={skip}", "--end-of-options", *revs]
    out = await _read(core, place, [*args, "--", *_paths(path)], 64 * (limit + 1) * 16)
    commits = []
    for record in out.text.split(_RS):
        fields = record.strip("\n").split(_US)
        if len(fields) == 5:
            commits.append(
                results.GitCommit(
                    commit=fields[0], parents=fields[1].split(), author=fields[2], date=fields[3], subject=fields[4]
                )
            )
    following = encode_cursor(sha, since or "", skip + limit) if len(commits) > limit else None
    return results.GitLog(repo=place.name, ref=ref, head=sha, commits=commits[:limit], next_cursor=following)


async def _tags(core: Core, place: Place, skip: int, limit: int) -> tuple[list[results.GitTag], bool]:
    """A page of the repository's tags, newest first (by the tag's date, or its commit's for a lightweight tag),
    each with the commit it points at; and whether more follow."""
    fmt = "%1f".join(("%(refname:short)", "%(objectname)", "%(*objectname)", "%(creatordate:iso-strict)"))
    fmt += "%1f%(contents:subject)%1e"
    args = [
        "for-each-ref",
        "--sort=-refname",
        "--sort=-creatordate",
        f"--count={skip + limit + 1}",
        f"--format={fmt}",
        "refs/tags",
    ]
    out = await _read(core, place, args, 64 * (skip + limit + 1) * 16)
    listed = []
    for record in out.text.split(_RS):
        fields = record.strip("\n").split(_US)
        if len(fields) == 5:
            name, target, peeled, date, subject = fields
            listed.append(results.GitTag(name=name, commit=peeled or target, date=date, subject=subject))
    return listed[skip : skip + limit], len(listed) > skip + limit


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
    files = await _files(core, place, base_sha, head_sha, path)
    text, cut, total = _cut(await _read(core, place, args, max_chars), max_chars)
    return results.GitText(
        repo=place.name, base=base_sha, head=head_sha, files=files, text=text, truncated=cut, total_chars=total
    )


async def _files(core: Core, place: Place, base: str, head: str | None, path: str | None) -> list[results.GitFile]:
    """A diff's files (path, status, lines added and removed), read with its text: what a reader scans first."""
    try:
        changes, _ = await diffs.changed_files(
            place.repo, base, head, within=core.settings.git_timeout_seconds, paths=_paths(path)
        )
    except gitcli.GitError as exc:
        raise JctError(
            ErrorCode.REPO_NOT_AVAILABLE, f"git could not read {place.name!r}: {exc}.", "Call again."
        ) from None
    return [results.GitFile.model_validate(change.as_dict()) for change in changes]


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
    files = await _files(core, place, base, head, path)
    text, cut, total = _cut(await _read(core, place, args, max_chars), max_chars)
    return results.GitText(
        repo=place.name, base=base, head=head, files=files, text=text, truncated=cut, total_chars=total
    )


async def git_show(core: Core, repo: str, ref: str, path: str, max_chars: int = 20_000) -> results.GitText:
    """A file (or a directory's listing, each entry with its size in bytes) at a ref; a binary file is named, not
    printed."""
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
    # A directory as `git ls-tree -l` lists it: mode, type, object, size ("-" for a subdirectory), name.
    args = ["ls-tree", "-l", "--end-of-options", spec] if kind.strip() == "tree" else ["cat-file", "blob", spec]
    out = await _read(core, place, args, max_chars)
    if kind.strip() == "blob" and b"\0" in out.stdout[:8000]:
        text = f"[binary file, {size} bytes: JCT does not print it]"
        return results.GitText(repo=place.name, head=sha, text=text, truncated=False, total_chars=len(text))
    text, cut, total = _cut(out, max_chars)
    return results.GitText(repo=place.name, head=sha, text=text, truncated=cut, total_chars=total)
