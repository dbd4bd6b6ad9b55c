"""A run's workspace in an integrable repository (DESIGN section 16): its branch, and its worktree on JCT's
machine.

- At claim: a branch `jct/run-<run id>` at the run's base commit, and (for a repository on JCT's disk) a linked
  worktree on it under JCT_WORKTREES_DIR; a URL location gets the branch pushed to it instead, for a remote
  agent to fetch, commit on and push. Recorded on the run (`runs.workspace`) and returned with the claim.
- Work is carried forward (`carried`): when the task's previous run ended with commits on its branch that were
  not merged (it expired, was released, or was sent back for changes), the new branch starts at that branch's
  tip, on the previous run's base, so a killed agent's commits (also one its orphaned shell pushed after the
  run ended, if before the next claim) and a reviewed attempt are built on, not lost. A conflict or a failed
  check starts from the current target instead: the work must be redone on it (section 16).
- At completion: whatever the agent left uncommitted in its worktree is committed for it (never lost
  silently, and named in the commit's message), and the branch's tip is the run's head.
- Once the run has ended its worktree is removed (its branch stays until the task's work is merged): after a
  completion has answered (handed off), and before the merged branch is deleted at the latest (`retire`); the
  sweeper removes any worktree whose run is no longer running, after a crash too. What an ended run's worktree
  holds is committed on its branch first; one whose leftovers cannot be (`_keep_leftovers`) stays.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from server.core.git import gitcli, merges, workspaces
from server.core.git.repos import Place
from server.core.integration.queue import CHECK_FAILED, CONFLICT
from server.core.service import Core
from server.db import integrations, queries
from server.db.records import Run
from server.errors import JctError
from server.vocab import RunStatus

log = logging.getLogger(__name__)

# The directory under JCT_WORKTREES_DIR that holds check commands' scratch worktrees.
SCRATCH = "scratch"
LEFTOVERS_MESSAGE = "Work left uncommitted in the workspace when the run ended (committed by JCT)"


@dataclass(frozen=True)
class Carried:
    """The unmerged work of the task's previous run that a new run's branch starts from."""

    run_id: str
    head: str
    base: str


async def carried(core: Core, place: Place, task_id: str, run_id: str) -> Carried | None:
    """The previous run of the task whose commits the new run `run_id` builds on, if any (see the module)."""
    async with core.db.read() as conn:
        previous = next((run for run in await queries.runs_of_task(conn, task_id, limit=2) if run.id != run_id), None)
        if previous is None or not previous.workspace or previous.base_commit is None:
            return None
        integration = (await integrations.of_runs(conn, [previous.id])).get(previous.id)
    if integration is not None and integration.status in (CONFLICT, CHECK_FAILED):
        return None
    path = previous.workspace.get("path")
    await core.handoffs.settled(previous.id)  # its worktree's removal, if this process is doing it
    if path and previous.status != RunStatus.RUNNING and await anyio.Path(path).is_dir():
        await _keep_leftovers(Path(path), previous.id, core.settings.git_timeout_seconds)  # before the sweeper
    try:
        tip = await gitcli.resolve(
            place.repo, "refs/heads/" + previous.workspace["branch"], within=core.settings.git_timeout_seconds
        )
    except (JctError, gitcli.GitError) as exc:
        log.warning("could not read the branch of run %s: %s", previous.id, exc)
        return None
    if tip is None or tip == previous.base_commit:
        return None
    return Carried(previous.id, tip, previous.base_commit)


async def open_workspace(
    core: Core, place: Place, run_id: str, base: str, carry: Carried | None = None
) -> dict[str, Any] | None:
    """The run's branch (and worktree) at `base` in a writable repository, or at the tip of the work it carries
    forward (then its base is that work's base), for the caller to record on the run; None when the workspace
    cannot be made now (the claim stands either way; the reason is logged)."""
    within = core.settings.git_timeout_seconds
    branch = workspaces.branch_name(run_id)
    start = carry.head if carry is not None else base
    path: Path | None = None
    try:
        if place.url is not None:
            if not await merges.push(place.repo, place.url, start, branch, within=within):
                raise gitcli.GitError(f"the remote refused branch {branch}")
        else:
            path = workspaces.worktree_path(core.settings.worktrees, place.repo.path, run_id)
            await workspaces.create(place.repo, branch=branch, base=start, path=path, within=within)
    except (JctError, gitcli.GitError) as exc:
        log.warning("no workspace for run %s of %s: %s", run_id, place.name, exc)
        return None
    made = {"path": str(path) if path is not None else None, "branch": branch, "base_commit": base}
    if carry is not None:
        made |= {"base_commit": carry.base, "continues_run": carry.run_id, "start_commit": carry.head}
    return made


async def head_of(core: Core, place: Place, run: Run) -> str | None:
    """The run's head at completion: its branch's tip, after committing what the agent left in its worktree.
    None when the run has no workspace."""
    workspace = run.workspace
    if not workspace:
        return None
    within = core.settings.git_timeout_seconds
    path = workspace.get("path")
    if path and await anyio.Path(path).is_dir():
        committed = await workspaces.commit_leftovers(Path(path), message=LEFTOVERS_MESSAGE, within=within)
        if committed is not None:
            log.info("committed leftovers of run %s as %s", run.id, committed)
    return await gitcli.resolve(place.repo, "refs/heads/" + workspace["branch"], within=within)


async def close(core: Core, run: Run) -> None:
    """The run has ended: its worktree goes (its branch stays until its work is merged)."""
    path = (run.workspace or {}).get("path")
    if not path:
        return
    try:
        await _remove(Path(path), core.settings.git_timeout_seconds)
    except (gitcli.GitError, OSError) as exc:
        log.warning("could not remove the worktree of run %s: %s", run.id, exc)


async def retire(core: Core, place: Place, run_id: str) -> bool:
    """An ended run's worktree goes as the sweeper takes it: what its agent left uncommitted is committed on
    its branch first (`_keep_leftovers`). True when it is gone (git refuses to delete a branch checked out in a
    worktree); False when what it holds could not be put on the branch: then it stays, and so must the branch.
    The completion hands the removal off (server/core/handoff.py), so this process may not have done it yet;
    another process may have deleted the directory and not yet its entry in the repository (pruned here)."""
    path = workspaces.worktree_path(core.settings.worktrees, place.repo.path, run_id)
    within = core.settings.git_timeout_seconds
    if await _take_down(core, path, run_id, leftovers=True) is False:
        return False
    try:
        await workspaces.worktree(place.repo, "prune", within=within, neutralised=[])
    except gitcli.GitError as exc:
        log.warning("could not prune the worktree of run %s: %s", run_id, exc)
        return False
    return True


async def sweep(core: Core) -> int:
    """Remove every worktree under JCT_WORKTREES_DIR whose run is no longer running, and every check's scratch
    worktree whose integration is not being worked (its integrator died); how many went."""
    root = core.settings.worktrees
    if not root.is_dir():
        return 0
    candidates = await anyio.to_thread.run_sync(_run_dirs, root)
    if not candidates:
        return 0
    ids = [name for _, name in candidates]
    async with core.db.read() as conn:
        statuses = await queries.run_statuses(conn, ids)
        merging = await integrations.merging_runs(conn, ids)
    removed = 0
    for path, run_id in candidates:
        live = run_id in merging if path.parent.name == SCRATCH else statuses.get(run_id) == RunStatus.RUNNING
        if live:
            continue
        if await _take_down(core, path, run_id, leftovers=path.parent.name != SCRATCH):
            removed += 1
    return removed


async def _take_down(core: Core, path: Path, run_id: str, *, leftovers: bool) -> bool | None:
    """The worktree at `path` of a run that has ended, removed once a removal under way in this process is done
    (never keep half a deletion) and, with `leftovers`, what its agent left is on its branch (`_keep_leftovers`).
    None: nothing was there; True: removed; False: kept (it holds what is on no branch) or not removable."""
    await core.handoffs.settled(run_id)
    if not await anyio.Path(path).is_dir():
        return None
    within = core.settings.git_timeout_seconds
    if leftovers and not await _keep_leftovers(path, run_id, within):
        return False  # never lost (said once per process)
    try:
        await _remove(path, within)
    except (gitcli.GitError, OSError) as exc:
        log.warning("could not remove worktree %s: %s", path, exc)
        return False
    return True


async def _keep_leftovers(path: Path, run_id: str, within: float) -> bool:
    """What an agent left uncommitted in the worktree of a run that ended without completing (it expired, was
    released or cancelled), committed on its branch before the worktree goes, so the next run carries it. True
    when everything the worktree holds is then on the run's branch; False (said once per process) when it is
    not: the index is locked, HEAD is off the branch with commits or changes of its own, or git cannot read it.
    Such a worktree must stay. A directory without `.git` is no worktree (a claim that died making it): True."""
    if not await anyio.Path(path / ".git").exists():
        return True
    try:
        branch = workspaces.branch_name(run_id)
        repo = gitcli.Repo(path, worktree=True)
        head = await gitcli.git(repo, "symbolic-ref", "-q", "HEAD", within=within, ok=(0, 1), neutralised=[])
        if head.text.strip() != f"refs/heads/{branch}":
            if await _nothing_off(repo, f"refs/heads/{branch}", within):
                return True
            raise gitcli.GitError(f"HEAD is not {branch}, and holds work that is not on it")
        committed = await workspaces.commit_leftovers(path, message=LEFTOVERS_MESSAGE, within=within)
    except (JctError, gitcli.GitError, OSError) as exc:
        if run_id not in _KEPT:
            _KEPT.add(run_id)
            log.warning("kept the worktree of run %s (%s): what it holds is on no branch: %s", run_id, path, exc)
        return False
    if committed is not None:
        log.info("committed leftovers of ended run %s as %s", run_id, committed)
    return True


# The runs whose worktree `_keep_leftovers` kept, said once per process (the sweeper looks again every pass).
_KEPT: set[str] = set()


async def _nothing_off(repo: gitcli.Repo, ref: str, within: float) -> bool:
    """A worktree whose HEAD left the run's branch holds nothing of its own: its commit is on the branch and
    nothing is changed or untracked (ignored files aside)."""
    head = await gitcli.resolve(repo, "HEAD", within=within)
    tip = await gitcli.resolve(repo, ref, within=within)
    if head is None or tip is None or not await gitcli.is_ancestor(repo, head, tip, within=within):
        return False
    status = await gitcli.git(repo, "status", "--porcelain=v1", "-z", "--untracked-files=all", within=within)
    return status.text == ""


def scratch_path(core: Core, run_id: str) -> Path:
    """Where the check of a run's integration runs (reused, after removal, by an integrator that takes over)."""
    return core.settings.worktrees / SCRATCH / run_id


def _run_dirs(root: Path) -> list[tuple[Path, str]]:
    """<root>/<repository dir>/<run id>: every worktree JCT made, with its run id."""
    found = []
    for repo_dir in root.iterdir():
        if not repo_dir.is_dir() or repo_dir.is_symlink():
            continue
        for run_dir in repo_dir.iterdir():
            if run_dir.is_dir() and not run_dir.is_symlink():
                found.append((run_dir, run_dir.name))
    return found


async def _remove(path: Path, within: float) -> None:
    """A linked worktree and its administrative entry in its repository."""
    git_file = path / ".git"
    common: Path | None = None
    if git_file.is_file():
        text = git_file.read_text(errors="replace").strip()
        if text.startswith("gitdir:"):
            admin = Path(text.removeprefix("gitdir:").strip())
            # <repo git dir>/worktrees/<name>: the repository is two levels up.
            common = admin.parent.parent if admin.parent.name == "worktrees" else None
    await anyio.to_thread.run_sync(lambda: shutil.rmtree(path, ignore_errors=True))
    if common is not None and common.is_dir():
        await workspaces.worktree(gitcli.Repo(common), "prune", within=within)
