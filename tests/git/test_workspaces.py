"""A run's workspace on real repositories (workspaces.py): its branch and linked worktree, what the agent left
committed for it, removal, and the sweeper's list of worktrees whose run ended."""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import pytest

from server.core.git import gitcli, workspaces
from server.errors import ErrorCode, JctError
from tests.git.repo import Work, bare_clone, git

pytestmark = pytest.mark.anyio

RUN = "6f1c2b9e-1d2a-4c3b-9e8f-0a1b2c3d4e5f"


def test_a_runs_branch_is_named_for_it() -> None:
    assert workspaces.branch_name(RUN) == f"jct/run-{RUN}"


@pytest.mark.parametrize("run_id", ["../x", "-x", "a..b", "a/b", "", ".hidden", "a b"])
def test_a_run_id_that_could_climb_or_be_an_option_is_refused(run_id: str) -> None:
    with pytest.raises(JctError) as caught:
        workspaces.branch_name(run_id)
    assert caught.value.code == ErrorCode.INVALID_ARGUMENT
    with pytest.raises(JctError):
        workspaces.worktree_path(Path("/w"), Path("/r"), run_id)


def test_worktree_paths_never_collide_across_repositories(tmp_path: Path) -> None:
    one = tmp_path / "a" / "api"
    two = tmp_path / "b" / "api"
    one.mkdir(parents=True)
    two.mkdir(parents=True)
    root = tmp_path / "worktrees"
    path = workspaces.worktree_path(root, one, RUN)
    assert path.parent.parent == root
    assert path.name == RUN
    assert path.parent.name.startswith("api-")
    assert workspaces.worktree_path(root, two, RUN) != path
    assert workspaces.worktree_path(root, one / "." / ".." / "api", RUN) == path


async def test_create_makes_the_branch_at_base_and_a_worktree_on_it(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    base = work.head()
    work.write("README.md", "moved on\n")
    work.commit("main moves")
    path = tmp_path / "worktrees" / "api-12345678" / RUN
    repo = gitcli.Repo(work.path, worktree=True)

    await workspaces.create(repo, branch=workspaces.branch_name(RUN), base=base, path=path, within=30)

    assert work.head(f"jct/run-{RUN}") == base
    assert git(path, "rev-parse", "--abbrev-ref", "HEAD") == f"jct/run-{RUN}"
    assert (path / "README.md").read_text() == "hello\n"
    assert git(path, "status", "--porcelain") == ""
    # a retried claim finds it made: fine
    await workspaces.create(repo, branch=workspaces.branch_name(RUN), base=base, path=path, within=30)


def half_made_worktree(work: Work, tmp_path: Path) -> Path:
    """The records of a worktree `git worktree add` is still making: its `commondir` file created, not yet
    written (what a concurrent add left other git commands to read). Returns that file."""
    admin = work.path / ".git" / "worktrees" / "half"
    admin.mkdir(parents=True)
    elsewhere = tmp_path / "half"
    elsewhere.mkdir()
    (elsewhere / ".git").write_text(f"gitdir: {admin}\n")
    (admin / "gitdir").write_text(f"{elsewhere / '.git'}\n")
    (admin / "HEAD").write_text(f"{work.head()}\n")
    (admin / "commondir").write_text("")
    return admin / "commondir"


async def test_create_and_list_wait_for_a_worktree_another_git_is_still_making(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    commondir = half_made_worktree(work, tmp_path)
    repo = gitcli.Repo(work.path, worktree=True)
    with pytest.raises(gitcli.GitError, match="commondir"):  # what git itself does meanwhile
        await gitcli.git(repo, "worktree", "list", within=30)
    path = tmp_path / "worktrees" / "api-12345678" / RUN
    listed: list[workspaces.Worktree] = []

    async def list_them() -> None:
        listed.extend(await workspaces.worktrees(repo, within=30))

    async def make() -> None:
        await workspaces.create(repo, branch=workspaces.branch_name(RUN), base=work.head(), path=path, within=30)

    async with anyio.create_task_group() as group:
        group.start_soon(make)
        group.start_soon(list_them)
        await anyio.sleep(0.1)
        commondir.write_text("../..\n")  # the other git finishes

    assert git(path, "rev-parse", "--abbrev-ref", "HEAD") == f"jct/run-{RUN}"
    # The list waited for the half-made worktree too; it may also show the new one, if it ran after the create.
    names = [tree.path.name for tree in listed]
    assert names[0] == "w", names
    assert sorted(names[1:]) in (["half"], sorted(["half", RUN])), names


async def test_concurrent_creates_on_one_repository_all_make_their_worktree(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    repo = gitcli.Repo(work.path, worktree=True)
    root = tmp_path / "worktrees"

    async def make(run: str) -> None:
        await workspaces.create(repo, branch=workspaces.branch_name(run), base=work.head(), path=root / run, within=30)

    for round in range(3):  # twelve at once failed about once a round before `workspaces.worktree` tried again
        runs = [f"{round}{n:07d}-1d2a-4c3b-9e8f-0a1b2c3d4e5f" for n in range(12)]
        async with anyio.create_task_group() as group:
            for run in runs:
                group.start_soon(make, run)
        for run in runs:
            assert git(root / run, "rev-parse", "--abbrev-ref", "HEAD") == f"jct/run-{run}"


async def test_create_without_a_path_makes_only_the_branch(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    bare = gitcli.Repo(bare_clone(work.path, tmp_path / "b.git"))
    await workspaces.create(bare, branch="jct/run-1", base=work.head(), path=None, within=30)
    assert await gitcli.resolve(bare, "jct/run-1", within=30) == work.head()
    assert await workspaces.worktrees(bare, within=30) == [workspaces.Worktree(path=bare.path, bare=True)]


async def test_create_never_moves_a_branch_that_exists_elsewhere(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    base = work.head()
    work.git("branch", "jct/run-1")
    work.write("README.md", "moved on\n")
    other = work.commit("main moves")
    repo = gitcli.Repo(work.path, worktree=True)
    with pytest.raises(gitcli.GitError, match="exists at"):
        await workspaces.create(repo, branch="jct/run-1", base=other, path=None, within=30)
    assert work.head("jct/run-1") == base


@pytest.mark.parametrize("branch", ["-D", "--force", "jct/../main", "x..y", "HEAD", "main~1"])
async def test_create_refuses_option_like_or_ranged_branches(tmp_path: Path, branch: str) -> None:
    work = Work(tmp_path / "w")
    refs = work.refs()
    with pytest.raises(JctError) as caught:
        await workspaces.create(
            gitcli.Repo(work.path, worktree=True), branch=branch, base=work.head(), path=None, within=30
        )
    assert caught.value.code == ErrorCode.INVALID_ARGUMENT
    assert work.refs() == refs


async def test_remove_takes_the_worktree_and_its_changes_and_is_quiet_when_gone(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    repo = gitcli.Repo(work.path, worktree=True)
    path = tmp_path / "wt" / RUN
    await workspaces.create(repo, branch="jct/run-1", base=work.head(), path=path, within=30)
    (path / "README.md").write_text("dirty\n")
    (path / "untracked.txt").write_text("x\n")

    await workspaces.remove(repo, path, within=30)
    await workspaces.remove(repo, path, within=30)

    assert not path.exists()
    assert len(await workspaces.worktrees(repo, within=30)) == 1
    assert work.head("jct/run-1") == work.head()  # the branch stays until its work is merged


async def test_remove_takes_a_directory_git_forgot(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    leftover = tmp_path / "wt" / RUN
    leftover.mkdir(parents=True)
    (leftover / "half.txt").write_text("a crash between mkdir and git\n")
    await workspaces.remove(gitcli.Repo(work.path, worktree=True), leftover, within=30)
    assert not leftover.exists()


async def test_remove_never_takes_a_repository(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    other = Work(tmp_path / "other")
    repo = gitcli.Repo(work.path, worktree=True)
    with pytest.raises(JctError):
        await workspaces.remove(repo, work.path, within=30)
    with pytest.raises(gitcli.GitError):
        await workspaces.remove(repo, other.path, within=30)
    assert (work.path / "README.md").exists()
    assert (other.path / "README.md").exists()


async def test_delete_branch_deletes_and_is_quiet_when_gone(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    work.git("branch", "jct/run-1")
    repo = gitcli.Repo(work.path, worktree=True)
    await workspaces.delete_branch(repo, "jct/run-1", within=30)
    await workspaces.delete_branch(repo, "jct/run-1", within=30)
    assert await gitcli.resolve(repo, "jct/run-1", within=30) is None


async def test_delete_branch_at_a_tip_keeps_a_branch_that_moved_on(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    seen = work.head()
    work.git("branch", "jct/run-1")
    work.git("branch", "jct/run-2")
    repo = gitcli.Repo(work.path, worktree=True)
    work.git("checkout", "--quiet", "jct/run-2")
    work.write("late.txt", "a commit after the tip was read\n")
    work.commit("late")
    work.git("checkout", "--quiet", "main")
    with pytest.raises(gitcli.GitError):
        await workspaces.delete_branch(repo, "jct/run-2", within=30, tip=seen)
    assert await gitcli.resolve(repo, "jct/run-2", within=30) == work.head("jct/run-2") != seen
    await workspaces.delete_branch(repo, "jct/run-1", within=30, tip=seen)
    assert await gitcli.resolve(repo, "jct/run-1", within=30) is None


async def test_delete_branch_refuses_a_branch_checked_out_in_a_worktree(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    repo = gitcli.Repo(work.path, worktree=True)
    await workspaces.create(repo, branch="jct/run-1", base=work.head(), path=tmp_path / "wt", within=30)
    with pytest.raises(gitcli.GitError):
        await workspaces.delete_branch(repo, "jct/run-1", within=30)
    assert await gitcli.resolve(repo, "jct/run-1", within=30) is not None


async def test_commit_leftovers_commits_changes_and_new_files_but_not_ignored_ones(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    work.write(".gitignore", "*.log\n")
    work.commit("ignore logs")
    repo = gitcli.Repo(work.path, worktree=True)
    path = tmp_path / "wt"
    await workspaces.create(repo, branch="jct/run-1", base=work.head(), path=path, within=30)
    agent = git(path, "rev-parse", "HEAD")
    (path / "README.md").write_text("the agent's edit\n")
    (path / "src" / "new.py").write_text("new = True\n")
    (path / "debug.log").write_text("noise\n")
    (path / "src" / "app.py").unlink()

    commit = await workspaces.commit_leftovers(path, message="Uncommitted work of run 1", within=30)

    assert commit is not None
    assert git(path, "rev-parse", "HEAD") == commit
    assert work.head("jct/run-1") == commit
    assert git(path, "log", "-1", "--format=%P|%an <%ae>|%cn <%ce>|%s", commit) == (
        f"{agent}|JCT <jct@localhost>|JCT <jct@localhost>|Uncommitted work of run 1"
    )
    assert git(path, "diff", "--name-status", agent, commit).splitlines() == [
        "M\tREADME.md",
        "D\tsrc/app.py",
        "A\tsrc/new.py",
    ]
    assert git(path, "status", "--porcelain") == ""
    assert (path / "debug.log").exists()
    assert await workspaces.commit_leftovers(path, message="again", within=30) is None


async def test_commit_leftovers_with_an_index_lock_raises_locked(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    repo = gitcli.Repo(work.path, worktree=True)
    path = tmp_path / "wt"
    await workspaces.create(repo, branch="jct/run-1", base=work.head(), path=path, within=30)
    (path / "README.md").write_text("edit\n")
    lock = Path(git(path, "rev-parse", "--absolute-git-dir")) / "index.lock"
    lock.write_text("")
    with pytest.raises(gitcli.Locked):
        await workspaces.commit_leftovers(path, message="m", within=30)
    assert work.head("jct/run-1") == work.head()


async def test_stale_lists_the_worktrees_of_runs_that_ended(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    repo = gitcli.Repo(work.path, worktree=True)
    root = tmp_path / "worktrees"
    running, ended, crashed, forgotten = "run-a", "run-b", "run-c", "run-d"
    for run in (running, ended, crashed):
        path = workspaces.worktree_path(root, work.path, run)
        await workspaces.create(repo, branch=f"jct/run-{run}", base=work.head(), path=path, within=30)
    shutil.rmtree(workspaces.worktree_path(root, work.path, crashed))  # git still lists it
    workspaces.worktree_path(root, work.path, forgotten).mkdir()
    (workspaces.worktree_path(root, work.path, forgotten).parent / ".hidden").mkdir()
    elsewhere = tmp_path / "elsewhere" / "run-e"
    await workspaces.create(repo, branch="jct/run-e", base=work.head(), path=elsewhere, within=30)
    scratch = root / "scratch" / "run-f"  # under root, not in the repository's place: a check's
    await workspaces.create(repo, branch="jct/run-f", base=work.head(), path=scratch, within=30)

    found = await workspaces.stale(repo, root, {running}, within=30)

    assert sorted(p.name for p in found) == [ended, crashed, forgotten]
    assert await workspaces.stale(repo, root, lambda run: run != forgotten, within=30) == [
        workspaces.worktree_path(root, work.path, forgotten)
    ]
    for path in found:
        await workspaces.remove(repo, path, within=30)
    assert await workspaces.stale(repo, root, {running}, within=30) == []
    assert {t.path.name for t in await workspaces.worktrees(repo, within=30)} == {"w", running, "run-e", "run-f"}
