"""The repository's configuration never runs a program for JCT (issue 25), on real repositories.

Each repository configures a program that would write a marker file when git runs it: a clean filter (the
one a local working tree's `.gitattributes` attaches at completion), a long-running filter process, an
fsmonitor, gpg for a signature, a lazy fetch's ssh command. JCT reads the change as git would without
them, and the marker never appears.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from server.config import Settings
from server.core.git import checks, diffs, gitcli, merges, workspaces
from server.core.git.repos import Repos
from tests.git.repo import Work, git

pytestmark = pytest.mark.anyio


def program(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A script that leaves `<name>.ran` beside it and passes its input through; (script, marker)."""
    marker = tmp_path / f"{name}.ran"
    script = tmp_path / f"{name}.sh"
    script.write_text(f"#!/bin/sh\ntouch '{marker}'\ncat\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, marker


def filtered(tmp_path: Path) -> tuple[Work, list[Path]]:
    """A working tree whose .gitattributes puts every .txt file through a filter that writes markers."""
    clean, clean_ran = program(tmp_path, "clean")
    process, process_ran = program(tmp_path, "process")
    fsmonitor, fsmonitor_ran = program(tmp_path, "fsmonitor")
    work = Work(tmp_path / "tree")
    work.write(".gitattributes", "*.txt filter=evil\n")
    work.write("notes.txt", "one\n")
    work.commit("notes")
    work.git("config", "filter.evil.clean", str(clean))
    work.git("config", "filter.evil.required", "true")
    work.git("config", "filter.lfs.process", str(process))
    work.git("config", "core.fsmonitor", str(fsmonitor))
    work.write(".gitattributes", "*.txt filter=evil\n*.bin filter=lfs\n")
    work.write("notes.txt", "one\ntwo\n")
    work.write("data.bin", "raw\n")
    return work, [clean_ran, process_ran, fsmonitor_ran]


async def test_a_local_trees_clean_filter_and_fsmonitor_never_run(tmp_path: Path) -> None:
    work, markers = filtered(tmp_path)
    base = work.head()
    work.git("add", "data.bin")  # the index holds it; the next diff reads it back from the tree
    for marker in markers:
        marker.unlink(missing_ok=True)  # `git add` above ran them: that was the test's own git
    place = await Repos(Settings(home=tmp_path / "home", database_url="sqlite:///x.db")).open(str(work.path))
    assert place is not None
    assert place.local_tree

    changes, _ = await diffs.changed_files(place.repo, base, None, within=30)
    untracked, _ = await diffs.untracked_files(place.repo, within=30)
    await gitcli.git(place.repo, "diff", "--no-ext-diff", "--stat", "--end-of-options", base, within=30)

    assert {c.path for c in changes} == {".gitattributes", "notes.txt", "data.bin"}
    assert [m.name for m in markers if m.exists()] == []
    assert untracked == []


async def test_gpg_for_a_signature_the_config_asks_for_never_runs(tmp_path: Path) -> None:
    gpg, gpg_ran = program(tmp_path, "gpg")
    work = Work(tmp_path / "tree")
    raw = work.git("cat-file", "commit", "HEAD")
    header, _, message = raw.partition("\n\n")
    signature = "gpgsig -----BEGIN PGP SIGNATURE-----\n \n iQEzBAABCAAdFiEE\n -----END PGP SIGNATURE-----"
    forged = f"{header}\n{signature}\n\n{message}\n"
    path = tmp_path / "commit.txt"
    path.write_text(forged)
    sha = work.git("hash-object", "-t", "commit", "-w", str(path))
    work.git("update-ref", "refs/heads/main", sha)
    work.git("config", "log.showSignature", "true")
    work.git("config", "gpg.program", str(gpg))
    repo = gitcli.Repo(work.path, worktree=True)

    out = await gitcli.git(repo, "log", "--format=%H", "-1", "--end-of-options", "main", within=30)

    assert out.text.strip() == sha
    assert not gpg_ran.exists()


async def test_a_partial_clones_lazy_fetch_reaches_no_remote(tmp_path: Path) -> None:
    """A promisor remote makes git fetch a missing object with the repository's ssh command: never."""
    ssh, ssh_ran = program(tmp_path, "ssh")
    work = Work(tmp_path / "tree")
    work.git("config", "remote.origin.url", "ssh://example.invalid/repo.git")
    work.git("config", "remote.origin.promisor", "true")
    work.git("config", "extensions.partialClone", "origin")
    work.git("config", "core.repositoryFormatVersion", "1")
    work.git("config", "core.sshCommand", str(ssh))
    repo = gitcli.Repo(work.path, worktree=True)

    with pytest.raises(gitcli.GitError):
        await gitcli.git(repo, "cat-file", "-p", "0" * 39 + "1", within=30)

    assert not ssh_ran.exists()


async def test_a_submodules_own_filter_never_runs(tmp_path: Path) -> None:
    clean, clean_ran = program(tmp_path, "clean")
    sub = Work(tmp_path / "sub")
    sub.write(".gitattributes", "*.txt filter=evil\n")
    sub.write("a.txt", "a\n")
    sub.commit("a")
    work = Work(tmp_path / "tree")
    git(work.path, "-c", "protocol.file.allow=always", "submodule", "--quiet", "add", str(sub.path), "sub")
    base = work.commit("with a submodule")
    inner = Work.__new__(Work)
    inner.path = work.path / "sub"
    inner.git("config", "filter.evil.clean", str(clean))
    (work.path / "sub" / "a.txt").write_text("changed\n")
    clean_ran.unlink(missing_ok=True)
    repo = gitcli.Repo(work.path, worktree=True)

    await diffs.changed_files(repo, base, None, within=30)

    assert not clean_ran.exists()


# --- integration writes (merges.py, workspaces.py): no hook, merge driver, filter or gpg runs ----------------

HOOKS = (
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "post-checkout",
    "post-merge",
    "pre-merge-commit",
    "reference-transaction",
    "post-rewrite",
    "pre-push",
    "post-index-change",
    "pre-auto-gc",
)


def hooks(tmp_path: Path, work: Work) -> Path:
    """Every hook, in the repository's hooks directory and in a core.hooksPath one, leaves `<hook>.ran` in the
    returned directory."""
    ran = tmp_path / "ran"
    ran.mkdir()
    custom = tmp_path / "custom-hooks"
    custom.mkdir()
    for directory in (work.path / ".git" / "hooks", custom):
        directory.mkdir(exist_ok=True)
        for name in HOOKS:
            hook = directory / name
            hook.write_text(f"#!/bin/sh\ntouch '{ran}/{name}.ran'\ncat >/dev/null 2>&1 || true\n")
            hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
    work.git("config", "core.hooksPath", str(custom))
    return ran


async def test_no_hook_runs_while_jct_integrates(tmp_path: Path) -> None:
    work = Work(tmp_path / "w")
    base = work.head()
    remote = tmp_path / "remote.git"
    git(tmp_path, "clone", "--quiet", "--bare", str(work.path), str(remote))
    head, onto = work.diverge(("src/app.py", "print('run')\n"), ("README.md", "moved\n"))
    work.git("config", "commit.gpgSign", "true")
    work.git("config", "gpg.program", "false")  # signing would fail every commit: none is signed
    ran = hooks(tmp_path, work)
    repo = gitcli.Repo(work.path, worktree=True)

    replayed = await merges.replay(repo, onto=onto, base=base, head=head, strategy="rebase", message="", within=30)
    assert replayed.commit is not None
    assert await merges.move_ref(repo, "run", replayed.commit, head, within=30)
    assert await merges.fast_forward(work.path, replayed.commit, within=30)
    assert await merges.push(repo, str(remote), replayed.commit, "main", within=30)
    checked = await checks.run_check(
        repo, replayed.commit, "true", scratch=tmp_path / "scratch", timeout=60, max_bytes=100
    )
    assert checked.ok
    path = tmp_path / "wt" / "run-1"
    await workspaces.create(repo, branch="jct/run-1", base=replayed.commit, path=path, within=30)
    (path / "left.txt").write_text("left\n")
    assert await workspaces.commit_leftovers(path, message="left over", within=30) is not None
    await workspaces.remove(repo, path, within=30)
    await workspaces.delete_branch(repo, "jct/run-1", within=30)
    merged = await merges.replay(
        repo, onto=replayed.commit, base=base, head=head, strategy="merge", message="m", within=30
    )
    assert merged.commit is not None

    assert sorted(p.name for p in ran.iterdir()) == []


async def test_a_merge_driver_never_runs_a_file_both_sides_changed_is_a_conflict(tmp_path: Path) -> None:
    driver, driver_ran = program(tmp_path, "driver")
    work = Work(tmp_path / "tree")
    work.write(".gitattributes", "*.txt merge=evil\n")
    work.write("notes.txt", "one\ntwo\nthree\n")
    base = work.commit("notes")
    head, onto = work.diverge(("notes.txt", "one\ntwo\nthree, run\n"), ("notes.txt", "one, main\ntwo\nthree\n"))
    work.git("config", "merge.evil.driver", f"{driver} %O %A %B")

    for strategy in ("rebase", "merge", "squash"):
        done = await merges.replay(
            gitcli.Repo(work.path, worktree=True),
            onto=onto,
            base=base,
            head=head,
            strategy=strategy,
            message="m",
            within=30,
        )
        assert done == merges.Replayed(None, ["notes.txt"])

    assert not driver_ran.exists()


async def test_a_checkout_whose_files_need_a_filter_is_not_moved_and_no_filter_runs(tmp_path: Path) -> None:
    work, markers = filtered(tmp_path)
    work.git("config", "filter.evil.smudge", work.git("config", "filter.evil.clean"))
    work.commit("filtered files")
    old = work.head()
    side = tmp_path / "side"
    work.git("worktree", "add", "--quiet", "-b", "next", str(side))
    (side / "notes.txt").write_text("changed on next\n")
    git(side, "commit", "--quiet", "-am", "next")
    new = git(side, "rev-parse", "HEAD")
    work.git("worktree", "remove", "--force", str(side))
    for marker in markers:
        marker.unlink(missing_ok=True)  # the test's own git ran them
    repo = gitcli.Repo(work.path, worktree=True)

    with pytest.raises(merges.Filtered):
        await merges.fast_forward(work.path, new, within=30)
    assert work.head() == old
    path = tmp_path / "wt"
    await workspaces.create(repo, branch="jct/run-1", base=new, path=path, within=30)
    assert (path / "notes.txt").read_text() == "changed on next\n"
    checked = await checks.run_check(repo, new, "cat notes.txt", scratch=tmp_path / "s", timeout=60, max_bytes=100)

    assert checked.output == "changed on next\n"
    assert [m.name for m in markers if m.exists()] == []
