"""A check command in a scratch worktree (checks.run_check), on real repositories and real processes: its
verdict, its output's tail, its timeout, a flood of output, cancellation; the worktree never outlives it."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import anyio
import pytest

from server.core.git import checks, gitcli
from tests.git.repo import Work, alive, bare_clone

pytestmark = pytest.mark.anyio


def only_main(work: Work) -> None:
    """The repository knows no worktree but its own, and the scratch directory is gone."""
    listed = work.git("worktree", "list", "--porcelain")
    assert [line for line in listed.splitlines() if line.startswith("worktree ")] == [f"worktree {work.path}"]


async def run_check(
    work: Work, commit: str, command: str, *, scratch: Path, timeout: float = 60, max_bytes: int = 10_000
) -> checks.Checked:
    """checks.run_check of `command` at `commit` of `work`'s repository."""
    repo = gitcli.Repo(work.path, worktree=True)
    return await checks.run_check(repo, commit, command, scratch=scratch, timeout=timeout, max_bytes=max_bytes)


async def gone(pid: int) -> None:
    with anyio.fail_after(10):
        while alive(pid):
            await anyio.sleep(0.02)


async def test_a_passing_check_runs_at_the_commit_and_its_worktree_is_removed(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    first = work.head()
    work.write("README.md", "second\n")
    work.commit("second")
    scratch = tmp_path / "scratch" / "check"

    checked = await run_check(work, first, "cat README.md; pwd", scratch=scratch)

    assert checked == checks.Checked(ok=True, output=f"hello\n{scratch}\n", timed_out=False)
    assert not scratch.exists()
    only_main(work)


async def test_a_failing_check_keeps_stdout_and_stderr(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    bare = bare_clone(work.path, tmp_path / "b.git")
    checked = await checks.run_check(
        gitcli.Repo(bare),
        work.head(),
        "echo out; echo err >&2; exit 3",
        scratch=tmp_path / "scratch",
        timeout=60,
        max_bytes=10_000,
    )
    assert checked == checks.Checked(ok=False, output="out\nerr\n", timed_out=False)
    assert not (tmp_path / "scratch").exists()
    assert work.git("--git-dir", str(bare), "worktree", "list").count("\n") == 0


async def test_a_hanging_check_is_killed_at_its_timeout_with_its_children(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    pidfile = tmp_path / "sleeper.pid"

    checked = await run_check(
        work,
        work.head(),
        f"echo started; sleep 600 & echo $! > {pidfile}; wait",
        scratch=tmp_path / "scratch",
        timeout=1,
    )

    assert checked == checks.Checked(ok=False, output="started\n", timed_out=True)
    await gone(int(pidfile.read_text()))
    assert not (tmp_path / "scratch").exists()
    only_main(work)


async def test_what_a_check_leaves_running_is_killed_when_it_exits(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    pidfile = tmp_path / "daemon.pid"
    checked = await run_check(
        work, work.head(), f"sleep 600 & echo $! > {pidfile}; echo done", scratch=tmp_path / "scratch"
    )
    assert checked == checks.Checked(ok=True, output="done\n", timed_out=False)
    await gone(int(pidfile.read_text()))


async def test_a_flood_of_output_keeps_only_its_tail_in_bounded_memory(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    tracemalloc.start()
    try:
        checked = await run_check(
            work,
            work.head(),
            "yes | head -c 50000000; echo the-end",
            scratch=tmp_path / "scratch",
            timeout=120,
            max_bytes=1000,
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert checked.ok
    assert len(checked.output) == 1000
    assert checked.output.endswith("y\ny\nthe-end\n")
    assert peak < 5_000_000  # 50 MB went through
    assert not (tmp_path / "scratch").exists()


async def test_a_cancelled_check_is_killed_and_its_worktree_removed(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    started = tmp_path / "started"
    scratch = tmp_path / "scratch"

    async with anyio.create_task_group() as tg:

        async def check() -> None:
            await run_check(
                work,
                work.head(),
                f"echo $$ > {started}.tmp; mv {started}.tmp {started}; exec sleep 600",
                scratch=scratch,
                timeout=600,
            )

        tg.start_soon(check)
        with anyio.fail_after(30):
            while not started.exists():
                await anyio.sleep(0.02)
        assert scratch.exists()
        tg.cancel_scope.cancel()

    await gone(int(started.read_text()))
    assert not scratch.exists()
    only_main(work)


async def test_a_scratch_directory_left_by_a_crash_is_replaced(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    scratch = tmp_path / "scratch"
    work.git("worktree", "add", "--quiet", "--detach", str(scratch))
    (scratch / "leftover.txt").write_text("from the crashed run\n")
    checked = await run_check(work, work.head(), "ls", scratch=scratch)
    assert checked.ok
    assert "leftover.txt" not in checked.output
    assert "README.md" in checked.output
    only_main(work)


async def test_the_check_does_not_see_jcts_git_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GIT_DIR in the server's environment must not point the check's own git commands elsewhere."""
    work = Work(tmp_path / "w")
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    checked = await run_check(work, work.head(), "git rev-parse HEAD", scratch=tmp_path / "scratch")
    assert checked == checks.Checked(ok=True, output=f"{work.head()}\n", timed_out=False)
