"""The git access layer on real repositories: what it reads, what it refuses, and its caps."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import anyio
import pytest

from server.config import Settings
from server.core.git import diffs, gitcli
from server.core.git.repos import Repos, looks_local
from server.errors import ErrorCode, JctError
from tests.git.repo import Work, alive, bare_clone

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("ref", ["-n", "--output=/tmp/x", "main..evil", "a/../b", "HEAD@{1}", "x:y", "a b", ""])
def test_refs_that_could_be_options_or_ranges_are_refused(ref: str) -> None:
    with pytest.raises(JctError) as caught:
        gitcli.check_ref(ref)
    assert caught.value.code == ErrorCode.INVALID_ARGUMENT


@pytest.mark.parametrize("ref", ["main", "feature/x", "v1.2", "HEAD~2", "main^", "0" * 40])
def test_plain_refs_pass(ref: str) -> None:
    assert gitcli.check_ref(ref) == ref


@pytest.mark.parametrize("path", ["../etc/passwd", "src/../../x", "/etc/passwd", "~/x", "C:/x", "a\x00b"])
def test_paths_outside_the_repository_are_refused(path: str) -> None:
    with pytest.raises(JctError) as caught:
        gitcli.check_path(path)
    assert caught.value.code == ErrorCode.INVALID_ARGUMENT


def test_paths_are_normalised() -> None:
    assert gitcli.check_path("./src//app.py") == "src/app.py"
    assert gitcli.check_path("") == ""


def test_local_paths_are_recognised() -> None:
    assert looks_local("/home/me/proj")
    assert looks_local("file:///srv/x")
    assert looks_local("../x")
    assert not looks_local("myorg/api")


async def test_resolve_and_ancestry_on_a_real_repository(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    base = work.head()
    work.write("src/app.py", "print('bye')\n")
    head = work.commit("second")
    repo = gitcli.Repo(work.path, worktree=True)
    assert await gitcli.resolve(repo, "main", within=10) == head
    assert await gitcli.resolve(repo, "nope", within=10) is None
    assert await gitcli.is_ancestor(repo, base, head, within=10)
    assert not await gitcli.is_ancestor(repo, head, base, within=10)
    changes, cut = await diffs.changed_files(repo, base, head, within=10)
    assert not cut
    assert [c.as_dict() for c in changes] == [{"path": "src/app.py", "status": "M", "added": 1, "removed": 1}]


async def test_output_past_its_cap_is_cut_and_marked(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    work.write("big.txt", "line\n" * 10_000)
    work.commit("big")
    out = await gitcli.git(gitcli.Repo(work.path, worktree=True), "show", "HEAD:big.txt", within=10, max_bytes=100)
    assert out.truncated
    assert len(out.stdout) == 100


async def test_a_command_past_its_timeout_raises(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    with pytest.raises(gitcli.GitTimeout):
        await gitcli.git(gitcli.Repo(work.path, worktree=True), "log", within=1e-9)


async def test_the_repository_config_runs_no_program(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    marker = tmp_path / "ran"
    work.git("config", "core.fsmonitor", f"touch {marker}; false")
    work.git("config", "diff.external", f"sh -c 'touch {marker}'")
    work.write("src/app.py", "changed\n")
    repo = gitcli.Repo(work.path, worktree=True)
    changes, _ = await diffs.changed_files(repo, work.head(), None, within=10)
    assert [c.path for c in changes] == ["src/app.py"]
    await gitcli.git(repo, "diff", "--no-ext-diff", within=10)
    assert not marker.exists()


def settings(tmp_path: Path, **overrides: object) -> Settings:
    return Settings(home=tmp_path / "home", database_url="sqlite:///x.db", **overrides)  # type: ignore[arg-type]


async def refusal(repos: Repos, name: str) -> str:
    """Opening `name` is refused REPO_NOT_AVAILABLE; the message."""
    with pytest.raises(JctError) as caught:
        await repos.open(name)
    assert caught.value.code == ErrorCode.REPO_NOT_AVAILABLE
    return caught.value.message


async def test_a_configured_directory_of_repositories_is_read_in_place(tmp_path: Path) -> None:
    work = Work(tmp_path / "src" / "api")
    bare_clone(work.path, tmp_path / "team" / "api.git")
    repos = Repos(settings(tmp_path, repos=[f"myorg/={tmp_path / 'team'}"]))
    place = await repos.open("myorg/api")
    assert place is not None
    assert await gitcli.resolve(place.repo, "main", within=10) == work.head()
    assert await repos.open("other/api") is None


async def test_a_symlink_out_of_the_location_is_refused(tmp_path: Path) -> None:
    outside = Work(tmp_path / "outside")
    (tmp_path / "team").mkdir()
    (tmp_path / "team" / "api").symlink_to(outside.path)
    repos = Repos(settings(tmp_path, repos=[f"myorg/={tmp_path / 'team'}"]))
    assert "outside" in await refusal(repos, "myorg/api")


async def test_alternates_out_of_the_location_are_refused(tmp_path: Path) -> None:
    """objects/info/alternates lets git read another object store as its own: one outside is refused."""
    outside = Work(tmp_path / "outside")
    work = Work(tmp_path / "src" / "api")
    bare_clone(work.path, tmp_path / "team" / "api.git")
    repos = Repos(settings(tmp_path, repos=[f"myorg/={tmp_path / 'team'}"]))
    assert await repos.open("myorg/api") is not None
    info = tmp_path / "team" / "api.git" / "objects" / "info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "alternates").write_text(f"{outside.path / '.git' / 'objects'}\n")
    assert "outside" in await refusal(repos, "myorg/api")


@pytest.mark.parametrize("name", ["myorg/../outside", "myorg/-x", "myorg/.git"])
async def test_names_that_climb_or_hide_are_refused(tmp_path: Path, name: str) -> None:
    repos = Repos(settings(tmp_path, repos=[f"myorg/={tmp_path / 'team'}"]))
    await refusal(repos, name)


async def test_a_git_url_is_fetched_into_the_cache_and_follows_a_force_push(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    remote = bare_clone(work.path, tmp_path / "remote" / "api.git")
    repos = Repos(settings(tmp_path, repos=[f"myorg/=file://{tmp_path / 'remote'}"]))
    repos_url = f"file://{remote}"
    place = await repos.open("myorg/api.git")
    assert place is not None
    assert place.url == repos_url
    assert place.repo.path.is_relative_to(tmp_path / "home" / "git")
    assert await gitcli.resolve(place.repo, "main", within=10) == work.head()
    # Rewrite history and force-push: the cache follows.
    work.git("commit", "--quiet", "--amend", "-m", "rewritten")
    work.git("push", "--quiet", "--force", str(remote), "main")
    place = await repos.open("myorg/api.git")
    assert place is not None
    assert await gitcli.resolve(place.repo, "main", within=10) == work.head()


async def test_a_fetch_past_its_size_cap_fails(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    work.write("blob.bin", os.urandom(3 * 1024 * 1024))
    work.commit("big")
    bare_clone(work.path, tmp_path / "remote" / "api.git")
    repos = Repos(settings(tmp_path, repos=[f"myorg/=file://{tmp_path / 'remote'}"], git_fetch_max_bytes=1024 * 1024))
    assert "cap" in await refusal(repos, "myorg/api.git")


async def test_a_local_working_tree_only_without_tokens(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    place = await Repos(settings(tmp_path)).open(str(work.path))
    assert place is not None
    assert place.local_tree
    assert await Repos(settings(tmp_path, auth="token")).open(str(work.path)) is None


def test_jct_repos_must_be_pairs_of_prefix_and_location(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="prefix=location"):
        settings(tmp_path, repos=["myorg/"])
    with pytest.raises(ValueError, match="neither"):
        settings(tmp_path, repos=["myorg/=relative/dir"])
    with pytest.raises(ValueError, match="fetches only"):
        settings(tmp_path, repos=["myorg/=ftp://example.com/x"])


async def test_input_and_output_larger_than_a_pipe_do_not_deadlock(tmp_path: Path) -> None:
    """git reads its input while it writes its answer: both far past a pipe's 64 KiB buffer."""
    work = Work(tmp_path / "w")
    repo = gitcli.Repo(work.path, worktree=True)
    head = work.head()
    names = "".join(f"{head}\n" for _ in range(20_000)).encode()  # 820 kB in
    out = await gitcli.git(repo, "cat-file", "--batch-check", within=60, input=names, neutralised=[])
    assert out.text.splitlines() == [f"{head} commit {len(work.git('cat-file', 'commit', head)) + 1}"] * 20_000


async def test_a_cancelled_command_is_killed_at_once(tmp_path: Path) -> None:
    started = tmp_path / "pid"
    script = f"echo $$ > {started}.tmp; mv {started}.tmp {started}; exec sleep 600"
    async with anyio.create_task_group() as tg:

        async def call() -> None:
            await gitcli.run(["sh", "-c", script], within=600)

        tg.start_soon(call)
        with anyio.fail_after(30):
            while not started.exists():
                await anyio.sleep(0.02)
        tg.cancel_scope.cancel()
    with anyio.fail_after(10):
        while alive(int(started.read_text())):
            await anyio.sleep(0.02)


async def test_a_batch_runs_its_commands_off_the_event_loops_thread(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    repo = gitcli.Repo(work.path, worktree=True)

    def work_on(batch: gitcli.Batch) -> tuple[str | None, str, int]:
        head = batch.resolve(repo, "main", within=30)
        tree = batch.git(repo, "rev-parse", "HEAD^{tree}", within=30).text.strip()
        return head, tree, threading.get_ident()

    head, tree, thread = await gitcli.in_thread(work_on)
    assert head == work.head()
    assert tree == work.git("rev-parse", "HEAD^{tree}")
    assert thread != threading.get_ident()
