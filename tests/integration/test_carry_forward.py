"""Work is carried forward (DESIGN section 16, workspaces): a run that ended with unmerged commits on its branch
(expired, released, sent back by a reviewer) hands them to the task's next run, whose branch starts at their tip on
the earlier base; what a killed agent left uncommitted is committed for it first. A conflict starts afresh from the
current target, as the merge queue's feedback says."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from server.config import Settings
from server.core.claims import queue
from server.core.claims.work import release_task
from server.core.integration import integrator, workspace
from server.core.operators.claims import expire_claim
from server.core.review import reviews
from tests.core.helpers import ADMIN, ALICE, BOB
from tests.git.repo import Work, git
from tests.integration.test_merge_queue import HOLDER, commit_in, conflicted, finish, one_local_task

pytestmark = pytest.mark.anyio


async def test_a_killed_agents_commits_and_leftovers_reach_the_next_run_and_main(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    async with one_local_task(make_settings, tmp_path) as (work, core, task_id):
        first = work.head()
        gone = (await queue.claim_task(core, ALICE, task_id)).workspace
        assert gone is not None
        old = gone.model_dump()
        committed = commit_in(old, "src/app.py", "print('hello')\n")
        (Path(old["path"]) / "src" / "half.py").write_text("half = True\n")  # never committed: the agent died
        await expire_claim(core, ADMIN, task_id, "its agent was killed")

        claim = await queue.claim_task(core, BOB, task_id)
        space = claim.workspace
        assert space is not None
        assert space.continues_run is not None
        assert space.base_commit == first
        assert space.start_commit is not None
        work.git("merge-base", "--is-ancestor", committed, space.start_commit)  # fails unless it descends
        here = Path(str(space.path))
        assert (here / "src" / "app.py").read_text() == "print('hello')\n"
        assert (here / "src" / "half.py").read_text() == "half = True\n"
        assert claim.base_commit == first
        commit_in(space.model_dump(), "src/more.py", "more = 1\n")
        done = await finish(core, BOB, task_id)
        assert done.review.status == "auto_approved"
        assert await integrator.integrate_waiting(core, HOLDER) == 1
        for name in ("app.py", "half.py", "more.py"):
            assert (work.path / "src" / name).exists(), name
        # The task's work is merged: the killed run's branch goes with the merged run's, none is left behind.
        assert run_branches(work) == []


async def test_a_released_run_without_commits_starts_the_next_from_the_target(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    async with one_local_task(make_settings, tmp_path) as (work, core, task_id):
        await queue.claim_task(core, ALICE, task_id)
        await release_task(core, ALICE, task_id, "not mine")
        work.write("src/other.py", "other = 1\n")
        work.commit("the target moved on meanwhile")
        space = (await queue.claim_task(core, BOB, task_id)).workspace
        assert space is not None
        assert space.continues_run is None
        assert space.base_commit == work.head()


async def test_a_reviewed_attempt_is_built_on_by_the_next_round(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    async with one_local_task(make_settings, tmp_path, review_auto_approve=False) as (_work, core, task_id):
        first = (await queue.claim_task(core, ALICE, task_id)).workspace
        assert first is not None
        tip = commit_in(first.model_dump(), "src/app.py", "print('hello')\n")
        done = await finish(core, ALICE, task_id)
        assert done.evidence_pack is not None
        await reviews.submit_review(core, ADMIN, done.evidence_pack.id, "needs_changes", "Say it louder")
        space = (await queue.claim_task(core, BOB, task_id)).workspace
        assert space is not None
        assert (space.continues_run, space.start_commit, space.base_commit) == (done.run_id, tip, first.base_commit)


async def test_a_conflicted_task_starts_again_from_the_current_target(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    async with conflicted(make_settings, tmp_path) as (work, core, hit):
        space = (await queue.claim_task(core, ALICE, hit.two)).workspace
        assert space is not None
        assert space.continues_run is None
        assert space.base_commit == work.head("main")
        # Redone on the current main and merged: the conflicted run's branch, sent back to be redone, goes too.
        commit_in(space.model_dump(), "src/app.py", "print('goodbye, again')\n")
        assert (await finish(core, ALICE, hit.two)).review.status == "auto_approved"
        assert await integrator.integrate_waiting(core, HOLDER) == 1
        assert run_branches(work) == []


async def test_an_earlier_runs_work_that_reached_no_merged_run_keeps_its_branch(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    async with one_local_task(make_settings, tmp_path) as (work, core, task_id):
        gone = (await queue.claim_task(core, ALICE, task_id)).workspace
        assert gone is not None
        commit_in(gone.model_dump(), "src/app.py", "print('hello')\n")
        await expire_claim(core, ADMIN, task_id, "its agent was killed")
        claim = await queue.claim_task(core, BOB, task_id)
        assert claim.workspace is not None
        assert claim.workspace.continues_run is not None
        # The first run's agent was not dead after all: it committed once more after the work was carried on.
        late = commit_in(gone.model_dump(), "src/late.py", "late = 1\n", message="after the run ended")
        commit_in(claim.workspace.model_dump(), "src/more.py", "more = 1\n")
        await finish(core, BOB, task_id)
        assert await integrator.integrate_waiting(core, HOLDER) == 1
        assert (work.path / "src" / "app.py").exists()
        assert not (work.path / "src" / "late.py").exists()
        assert run_branches(work) == [str(gone.branch)], "only the branch whose last commit reached nothing stays"
        assert work.head(str(gone.branch)) == late


async def test_a_redone_runs_branch_with_commits_after_its_conflict_stays(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    async with conflicted(make_settings, tmp_path) as (work, core, hit):
        branch = str(hit.workspace.branch)
        late = commit_on(work, tmp_path / "late", branch, "src/keep.py", "keep = 1\n")
        space = (await queue.claim_task(core, ALICE, hit.two)).workspace
        assert space is not None
        commit_in(space.model_dump(), "src/app.py", "print('goodbye, again')\n")
        await finish(core, ALICE, hit.two)
        assert await integrator.integrate_waiting(core, HOLDER) == 1
        assert run_branches(work) == [branch]
        assert work.head(branch) == late


async def test_a_merged_runs_branch_with_a_commit_after_its_completion_stays(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    async with one_local_task(make_settings, tmp_path) as (work, core, task_id):
        space = (await queue.claim_task(core, ALICE, task_id)).workspace
        assert space is not None
        commit_in(space.model_dump(), "src/app.py", "print('hello')\n")
        await finish(core, ALICE, task_id)
        late = commit_on(work, tmp_path / "late", str(space.branch), "src/late.py", "late = 1\n")
        assert await integrator.integrate_waiting(core, HOLDER) == 1
        assert (work.path / "src" / "app.py").exists()
        assert work.head(str(space.branch)) == late, "the commit that did not merge keeps its branch"


async def test_a_worktree_whose_leftovers_cannot_be_committed_stays_with_its_branch(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    async with one_local_task(make_settings, tmp_path) as (work, core, task_id):
        gone = (await queue.claim_task(core, ALICE, task_id)).workspace
        assert gone is not None
        old = Path(str(gone.path))
        commit_in(gone.model_dump(), "src/app.py", "print('hello')\n")
        (old / "src" / "half.py").write_text("half = True\n")  # never committed: the agent was killed in git add
        index_lock = Path(git(old, "rev-parse", "--git-path", "index.lock"))
        (index_lock if index_lock.is_absolute() else old / index_lock).write_text("")
        await expire_claim(core, ADMIN, task_id, "its agent was killed")
        claim = await queue.claim_task(core, BOB, task_id)
        assert claim.workspace is not None
        commit_in(claim.workspace.model_dump(), "src/more.py", "more = 1\n")
        await finish(core, BOB, task_id)
        assert await integrator.integrate_waiting(core, HOLDER) == 1
        assert (work.path / "src" / "app.py").exists()
        assert (old / "src" / "half.py").read_text() == "half = True\n", "kept, never lost"
        assert run_branches(work) == [str(gone.branch)]
        assert await workspace.sweep(core) == 0  # the sweeper keeps it too, while the lock is there


def commit_on(work: Work, checkout: Path, branch: str, name: str, text: str) -> str:
    """A commit on `branch` made in a worktree of its own (a person's, or an agent's that kept working), which goes
    after: the commit's id."""
    work.git("worktree", "add", "--quiet", str(checkout), branch)
    tip = commit_in({"path": str(checkout)}, name, text, message="after the run")
    work.git("worktree", "remove", "--force", str(checkout))
    return tip


def run_branches(work: Work) -> list[str]:
    """The runs' branches (`jct/run-*`) left in the repository."""
    return work.git("branch", "--list", "--format=%(refname:short)", "jct/run-*").split()
