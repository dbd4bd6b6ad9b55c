"""Replaying a run's commits on the target (merges.replay), on real repositories: rebase, merge and squash;
conflicts; work that landed already; hostile names refused before git sees them."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.core.git import gitcli, merges
from server.errors import ErrorCode, JctError
from tests.git.repo import Work, bare_clone

pytestmark = pytest.mark.anyio

BEA = "Bea <bea@example.com>"
CY = "Cy <cy@example.com>"


def run_branch(tmp_path: Path) -> tuple[Work, str, str, str]:
    """main: first; run: two commits by Bea and Cy off first; main moved on by one unrelated commit.
    (work, base, head, onto)."""
    work = Work(tmp_path / "w")
    base = work.head()
    work.checkout("-b", "run")
    work.write("src/app.py", "print('hi')\nprint('bea')\n")
    work.commit("bea's change\n\nwith a body\n", author=BEA, date="1700000000 +0200")
    work.write("docs/cy.md", "cy\n")
    head = work.commit("cy's doc", author=CY, date="1700000600 -0500")
    work.checkout("main")
    work.write("README.md", "hello, moved\n")
    onto = work.commit("main moves on")
    return work, base, head, onto


async def replay(
    work: Work, *, onto: str, base: str, head: str, strategy: str = "rebase", message: str = ""
) -> merges.Replayed:
    """merges.replay in the work tree of `work`, within 30 s."""
    repo = gitcli.Repo(work.path, worktree=True)
    return await merges.replay(repo, onto=onto, base=base, head=head, strategy=strategy, message=message, within=30)


def show(work: Work, commit: str, path: str) -> str:
    return work.git("show", f"{commit}:{path}")


async def test_rebase_replays_each_commit_on_the_moved_target_keeping_authors_dates_and_messages(
    tmp_path: Path,
) -> None:
    work, base, head, onto = run_branch(tmp_path)
    refs = work.refs()

    done = await replay(work, onto=onto, base=base, head=head, message="not used")

    assert done.conflicting_files == []
    assert done.commit is not None
    log = work.git("log", "--format=%P|%an <%ae>|%ad|%cn <%ce>|%B", "--date=raw", "-z", f"{onto}..{done.commit}")
    second, first = log.rstrip("\0").split("\0")
    assert second.startswith(f"{work.head(done.commit + '~1')}|{CY}|1700000600 -0500|JCT <jct@localhost>|cy's doc")
    assert first == f"{onto}|{BEA}|1700000000 +0200|JCT <jct@localhost>|bea's change\n\nwith a body\n"
    assert show(work, done.commit, "README.md") == "hello, moved"
    assert show(work, done.commit, "src/app.py") == "print('hi')\nprint('bea')"
    assert show(work, done.commit, "docs/cy.md") == "cy"
    assert work.refs() == refs  # no ref moved
    assert work.status() == ""


async def test_rebase_works_in_a_bare_repository(tmp_path: Path) -> None:
    work, base, head, onto = run_branch(tmp_path)
    bare = bare_clone(work.path, tmp_path / "bare.git")
    done = await merges.replay(
        gitcli.Repo(bare), onto=onto, base=base, head=head, strategy="rebase", message="", within=30
    )
    assert done.commit is not None
    assert gitcli.SHA.match(done.commit)
    assert work.git("--git-dir", str(bare), "rev-list", "--count", f"{onto}..{done.commit}") == "2"


async def test_rebase_onto_the_base_is_a_fast_forward_to_head(tmp_path: Path) -> None:
    work, base, head, _onto = run_branch(tmp_path)
    done = await replay(work, onto=base, base=base, head=head)
    assert done == merges.Replayed(head, [])


async def test_merge_makes_one_merge_commit_of_onto_and_head(tmp_path: Path) -> None:
    work, base, head, onto = run_branch(tmp_path)
    done = await replay(work, onto=onto, base=base, head=head, strategy="merge", message="Merge run 7")
    assert done.commit is not None
    assert work.git("log", "-1", "--format=%P|%an|%cn|%B", done.commit) == f"{onto} {head}|JCT|JCT|Merge run 7"
    assert show(work, done.commit, "README.md") == "hello, moved"
    assert show(work, done.commit, "docs/cy.md") == "cy"


async def test_squash_makes_one_commit_on_onto_by_the_author_of_head(tmp_path: Path) -> None:
    work, base, head, onto = run_branch(tmp_path)
    done = await replay(work, onto=onto, base=base, head=head, strategy="squash", message="Run 7: bea and cy")
    assert done.commit is not None
    assert work.git("log", "-1", "--format=%P|%an <%ae>|%ad|%cn|%B", "--date=raw", done.commit) == (
        f"{onto}|{CY}|1700000600 -0500|JCT|Run 7: bea and cy"
    )
    assert show(work, done.commit, "README.md") == "hello, moved"
    assert show(work, done.commit, "src/app.py") == "print('hi')\nprint('bea')"
    assert show(work, done.commit, "docs/cy.md") == "cy"


@pytest.mark.parametrize("strategy", ["rebase", "merge", "squash"])
async def test_a_conflict_names_the_files_and_moves_no_ref(tmp_path: Path, strategy: str) -> None:
    work, base, head, _ = run_branch(tmp_path)
    work.write("src/app.py", "print('hi')\nprint('main')\n")
    work.write("docs/cy.md", "main's\n")
    onto = work.commit("main edits the same lines")
    refs = work.refs()

    done = await replay(work, onto=onto, base=base, head=head, strategy=strategy, message="m")

    # rebase stops at the first commit that conflicts (bea's: src/app.py); merge and squash see both files
    expected = ["src/app.py"] if strategy == "rebase" else ["docs/cy.md", "src/app.py"]
    assert done == merges.Replayed(None, expected)
    assert work.refs() == refs
    assert work.status() == ""


@pytest.mark.parametrize("strategy", ["rebase", "merge", "squash"])
async def test_a_replay_that_already_landed_returns_onto(tmp_path: Path, strategy: str) -> None:
    work, base, head, onto = run_branch(tmp_path)
    repo = gitcli.Repo(work.path, worktree=True)
    first = await merges.replay(repo, onto=onto, base=base, head=head, strategy=strategy, message="m", within=30)
    assert first.commit is not None
    assert await merges.move_ref(repo, "main", first.commit, onto, within=30)

    # after a crash, the integrator runs again on the new target: nothing to do
    again = await merges.replay(
        repo, onto=first.commit, base=base, head=head, strategy=strategy, message="m", within=30
    )

    assert again == merges.Replayed(first.commit, [])


async def test_an_empty_range_returns_onto(tmp_path: Path) -> None:
    work, base, _head, onto = run_branch(tmp_path)
    done = await replay(work, onto=onto, base=base, head=base)
    assert done == merges.Replayed(onto, [])


async def test_a_merge_commit_in_the_range_is_replayed_as_its_first_parent_change(tmp_path: Path) -> None:
    """The agent merged the target into its branch, then committed again; the target moved once more."""
    work, base, _head, _ = run_branch(tmp_path)
    work.checkout("run")
    work.git("merge", "--quiet", "--no-edit", "main")
    work.write("src/extra.py", "x = 1\n")
    head = work.commit("after the merge", author=BEA)
    work.checkout("main")
    work.write("LICENSE", "mine\n")
    onto = work.commit("main again")

    done = await replay(work, onto=onto, base=base, head=head)

    assert done.commit is not None
    assert work.git("rev-list", "--min-parents=2", "--count", f"{onto}..{done.commit}") == "0"  # linear
    for path, text in [
        ("LICENSE", "mine"),
        ("README.md", "hello, moved"),
        ("src/extra.py", "x = 1"),
        ("docs/cy.md", "cy"),
        ("src/app.py", "print('hi')\nprint('bea')"),
    ]:
        assert show(work, done.commit, path) == text


async def test_a_commit_whose_change_is_on_the_target_already_is_dropped(tmp_path: Path) -> None:
    work, base, head, _ = run_branch(tmp_path)
    work.write("docs/cy.md", "cy\n")  # main got cy's doc another way
    onto = work.commit("cy's doc, cherry-picked by hand")
    done = await replay(work, onto=onto, base=base, head=head)
    assert done.commit is not None
    assert work.git("log", "--format=%s", f"{onto}..{done.commit}") == "bea's change"


@pytest.mark.parametrize(
    ("field", "value"),
    [("onto", "--output=/tmp/x"), ("base", "main..evil"), ("head", "-n"), ("strategy", "octopus")],
)
async def test_hostile_names_are_refused_before_git_runs(tmp_path: Path, field: str, value: str) -> None:
    work, base, head, onto = run_branch(tmp_path)
    args = {"onto": onto, "base": base, "head": head, "strategy": "rebase", field: value}
    with pytest.raises(JctError) as caught:
        await merges.replay(gitcli.Repo(work.path, worktree=True), message="", within=30, **args)
    assert caught.value.code == ErrorCode.INVALID_ARGUMENT


async def test_a_missing_commit_is_a_git_error(tmp_path: Path) -> None:
    work, base, head, _ = run_branch(tmp_path)
    with pytest.raises(gitcli.GitError):
        await replay(work, onto="f" * 40, base=base, head=head)
