"""Moving the target on real repositories: the compare-and-swap, a push that is not forced, and the user's
checkout of the target moved with its files (merges.move_ref, push, checkout_of, uncommitted, fast_forward)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from server.core.git import gitcli, merges
from server.errors import ErrorCode, JctError
from tests.git.repo import Work, bare_clone, git

pytestmark = pytest.mark.anyio


def ahead(work: Work, branch: str = "next") -> tuple[str, str]:
    """A branch one commit ahead of main, made in a linked worktree so main's checkout is untouched;
    (main's commit, the branch's)."""
    old = work.head()
    side = work.path.parent / f"side-{branch}"
    work.git("worktree", "add", "--quiet", "-b", branch, str(side))
    (side / "src" / "app.py").write_text("print('next')\n")
    (side / "NEW.md").write_text("new\n")
    git(side, "add", "-A")
    git(side, "commit", "--quiet", "-m", "next")
    new = git(side, "rev-parse", "HEAD")
    work.git("worktree", "remove", "--force", str(side))
    return old, new


# --- move_ref ----------------------------------------------------------------------------------------------


async def test_move_ref_moves_a_ref_that_is_still_old(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    old, new = ahead(work)
    repo = gitcli.Repo(bare_clone(work.path, tmp_path / "b.git"))
    assert await merges.move_ref(repo, "main", new, old, within=30)
    assert await gitcli.resolve(repo, "main", within=30) == new


async def test_move_ref_refuses_a_ref_someone_moved(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    old, new = ahead(work)
    repo = gitcli.Repo(bare_clone(work.path, tmp_path / "b.git"))
    assert not await merges.move_ref(repo, "main", old, new, within=30)  # main is at old, not new
    assert await gitcli.resolve(repo, "main", within=30) == old


async def test_move_ref_on_a_stale_lock_raises_locked_and_moves_nothing(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    old, new = ahead(work)
    bare = bare_clone(work.path, tmp_path / "b.git")
    (bare / "refs" / "heads").mkdir(parents=True, exist_ok=True)
    (bare / "refs" / "heads" / "main.lock").write_text("")
    repo = gitcli.Repo(bare)
    with pytest.raises(gitcli.Locked) as caught:
        await merges.move_ref(repo, "main", new, old, within=30)
    assert caught.value.lock == bare / "refs" / "heads" / "main.lock"
    assert await gitcli.resolve(repo, "main", within=30) == old


@pytest.mark.parametrize("ref", ["-f", "--stdin", "main..x", "x/../y", "HEAD~1", "refs/heads/main", "a b"])
async def test_move_ref_refuses_option_like_or_ranged_refs(tmp_path: Path, ref: str) -> None:
    work = Work(tmp_path / "w")
    old, new = ahead(work)
    with pytest.raises(JctError) as caught:
        await merges.move_ref(gitcli.Repo(work.path, worktree=True), ref, new, old, within=30)
    assert caught.value.code == ErrorCode.INVALID_ARGUMENT


# --- push --------------------------------------------------------------------------------------------------


async def test_push_fast_forwards_the_remote(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    remote = bare_clone(work.path, tmp_path / "remote.git")
    _old, new = ahead(work)
    assert await merges.push(gitcli.Repo(work.path, worktree=True), str(remote), new, "main", within=30)
    assert git(remote, "rev-parse", "main") == new
    # pushing what is there already is fine (a re-run after a crash)
    assert await merges.push(gitcli.Repo(work.path, worktree=True), str(remote), new, "main", within=30)


async def test_push_is_refused_when_the_remote_moved_and_nothing_is_forced(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    remote = bare_clone(work.path, tmp_path / "remote.git")
    other = tmp_path / "other"
    git(tmp_path, "clone", "--quiet", str(remote), str(other))
    (other / "THEIRS.md").write_text("theirs\n")
    git(other, "add", "-A")
    git(other, "commit", "--quiet", "-m", "someone else")
    git(other, "push", "--quiet", "origin", "main")
    theirs = git(remote, "rev-parse", "main")
    _old, new = ahead(work)

    assert not await merges.push(gitcli.Repo(work.path, worktree=True), str(remote), new, "main", within=30)
    assert git(remote, "rev-parse", "main") == theirs
    # the remote has the commit now (fetched): still not a fast-forward
    work.git("fetch", "--quiet", str(remote), "main")
    assert not await merges.push(gitcli.Repo(work.path, worktree=True), str(remote), new, "main", within=30)


async def test_push_to_a_missing_remote_is_a_git_error(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    _old, new = ahead(work)
    with pytest.raises(gitcli.GitError):
        await merges.push(gitcli.Repo(work.path, worktree=True), str(tmp_path / "nowhere"), new, "main", within=30)


@pytest.mark.parametrize("url", ["--upload-pack=touch /tmp/x", "-x"])
async def test_push_refuses_an_option_for_a_url(tmp_path: Path, url: str) -> None:
    work = Work(tmp_path / "w")
    _old, new = ahead(work)
    with pytest.raises(JctError):
        await merges.push(gitcli.Repo(work.path, worktree=True), url, new, "main", within=30)


# --- checkout_of, uncommitted ---------------------------------------------------------------------------------


async def test_checkout_of_finds_the_main_tree_and_linked_worktrees(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    work.git("branch", "feature")
    work.git("branch", "idle")
    linked = tmp_path / "linked"
    work.git("worktree", "add", "--quiet", str(linked), "feature")
    repo = gitcli.Repo(work.path, worktree=True)

    assert await merges.checkout_of(repo, "main", within=30) == work.path
    assert await merges.checkout_of(repo, "feature", within=30) == linked
    assert await merges.checkout_of(repo, "idle", within=30) is None


async def test_checkout_of_a_bare_repository_sees_its_linked_worktrees(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    bare = bare_clone(work.path, tmp_path / "b.git")
    linked = tmp_path / "linked"
    git(tmp_path, "--git-dir", str(bare), "worktree", "add", "--quiet", str(linked), "main")
    repo = gitcli.Repo(bare)
    assert await merges.checkout_of(repo, "main", within=30) == linked
    shutil.rmtree(linked)
    assert await merges.checkout_of(repo, "main", within=30) is None  # its directory is gone


async def test_uncommitted_lists_tracked_changes_staged_or_not_but_not_untracked_files(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    assert await merges.uncommitted(work.path, within=30) == []
    work.write("README.md", "edited\n")
    work.write("src/app.py", "staged\n")
    work.git("add", "src/app.py")
    work.write("untracked.txt", "x\n")
    assert sorted(await merges.uncommitted(work.path, within=30)) == ["README.md", "src/app.py"]


# --- fast_forward ---------------------------------------------------------------------------------------------


async def test_fast_forward_moves_a_clean_checkout_with_its_files(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    _old, new = ahead(work)

    assert await merges.fast_forward(work.path, new, within=30, branch="main")

    assert work.head() == new
    assert work.head("main") == new
    assert work.status() == ""
    assert (work.path / "NEW.md").read_text() == "new\n"
    assert (work.path / "src" / "app.py").read_text() == "print('next')\n"


async def test_fast_forward_moves_a_linked_worktree(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    old, new = ahead(work)
    work.git("branch", "target", old)
    linked = tmp_path / "linked"
    work.git("worktree", "add", "--quiet", str(linked), "target")
    assert await merges.fast_forward(linked, new, within=30)
    assert git(linked, "rev-parse", "HEAD") == new
    assert git(linked, "status", "--porcelain") == ""
    assert (linked / "NEW.md").exists()


async def test_fast_forward_leaves_local_changes_it_would_overwrite(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    old, new = ahead(work)
    work.write("src/app.py", "my edit\n")

    assert not await merges.fast_forward(work.path, new, within=30)

    assert work.head() == old
    assert (work.path / "src" / "app.py").read_text() == "my edit\n"
    assert not (work.path / "NEW.md").exists()


async def test_fast_forward_leaves_an_untracked_file_it_would_overwrite(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    old, new = ahead(work)
    work.write("NEW.md", "mine, not committed\n")

    assert not await merges.fast_forward(work.path, new, within=30)

    assert work.head() == old
    assert (work.path / "NEW.md").read_text() == "mine, not committed\n"


async def test_fast_forward_refuses_when_someone_committed_there(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    _old, new = ahead(work)
    work.write("MINE.md", "mine\n")
    mine = work.commit("the user's own commit")

    assert not await merges.fast_forward(work.path, new, within=30)

    assert work.head() == mine
    assert work.status() == ""


async def test_fast_forward_refuses_another_branch_than_expected(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    old, new = ahead(work)
    work.checkout("-b", "elsewhere")
    assert not await merges.fast_forward(work.path, new, within=30, branch="main")
    assert work.head("main") == old
    assert work.head() == old


async def test_fast_forward_with_an_index_lock_raises_locked(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    old, new = ahead(work)
    (work.path / ".git" / "index.lock").write_text("")
    with pytest.raises(gitcli.Locked) as caught:
        await merges.fast_forward(work.path, new, within=30)
    assert caught.value.lock == work.path / ".git" / "index.lock"
    assert work.head() == old
