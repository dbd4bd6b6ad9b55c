"""A run's workspace in an integrable repository (DESIGN section 16): its branch, and its worktree on JCT's
machine.

- At claim: a branch `jct/run-<run id>` at the run's base commit, and (for a repository on JCT's disk) a linked
  worktree on it under JCT_WORKTREES_DIR; a URL location gets the branch pushed to it instead, for a remote
  agent to fetch, commit on and push. Recorded on the run (`runs.workspace`) and returned with the claim.
- At completion: whatever the agent left uncommitted in its worktree is committed for it (never lost
  silently, and named in the commit's message), and the branch's tip is the run's head.
- Once the run has ended its worktree is removed (its branch stays until its work is merged); the sweeper
  removes any worktree whose run is no longer running, after a crash too.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import anyio

from server.core.git import gitcli, merges, workspaces
from server.core.git.repos import Place
from server.core.service import Core
from server.db import integrations, queries
from server.db.records import Run
from server.errors import JctError
from server.vocab import RunStatus

log = logging.getLogger(__name__)

# The directory under JCT_WORKTREES_DIR that holds check commands' scratch worktrees.
SCRATCH = "scratch"
LEFTOVERS_MESSAGE = "Work left uncommitted in the workspace when the run completed (committed by JCT)"


async def open_workspace(core: Core, place: Place, run_id: str, base: str) -> dict[str, Any] | None:
    """The run's branch (and worktree) at `base` in a writable repository, for the caller to record on the run;
    None when the workspace cannot be made now (the claim stands either way; the reason is logged)."""
    within = core.settings.git_timeout_seconds
    branch = workspaces.branch_name(run_id)
    path: Path | None = None
    try:
        if place.url is not None:
            if not await merges.push(place.repo, place.url, base, branch, within=within):
                raise gitcli.GitError(f"the remote refused branch {branch}")
        else:
            path = workspaces.worktree_path(core.settings.worktrees, place.repo.path, run_id)
            await workspaces.create(place.repo, branch=branch, base=base, path=path, within=within)
    except (JctError, gitcli.GitError) as exc:
        log.warning("no workspace for run %s of %s: %s", run_id, place.name, exc)
        return None
    return {"path": str(path) if path is not None else None, "branch": branch, "base_commit": base}


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
        try:
            await _remove(path, core.settings.git_timeout_seconds)
            removed += 1
        except (gitcli.GitError, OSError) as exc:
            log.warning("could not remove worktree %s: %s", path, exc)
    return removed


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
        await gitcli.worktree(gitcli.Repo(common), "prune", within=within)
