"""The integrator: works the merge queue in the background, on every server process (DESIGN section 16).

One integrator at a time per (repository, ref) across all processes: it holds that pair's lease in
`integrators` (server/db/integrations.py), renewed while it works and taken over by another process once it
lapses, so a process killed mid-replay or mid-check leaves the next one to start that integration again.

Integrating one run, in order: bring the target ref up to date (a URL location is fetched); if this
integration already moved the ref before a crash, record it as merged and change nothing; replay the run's
commits onto the target with no working tree (server/core/git/merges.py); run the repository's check command,
if one is configured, in a scratch worktree; then move the target with a compare-and-swap: a push that is not
forced, the checkout of the branch fast-forwarded with its files (after checking it has no uncommitted change),
or `update-ref NEW OLD`. A target that moved meanwhile is replayed again on its new head, never overwritten.
The replayed commit is written down before the ref moves, so a crash leaves the old ref or the new one, and
the next integrator knows which.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial

import anyio

from server.core.git import checks, gitcli, merges, workspaces
from server.core.git.repos import Place
from server.core.integration import queue, workspace
from server.core.models import new_id
from server.core.service import Core
from server.db import integrations, queries
from server.db.records import Integration
from server.errors import JctError
from server.failures import every
from server.vocab import RunStatus

log = logging.getLogger(__name__)

# How many times one integration is replayed again because the target moved under it, in one turn.
MOVED_RETRIES = 5


@dataclass(frozen=True)
class Outcome:
    """What one turn at an integration came to: done (merged or sent back), or waiting (try on a later pass)."""

    done: bool


class LostLease(Exception):
    """Another process took the (repo, ref) over: this one stops at once."""


async def run_integrator(core: Core, interval: float) -> None:
    """Runs until cancelled: every `interval` seconds, and as soon as the change feed sees work join the merge
    queue (in any process: `core.integrator`), integrate whatever waits and no other process holds."""
    holder = new_id()
    # A database or git failure is logged and tried again on the next pass.
    effect = "approved work is not integrated meanwhile"
    step = partial(integrate_waiting, core, holder)
    await every(interval, step, log, effect=effect, what="integrator pass", pause=core.integrator.pause)


async def integrate_waiting(core: Core, holder: str) -> int:
    """One pass over every (repo, ref) with waiting work; how many integrations ended (merged or sent back)."""
    async with core.db.read() as conn:
        targets = await integrations.waiting_targets(conn)
    ended = 0
    for repo, ref in targets:
        if not await _take(core, repo, ref, holder):
            continue
        try:
            ended += await _drain(core, repo, ref, holder)
        except LostLease:
            log.warning("integrator lease on %s %s was taken over", repo, ref)
            continue
        finally:
            with anyio.CancelScope(shield=True):
                async with core.db.write() as conn:
                    await integrations.release(conn, repo, ref, holder)
    return ended


async def _take(core: Core, repo: str, ref: str, holder: str) -> bool:
    now = datetime.now(UTC)
    async with core.db.write() as conn:
        until = now + timedelta(seconds=core.settings.integrator_lease_seconds)
        return await integrations.take(conn, repo, ref, holder, now, until)


async def _drain(core: Core, repo: str, ref: str, holder: str) -> int:
    ended = 0
    while True:
        async with core.db.read() as conn:
            item = await integrations.next_for(conn, repo, ref)
        if item is None:
            return ended
        async with anyio.create_task_group() as tg:
            lost = False

            async def renew() -> None:
                nonlocal lost
                while True:
                    await anyio.sleep(core.settings.integrator_lease_seconds / 3)
                    if not await _take(core, repo, ref, holder):
                        lost = True
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(renew)
            outcome = await integrate(core, item)
            tg.cancel_scope.cancel()
        if lost:
            raise LostLease
        if not outcome.done:
            return ended
        ended += 1


async def integrate(core: Core, item: Integration) -> Outcome:
    """One turn at one integration (the caller holds its (repo, ref))."""
    async with core.db.write() as conn:
        await integrations.update_integration(
            conn, item.id, {"status": queue.MERGING, "started_at": core.now(), "attempts": item.attempts + 1}
        )
        task = await queries.get_task(conn, item.task_id)
        assert task is not None  # foreign key
        if task.merge != queue.MERGING:
            await queries.update_task(conn, task.id, {"merge": queue.MERGING})
    trace = task.trace_id
    within = core.settings.git_timeout_seconds
    try:
        place = await core.repos.open(item.repo, max_age=0)
    except JctError as exc:
        return await _wait(core, item, f"the repository cannot be read: {exc.message}", trace)
    if place is None or not place.writable:
        return await _wait(core, item, "the repository is no longer integrable (JCT_REPOS_WRITABLE)", trace)
    try:
        for _ in range(MOVED_RETRIES):
            tip = await gitcli.resolve(place.repo, "refs/heads/" + item.ref, within=within)
            if tip is None:
                return await _wait(core, item, f"the repository has no branch {item.ref!r}", trace)
            if item.commit is not None and await gitcli.is_ancestor(place.repo, item.commit, tip, within=within):
                # This integration moved the ref before its integrator stopped: it landed.
                await _forget_branches(core, place, item)
                return await _merged(core, item, item.commit, trace)
            if await gitcli.is_ancestor(place.repo, item.head_commit, tip, within=within):
                await _forget_branches(core, place, item)
                return await _merged(core, item, tip, trace)  # already on the target (merged by a person)
            replayed = await merges.replay(
                place.repo,
                onto=tip,
                base=item.base_commit,
                head=item.head_commit,
                strategy=item.strategy,
                message=f"{task.objective.splitlines()[0][:200]}\n\nJCT task {task.id}, run {item.run_id}",
                within=within,
            )
            if replayed.commit is None:
                conflict = queue.SentBack(queue.CONFLICT, tip, conflicting_files=list(replayed.conflicting_files))
                return await _sent_back(core, item, conflict)
            new = replayed.commit
            command = check_command(core, item.repo)
            if command is not None:
                checked = await checks.run_check(
                    place.repo,
                    new,
                    command,
                    scratch=workspace.scratch_path(core, item.run_id),
                    timeout=core.settings.check_timeout_seconds,
                    max_bytes=core.settings.check_output_bytes,
                )
                if not checked.ok:
                    why = "timed out" if checked.timed_out else "failed"
                    output = f"[check command {why}: {command}]\n{checked.output}"
                    return await _sent_back(core, item, queue.SentBack(queue.CHECK_FAILED, tip, check_output=output))
            # Written down before the ref moves: a crash after the move is recognised as merged.
            async with core.db.write() as conn:
                await integrations.update_integration(conn, item.id, {"commit": new})
            item = item.model_copy(update={"commit": new})
            moved = await _move(core, place, item.ref, new, tip)
            if isinstance(moved, str):
                return await _wait(core, item, moved, trace)
            if moved:
                await _forget_branches(core, place, item)
                return await _merged(core, item, new, trace)
            # The target moved under us: replay on its new head.
        return await _wait(core, item, f"{item.ref} kept moving while JCT integrated; trying again", trace)
    except gitcli.Locked as exc:
        return await _wait(core, item, f"the repository is locked ({exc}); a stale lock file needs removing", trace)
    except gitcli.GitError as exc:
        return await _wait(core, item, f"git failed: {exc}", trace)


def check_command(core: Core, repo: str) -> str | None:
    """The check command for `repo`: JCT_CHECK_COMMANDS's entry for it, or for its longest prefix."""
    commands = core.settings.check_commands
    if repo in commands:
        return commands[repo]
    prefixes = sorted((p for p in commands if repo.startswith(p)), key=len, reverse=True)
    return commands[prefixes[0]] if prefixes else None


async def _move(core: Core, place: Place, ref: str, new: str, old: str) -> bool | str:
    """Move `ref` from `old` to `new`: True moved, False it was not `old` any more, or why it must wait."""
    within = core.settings.git_timeout_seconds
    if place.url is not None:
        return await merges.push(place.repo, place.url, new, ref, within=within)
    checkout = await merges.checkout_of(place.repo, ref, within=within)
    if checkout is None:
        return await merges.move_ref(place.repo, ref, new, old, within=within)
    dirty = await merges.uncommitted(checkout, within=within)
    if dirty:
        shown = ", ".join(dirty[:10]) + (f" and {len(dirty) - 10} more" if len(dirty) > 10 else "")
        return f"{ref} is checked out in {checkout} with uncommitted changes ({shown}): commit or stash them"
    if not await merges.fast_forward(checkout, new, within=within):
        head = await gitcli.resolve(place.repo, "refs/heads/" + ref, within=within)
        if head != old:
            return False  # someone committed there: replay on the new head
        return f"{ref}'s checkout in {checkout} cannot move to the integrated commit (files in the way?)"
    return True


async def _forget_branches(core: Core, place: Place, item: Integration) -> None:
    """The task's work is merged, in JCT's repository: the branches that have served go. First each run's
    worktree still there is retired as the sweeper would (what its agent left is committed on its branch, so
    the tip is judged with it; one that cannot be kept that way stays, with its branch). Then a branch goes when
    everything on it reached the merge: the merged run's, and an earlier run's whose work the merged run carried,
    when its tip is an ancestor of the merged head; or an earlier run's that was sent back to be redone (a
    conflict, a failed check), when its tip is still what was sent back. A branch with commits of its own after
    that (an agent that kept working) stays. Deleting is idempotent: a later pass deletes what a crash left."""
    if place.url is not None:
        return
    within = core.settings.git_timeout_seconds
    async with core.db.read() as conn:
        runs = await queries.runs_of_task(conn, item.task_id, limit=EARLIER_RUNS_FORGOTTEN)
        earlier = [run for run in runs if run.id != item.run_id and run.workspace and run.status != RunStatus.RUNNING]
        ended = await integrations.of_runs(conn, [run.id for run in earlier]) if earlier else {}
    reached: dict[str, str] = {item.run_id: item.head_commit}  # each run's branch goes if its tip is in this
    for run in earlier:
        sent_back = ended.get(run.id)
        redone = sent_back is not None and sent_back.status in (queue.CONFLICT, queue.CHECK_FAILED)
        reached[run.id] = sent_back.head_commit if redone and sent_back is not None else item.head_commit
    for run_id, merged in reached.items():
        if not await workspace.retire(core, place, run_id):
            continue
        branch = workspaces.branch_name(run_id)  # the one name a run's branch has
        try:
            tip = await gitcli.resolve(place.repo, "refs/heads/" + branch, within=within)
            if tip is None or not await gitcli.is_ancestor(place.repo, tip, merged, within=within):
                continue
            await workspaces.delete_branch(place.repo, branch, within=within, tip=tip)
        except gitcli.GitError as exc:
            log.warning("could not delete branch %s: %s", branch, exc)


# How many of a task's runs, newest first, are looked at for branches to delete when its work merges.
EARLIER_RUNS_FORGOTTEN = 20


async def _merged(core: Core, item: Integration, commit: str, trace: str | None) -> Outcome:
    async with core.db.write() as conn:
        await queue.merged(core, conn, item, commit, trace)
    return Outcome(done=True)


async def _sent_back(core: Core, item: Integration, back: queue.SentBack) -> Outcome:
    async with core.db.write() as conn:
        task = await queries.get_task(conn, item.task_id)
        assert task is not None
        await queue.sent_back(core, conn, item, task, back)
    return Outcome(done=True)


async def _wait(core: Core, item: Integration, why: str, trace: str | None) -> Outcome:
    log.info("integration of run %s waits: %s", item.run_id, why)
    async with core.db.write() as conn:
        await queue.waiting(core, conn, item, why, trace)
    return Outcome(done=False)
