"""The merge queue end to end on real git repositories and both databases (DESIGN section 16): a claim's
workspace, approved work merged into the target branch by the integrator, the user's checkout moved with its
files, conflicts and failed checks sent back to an agent, dependents that build on merged work."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from server.config import Settings
from server.core.claims import queue
from server.core.integration import integrator
from server.core.missions import plan, status
from server.core.operators import actions, observe, pages
from server.core.results import Workspace
from server.core.review import completion
from server.core.service import Core
from server.db import integrations
from server.notify.changes import Changes
from server.notify.feed import ChangeFeed
from server.resources import render
from tests.core.helpers import ALICE, BOB, built_core, enqueue
from tests.git.repo import Work, bare_clone, git
from tests.support.serving import running
from tests.ui.test_pages import asgi

pytestmark = pytest.mark.anyio

HOLDER = "test-integrator"
HELLO_GOODBYE = ("print('hello')\n", "print('goodbye')\n")


def make_core(make_settings: Callable[..., Settings], **overrides: Any) -> Any:
    return built_core(make_settings(integrate_local=True, **overrides))


@asynccontextmanager
async def one_local_task(
    make_settings: Callable[..., Settings], tmp_path: Path, **overrides: Any
) -> AsyncIterator[tuple[Work, Core, str]]:
    """A working tree JCT integrates into (its main), a Core with `overrides`, and one task on it: (work, core,
    task_id)."""
    work = Work(tmp_path / "repo")
    async with make_core(make_settings, **overrides) as core:
        yield work, core, await local_task(core, work)


async def local_task(core: Core, work: Work, **overrides: Any) -> str:
    fields: dict[str, Any] = {
        "target_repo": str(work.path),
        "target_ref": "main",
        "target_path": "src",
        "acceptance_criteria": [],
    }
    return await enqueue(core, **(fields | overrides))


@asynccontextmanager
async def claimed_in_myorg(
    make_settings: Callable[..., Settings], location: str
) -> AsyncIterator[tuple[Core, str, Workspace]]:
    """A Core whose myorg/ repositories are at `location` (writable), and a task on myorg/api's main that ALICE
    claimed: (core, task_id, its workspace)."""
    settings = {"repos": [f"myorg/={location}"], "repos_writable": ["myorg/"]}
    async with make_core(make_settings, **settings) as core:
        task_id = await enqueue(
            core, target_repo="myorg/api", target_ref="main", target_path="src", acceptance_criteria=[]
        )
        space = (await queue.claim_task(core, ALICE, task_id)).workspace
        assert space is not None
        yield core, task_id, space


def commit_in(workspace: dict[str, Any], name: str, text: str, message: str = "change") -> str:
    path = Path(workspace["path"])
    (path / name).parent.mkdir(parents=True, exist_ok=True)
    (path / name).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "--quiet", "-m", message)
    return git(path, "rev-parse", "HEAD")


async def finish(core: Core, agent: Any, task_id: str) -> Any:
    return await completion.complete_task(core, agent, task_id, success=True, summary="done")


async def commit_and_finish(core: Core, agent: Any, task_id: str, name: str, text: str) -> Any:
    """`agent` claims the task, commits `text` to `name` in its workspace and completes it: the completion."""
    space = (await queue.claim_task(core, agent, task_id)).workspace
    assert space is not None
    commit_in(space.model_dump(), name, text)
    return await finish(core, agent, task_id)


@dataclass(frozen=True)
class Collision:
    one: str
    two: str
    workspace: Any  # the second task's workspace
    second: Any  # the second task's completion


async def collide(
    core: Core, work: Work, name: str = "src/app.py", texts: tuple[str, str] = HELLO_GOODBYE
) -> Collision:
    """Two tasks that declare no touches, so both run at once, each writing `name` its own way and completing
    (the first first): their collision is caught at merge."""
    one = await local_task(core, work, objective="Say hello", touches=[])
    two = await local_task(core, work, objective="Say goodbye", touches=[])
    a = (await queue.claim_task(core, ALICE, one)).workspace
    b = (await queue.claim_task(core, BOB, two)).workspace
    assert a is not None
    assert b is not None
    commit_in(a.model_dump(), name, texts[0])
    commit_in(b.model_dump(), name, texts[1])
    await finish(core, ALICE, one)
    return Collision(one, two, b, await finish(core, BOB, two))


@asynccontextmanager
async def conflicted(
    make_settings: Callable[..., Settings], tmp_path: Path, **overrides: Any
) -> AsyncIterator[tuple[Work, Core, Collision]]:
    """Two colliding tasks (`collide`) integrated, with a Core on `overrides`: the first merged, the second's
    conflict caught. (work, core, the collision)."""
    work = Work(tmp_path / "repo")
    async with make_core(make_settings, **overrides) as core:
        hit = await collide(core, work)
        assert await integrator.integrate_waiting(core, HOLDER) == 2
        yield work, core, hit


async def merged_when_freed(core: Core, work: Work) -> None:
    """What held `src/new.py` ("n = 1") back is gone: the next pass merges it, and the checkout is left clean."""
    assert await integrator.integrate_waiting(core, HOLDER) == 1
    assert (work.path / "src" / "new.py").read_text() == "n = 1\n"
    assert work.git("status", "--porcelain") == ""


async def test_approved_work_reaches_main_and_the_users_checkout_stays_clean(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    async with one_local_task(make_settings, tmp_path) as (work, core, task_id):
        first = work.head()
        claimed = await queue.claim_task(core, ALICE, task_id)
        assert claimed.workspace is not None
        space = claimed.workspace.model_dump()
        assert space["base_commit"] == first
        assert Path(space["path"]).is_relative_to(core.settings.worktrees)
        assert work.head(space["branch"]) == first
        commit_in(space, "src/app.py", "print('hello')\n")
        # Left uncommitted by the agent: committed for it at completion, never lost.
        (Path(space["path"]) / "src" / "extra.py").write_text("x = 1\n")
        done = await finish(core, ALICE, task_id)
        assert done.review.status == "auto_approved"
        view = await observe.get_task(core, task_id)
        assert view.integration is not None
        assert view.integration.status == "queued"
        assert work.head("main") == first  # nothing moves inside the call that approved
        assert not Path(space["path"]).exists()  # the ended run's worktree is gone

        assert await integrator.integrate_waiting(core, HOLDER) == 1

        view = await observe.get_task(core, task_id)
        assert view.integration is not None
        assert view.integration.status == "merged"
        assert view.integration.commit == work.head("main") != first
        assert (work.path / "src" / "app.py").read_text() == "print('hello')\n"
        assert (work.path / "src" / "extra.py").read_text() == "x = 1\n"
        assert work.git("status", "--porcelain") == ""
        assert view.task.status == "completed"
        assert git(work.path, "branch", "--list", space["branch"]) == ""  # merged: its branch is gone
        stats = await queue.queue_stats(core)
        assert stats.merge_queue == {}


async def test_a_merge_removes_a_worktree_whose_handed_off_removal_another_process_has_not_done_yet(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    """The completion hands its worktree's removal off (server/core/handoff.py); git refuses to delete a branch
    checked out in a worktree, so the integrator, in another process here, removes the worktree first."""
    async with one_local_task(make_settings, tmp_path) as (work, completing, task_id):
        release = anyio.Event()
        async with built_core(completing.settings) as merging, anyio.create_task_group() as tg:
            await tg.start(completing.handoffs.run)
            await completing.handoffs.hand_off("earlier", release.wait)  # the queue is busy with something else
            try:
                space = (await queue.claim_task(completing, ALICE, task_id)).workspace
                assert space is not None
                commit_in(space.model_dump(), "src/app.py", "print('hello')\n")
                done = await finish(completing, ALICE, task_id)
                assert done.review.status == "auto_approved"
                assert Path(space.path or "").is_dir(), "its removal waits in the completing process"

                assert await integrator.integrate_waiting(merging, HOLDER) == 1

                assert work.head("main") != space.base_commit
                assert not Path(space.path or "").exists()
                assert git(work.path, "branch", "--list", space.branch) == ""  # merged: its branch is gone
            finally:
                release.set()  # a shielded work holds the task group's exit until it is done
            await completing.handoffs.settled(done.run_id)  # the late removal finds nothing to do
            assert completing.handoffs.pending == 0
            tg.cancel_scope.cancel()


async def test_work_joining_the_merge_queue_ends_the_integrators_pause(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    """The change feed sees the completion's integration.queued and nudges the integrator (core.integrator): the
    merge does not wait for the end of the integrator's interval (an hour here)."""
    async with one_local_task(make_settings, tmp_path) as (work, core, task_id), anyio.create_task_group() as tg:
        feed = ChangeFeed(core, nothing, interval=3600)
        await feed.start_position()
        tg.start_soon(integrator.run_integrator, core, 3600)  # its first pass finds nothing, then it pauses
        await anyio.sleep(0.1)
        done = await commit_and_finish(core, ALICE, task_id, "src/app.py", "print('hello')\n")
        assert done.review.status == "auto_approved"
        await feed.poll()
        with anyio.fail_after(30):
            while (view := await observe.get_task(core, task_id)).integration.status != "merged":  # type: ignore[union-attr]
                await anyio.sleep(0.05)
        assert view.integration is not None
        assert view.integration.commit == work.head("main")
        tg.cancel_scope.cancel()


async def nothing(_changes: Changes) -> None:
    """The feed's delivery, where nobody subscribes."""


async def test_a_conflict_goes_back_to_the_agent_and_changes_nothing_on_main(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    async with conflicted(make_settings, tmp_path) as (work, core, hit):
        two, b, second = hit.two, hit.workspace, hit.second
        merged_main = work.head("main")
        # The run's jct:// page says it too.
        page = render.run_page(await pages.run_page(core, second.run_id))
        assert "**conflict** into `main` (rebase)" in page
        assert "Conflicts in: src/app.py" in page
        assert f"Workspace: branch `{b.branch}`" in page
        assert (work.path / "src" / "app.py").read_text() == "print('hello')\n"

        view = await observe.get_task(core, two)
        assert view.integration is not None
        assert view.integration.status == "conflict"
        assert view.integration.conflicting_files == ["src/app.py"]
        assert view.task.status == "queued"
        assert work.head("main") == merged_main
        assert work.git("status", "--porcelain") == ""

        again = await queue.claim_task(core, BOB, two)
        assert again.base_commit == merged_main  # starts from the merged work
        assert again.context_packet is not None
        feedback = again.context_packet.review_feedback[-1]
        assert feedback.decision == "conflict"
        assert "src/app.py" in feedback.reason
        assert merged_main in feedback.reason
        assert again.workspace is not None
        commit_in(again.workspace.model_dump(), "src/app.py", "print('hello')\nprint('goodbye')\n")
        await finish(core, BOB, two)
        assert await integrator.integrate_waiting(core, HOLDER) == 1
        assert (work.path / "src" / "app.py").read_text() == "print('hello')\nprint('goodbye')\n"


async def test_a_checkout_with_uncommitted_changes_is_never_overwritten(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    async with one_local_task(make_settings, tmp_path) as (work, core, task_id):
        first = work.head()
        await commit_and_finish(core, ALICE, task_id, "src/new.py", "n = 1\n")
        work.write("README.md", "my own edit\n")

        assert await integrator.integrate_waiting(core, HOLDER) == 0
        view = await observe.get_task(core, task_id)
        assert view.integration is not None
        assert view.integration.status == "queued"
        assert view.integration.waiting is not None
        assert "README.md" in view.integration.waiting
        assert work.head("main") == first
        assert (work.path / "README.md").read_text() == "my own edit\n"
        stuck = await actions.list_stuck(core)
        assert [item.kind for item in stuck.items] == ["integration_waiting"]
        assert "README.md" in stuck.items[0].reason

        work.git("checkout", "--", "README.md")
        await merged_when_freed(core, work)


async def test_a_bare_repository_is_moved_by_compare_and_swap_and_a_moved_target_is_replayed(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    source = Work(tmp_path / "source")
    bare = bare_clone(source.path, tmp_path / "git" / "api.git")
    async with claimed_in_myorg(make_settings, str(tmp_path / "git")) as (core, task_id, space):
        assert space.path is not None
        commit_in(space.model_dump(), "src/app.py", "print('hello')\n")
        await finish(core, ALICE, task_id)
        # A person pushes to main meanwhile: the run's work is replayed on it, never overwriting it.
        other = Work(tmp_path / "person")
        git(other.path, "remote", "add", "origin", str(bare))
        git(other.path, "fetch", "--quiet", "origin")
        git(other.path, "reset", "--quiet", "--hard", "origin/main")
        other.write("docs/notes.md", "by a person\n")
        person = other.commit("a person's commit")
        git(other.path, "push", "--quiet", "origin", "HEAD:main")

        assert await integrator.integrate_waiting(core, HOLDER) == 1, (
            await observe.get_task(core, task_id)
        ).integration
        tip = git(bare, "rev-parse", "main")
        assert git(bare, "merge-base", "--is-ancestor", person, tip) == ""
        assert git(bare, "show", f"{tip}:src/app.py") == "print('hello')"
        assert git(bare, "show", f"{tip}:docs/notes.md") == "by a person"


async def test_a_failing_check_sends_the_work_back_with_its_output(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    work = Work(tmp_path / "repo")
    first = work.head()
    check = {str(work.path): "test -f src/ok.py || { echo 'ok.py is missing'; exit 1; }"}
    async with make_core(make_settings, check_commands=check) as core:
        task_id = await local_task(core, work)
        await commit_and_finish(core, ALICE, task_id, "src/app.py", "print('x')\n")
        assert await integrator.integrate_waiting(core, HOLDER) == 1
        view = await observe.get_task(core, task_id)
        assert view.integration is not None
        assert view.integration.status == "check_failed"
        assert "ok.py is missing" in (view.integration.check_output or "")
        assert view.task.status == "queued"
        assert work.head("main") == first

        await commit_and_finish(core, ALICE, task_id, "src/ok.py", "ok = True\n")
        assert await integrator.integrate_waiting(core, HOLDER) == 1
        view = await observe.get_task(core, task_id)
        assert view.integration is not None
        assert view.integration.status == "merged"
        assert not any((core.settings.worktrees / "scratch").glob("*"))


async def test_dependents_unblock_when_the_work_is_merged_and_start_from_it(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    work = Work(tmp_path / "repo")
    async with make_core(make_settings) as core:
        repo = str(work.path)
        step = {"target_repo": repo, "target_ref": "main", "target_path": "src", "acceptance_criteria": []}
        tasks = [
            {"key": "a", "objective": "Write the greeting", "operation": "code_change", **step},
            {"key": "b", "objective": "Use it", "operation": "code_change", "depends_on": ["a"], **step},
        ]
        made = await plan.create_mission(
            core, ALICE, title="Two steps", goal="Greet", phases=[{"name": "Build", "tasks": tasks}]
        )
        first, second = made.tasks[0].task_id, made.tasks[1].task_id
        await commit_and_finish(core, ALICE, first, "src/greeting.py", "GREETING = 'hi'\n")
        assert (await observe.get_task(core, second)).task.status == "blocked"  # approved, not merged yet

        assert await integrator.integrate_waiting(core, HOLDER) == 1
        assert (await observe.get_task(core, second)).task.status == "queued"
        claimed = await queue.claim_task(core, BOB, second)
        assert claimed.workspace is not None
        assert (Path(claimed.workspace.path or "") / "src" / "greeting.py").is_file()
        commit_in(claimed.workspace.model_dump(), "src/app.py", "from greeting import GREETING\n")
        await finish(core, BOB, second)
        mission = await status.get_mission(core, made.mission_id)
        assert mission.mission.status == "active"  # approved but not merged: not done
        assert await integrator.integrate_waiting(core, HOLDER) == 1
        mission = await status.get_mission(core, made.mission_id)
        assert mission.mission.status == "completed"


async def test_an_integration_that_landed_before_a_crash_is_recorded_and_changes_nothing(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    async with one_local_task(make_settings, tmp_path) as (work, core, task_id):
        await commit_and_finish(core, ALICE, task_id, "src/app.py", "print('hello')\n")
        assert await integrator.integrate_waiting(core, HOLDER) == 1
        landed = work.head("main")
        # As if the integrator died after moving the ref and before recording it: the row says merging.
        view = await observe.get_task(core, task_id)
        assert view.integration is not None
        async with core.db.write() as conn:
            item = await integrations.of_task(conn, task_id)
            assert item is not None
            await integrations.update_integration(conn, item.id, {"status": "merging"})
        assert await integrator.integrate_waiting(core, "another-process") == 1
        assert work.head("main") == landed
        again = await observe.get_task(core, task_id)
        assert again.integration is not None
        assert again.integration.status == "merged"
        assert again.integration.commit == landed


async def test_one_integrator_per_repository_and_ref_until_its_lease_lapses(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    async with make_core(make_settings) as core:
        now = datetime.now(UTC)
        later = now + timedelta(seconds=30)
        async with core.db.write() as conn:
            assert await integrations.take(conn, "r", "main", "one", now, later)
            assert not await integrations.take(conn, "r", "main", "two", now, later)
            assert await integrations.take(conn, "r", "other", "two", now, later)
            assert await integrations.take(conn, "r", "main", "one", now, later)  # renewed by its holder
            # Lapsed: taken over.
            lapsed = later + timedelta(seconds=1)
            assert await integrations.take(conn, "r", "main", "two", lapsed, lapsed + timedelta(seconds=30))


async def test_the_servers_own_integrator_merges_and_the_dashboard_shows_the_queue(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    """With the app's lifespan running, the background integrator does the work; /ui/merges shows what landed and
    what conflicted, file names as text."""
    work = Work(tmp_path / "repo")
    hostile = "src/<b>x</b>.py"
    async with running(make_settings(integrate_local=True)) as (app, core), asgi(app) as http:
        hit = await collide(core, work, hostile, ("one\n", "two\n"))
        one, two = hit.one, hit.two
        for _ in range(600):  # the integrator polls once a second
            views = [await observe.get_task(core, task_id) for task_id in (one, two)]
            if all(v.integration is not None and v.integration.status not in ("queued", "merging") for v in views):
                break
            await anyio.sleep(0.1)
        assert [v.integration.status for v in views if v.integration is not None] == ["merged", "conflict"]
        page = await http.get("/ui/merges")
        assert page.status_code == 200
        assert "merged" in page.text
        assert "conflicts in src/&lt;b&gt;x&lt;/b&gt;.py" in page.text
        assert "<b>x</b>" not in page.text


async def test_a_remote_agent_pushes_its_branch_and_jct_pushes_main_never_forced(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    """A URL location: JCT pushes the run's branch to the remote at claim (no worktree), the agent fetches it,
    commits and pushes; JCT reads it at completion and pushes the integrated main."""
    source = Work(tmp_path / "source")
    remote = bare_clone(source.path, tmp_path / "remote" / "api.git")
    first = git(remote, "rev-parse", "main")
    async with claimed_in_myorg(make_settings, f"file://{tmp_path / 'remote'}") as (core, task_id, space):
        assert space.path is None  # a remote agent's workspace is the branch
        assert git(remote, "rev-parse", space.branch) == first
        clone = tmp_path / "agent"
        git(tmp_path, "clone", "--quiet", "--branch", space.branch, str(remote), str(clone))
        (clone / "src" / "app.py").write_text("print('remote')\n")
        git(clone, "commit", "--quiet", "-am", "remote change")
        git(clone, "push", "--quiet", "origin", space.branch)
        done = await finish(core, ALICE, task_id)
        assert done.review.status == "auto_approved"
        assert await integrator.integrate_waiting(core, HOLDER) == 1
        tip = git(remote, "rev-parse", "main")
        assert tip != first
        assert git(remote, "show", "main:src/app.py") == "print('remote')"
        view = await observe.get_task(core, task_id)
        assert view.integration is not None
        assert view.integration.commit == tip


async def test_a_stale_lock_in_the_checkout_makes_the_integration_wait_and_say_so(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    """An index.lock a crashed git left in the user's checkout: nothing moves, the integration waits naming the
    lock (and jct_list_stuck shows it); once a person removes it, the work is merged."""
    work = Work(tmp_path / "repo")
    first = work.head()
    async with make_core(make_settings) as core:
        task_id = await local_task(core, work, touches=[])
        await commit_and_finish(core, ALICE, task_id, "src/new.py", "n = 1\n")
        lock = work.path / ".git" / "index.lock"
        lock.write_text("")

        assert await integrator.integrate_waiting(core, HOLDER) == 0
        view = await observe.get_task(core, task_id)
        assert view.integration is not None
        assert view.integration.status == "queued"
        assert "index.lock" in (view.integration.waiting or "")
        assert work.head("main") == first
        assert [item.kind for item in (await actions.list_stuck(core)).items] == ["integration_waiting"]

        lock.unlink()
        await merged_when_freed(core, work)


async def test_a_conflict_at_the_last_round_fails_the_task_for_a_person(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    async with conflicted(make_settings, tmp_path, max_review_rounds=1) as (_work, core, hit):
        two = hit.two
        view = await observe.get_task(core, two)
        assert view.integration is not None
        assert view.integration.status == "conflict"
        assert view.task.status == "failed"
        assert view.task.error is not None
        assert "integration: conflict" in view.task.error
