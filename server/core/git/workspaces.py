"""A run's branch and worktree in an integrable repository (DESIGN section 16): made at claim, its leftovers
committed at completion, removed once the run has ended (server/core/integration/workspace.py decides when)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from server.core.git import gitcli
from server.core.git.merges import JCT_EMAIL, JCT_NAME

_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


def branch_name(run_id: str) -> str:
    """The run's branch: `jct/run-<run id>`."""
    return gitcli.check_ref(f"jct/run-{run_id}", "branch")


def worktree_path(root: Path, repo_path: Path, run_id: str) -> Path:
    """<root>/<repository name>-<digest of its path>/<run id>: never the same for two repositories or runs."""
    slug = _SLUG.sub("-", repo_path.name)[:40] or "repo"
    digest = hashlib.sha256(str(repo_path).encode()).hexdigest()[:8]
    return root / f"{slug}-{digest}" / run_id


async def create(repo: gitcli.Repo, *, branch: str, base: str, path: Path | None, within: float) -> None:
    """The branch at `base` (never forced over another), and a linked worktree on it at `path` if given."""
    name = "refs/heads/" + gitcli.check_ref(branch, "branch")
    current = await gitcli.resolve(repo, name, within=within)
    if current is None:
        # Created only if absent (the zero old value): a concurrent creator cannot be overwritten.
        await gitcli.git(repo, "update-ref", name, base, "0" * 40, within=within)
    elif current != base:
        raise gitcli.GitError(f"branch {branch} exists at another commit")
    if path is None or (path / ".git").exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    await gitcli.git(repo, "worktree", "add", "--quiet", str(path), branch, within=within)


async def delete_branch(repo: gitcli.Repo, branch: str, *, within: float) -> None:
    """The run's branch, once its work is merged; nothing if it is gone already."""
    name = "refs/heads/" + gitcli.check_ref(branch, "branch")
    await gitcli.git(repo, "update-ref", "-d", name, within=within, ok=(0, 1))


async def commit_leftovers(worktree: Path, *, message: str, within: float) -> str | None:
    """Commit what the agent left in its worktree (changes and new files, not ignored ones) as JCT; the new
    commit, or None when there was nothing."""
    repo = gitcli.Repo(worktree, worktree=True)
    status = await gitcli.git(repo, "status", "--porcelain=v1", "-z", within=within)
    if not status.stdout.strip(b"\0"):
        return None
    env = {
        "GIT_AUTHOR_NAME": JCT_NAME,
        "GIT_AUTHOR_EMAIL": JCT_EMAIL,
        "GIT_COMMITTER_NAME": JCT_NAME,
        "GIT_COMMITTER_EMAIL": JCT_EMAIL,
    }
    await gitcli.git(repo, "add", "-A", within=within)
    await gitcli.git(repo, "commit", "--quiet", "--no-verify", "-m", message, within=within, extra_env=env)
    return await gitcli.resolve(repo, "HEAD", within=within)
