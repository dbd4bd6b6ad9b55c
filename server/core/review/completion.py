"""Completing a claimed task: the prover's evidence, the review policy, and a retry that changes nothing."""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

import anyio
from sqlalchemy.ext.asyncio import AsyncConnection

from server.core import results, views
from server.core import telemetry as usage
from server.core.claims import leases
from server.core.claims.work import task_row
from server.core.git import gitcli, verified
from server.core.integration import workspace
from server.core.models import Actor, Limits, check_text, parse_id
from server.core.review import manifest, policy, prover
from server.core.service import Core
from server.core.text import parse_json, storable
from server.db import changes, queries
from server.db.leases import Fence
from server.db.records import Artifact, Reported, Run, Step, Task
from server.errors import ErrorCode, JctError, invalid
from server.vocab import ArtifactType

# Artifact types whose inline content the prover reads (diffs for scope, logs for test results).
PROVED_CONTENT = (ArtifactType.CODE_PATCH, ArtifactType.LOG)


async def complete_task(
    core: Core,
    actor: Actor,
    task_id: str,
    *,
    success: bool,
    summary: str,
    outputs: str | dict[str, Any] | None = None,
    error_message: str | None = None,
    criteria_results: list[dict[str, Any]] | None = None,
    telemetry: dict[str, Any] | None = None,
    run_id: str | None = None,
) -> results.Completion:
    task_id = parse_id(task_id, "task_id")
    fence = leases.fence_for(core, actor, task_id, run_id)
    check_text(summary, "summary", Limits.SUMMARY)
    if error_message is not None:
        check_text(error_message, "error_message", Limits.MESSAGE, required=False)
    parsed_outputs = _parse_outputs(outputs)
    checked_telemetry = usage.check(telemetry)
    if criteria_results is not None and not isinstance(criteria_results, list):
        raise invalid("criteria_results must be a list.", "Send a list of {criterion, status, evidence, note}.")

    def decide(
        read: ReadChange | None, facts: changes.Facts
    ) -> tuple[list[changes.Write], tuple[results.Completion, changes.Facts]]:
        """`read`: the change read from git beforehand; None: not read, as the task is not verifiable."""
        task, run = facts.completing(), facts.run
        if read is None:
            if _verifiable(core, task.target_repo):
                raise _ReadFirst  # rolled back: the change is read outside a transaction, then all again
            read = ReadChange()
        criteria = facts.acceptance_criteria
        declared = declared_outputs(task.step)
        json_titles = {output.name for output in declared if output.type == prover.JSON_OUTPUT}
        evidence = prover.prove(
            prover.ProverInput(
                operation=task.operation,
                success=success,
                target_path=task.target_path,
                time_budget_seconds=task.time_budget_seconds,
                duration_seconds=(datetime.now(UTC) - run.started_at).total_seconds(),
                acceptance_criteria=criteria,
                claims=prover.resolve_claims(criteria, criteria_results or []),
                artifacts=tuple(_prover_artifact(core, a, json_titles) for a in facts.artifacts),
                outputs=declared,
                verifiable=read.verifiable,
                files_changed=read.paths,
                change_note=read.note,
                verified_commits=read.heads,
            )
        )
        writes, done = policy.settle_completion(
            core,
            actor,
            task=task,
            run=run,
            evidence=evidence,
            success=success,
            summary=summary,
            outputs=parsed_outputs,
            error_message=error_message,
            telemetry=checked_telemetry,
            ts=facts.clock(),  # the clock the transaction read: the manifest's ended_at is the row's
            files_changed=read.files_changed,
        )
        # The facts go back out: the manifest is written from them after the commit.
        return writes, (done, facts)

    try:
        # Most tasks have no repository JCT reads: one transaction, which finds that out from the row it fenced.
        # A verifiable one rolls it back, reads its change from git (no transaction waits on git), and goes again.
        try:
            changed = await changes.apply(core.db, fence, partial(decide, None), completion=True)
        except _ReadFirst:
            read = await _read_change(core, fence)
            changed = await changes.apply(core.db, fence, partial(decide, read), completion=True)
    except changes.RowMissed:
        raise JctError(
            ErrorCode.TASK_NOT_CLAIMED,
            f"Task {task_id} ended while completing (it was cancelled or expired); nothing was recorded.",
            "Use jct_get_task to see where the task stands.",
        ) from None
    if changed is not None:
        done, facts = changed.result
        await manifest.record_completion(core, facts, done)
        if facts.run.workspace:
            # The run has ended: its worktree goes (its branch stays until merged), after the answer: a large
            # checkout takes a while to delete.
            await core.handoffs.hand_off(done.run_id, partial(workspace.close, core, facts.run))
        return done
    # The fence refused: a retry of a recorded completion gets that outcome; anything else is an error.
    async with core.db.read() as conn:
        recorded = await _recorded_outcome(core, conn, fence)
        if recorded is None:
            raise await leases.refusal(core, conn, fence)
    # The first completion's manifest may have been lost to a full disk; the retry writes it.
    await manifest.record(core, recorded.run_id, only_if_missing=True)
    return recorded


def declared_outputs(step: Step | None) -> tuple[prover.DeclaredOutput, ...]:
    """The outputs a workflow step declares (kept on its task when the mission started)."""
    if step is None:
        return ()
    return tuple(prover.DeclaredOutput(o.name, o.type, o.required, o.schema_) for o in step.outputs)


class _ReadFirst(Exception):
    """The task's repository is one JCT reads: its change must be read before the completion's transaction."""


def _verifiable(core: Core, target_repo: str) -> bool:
    """Whether a completion of a task on `target_repo` reads its change first (no disk touched)."""
    if not core.repos.place_of_any():
        return False
    try:
        return core.repos.place(target_repo) is not None
    except JctError:
        return True  # a name JCT will not read: the read says so in the evidence


@dataclass(frozen=True)
class ReadChange:
    """What JCT read in a verifiable task's repository before the completion's transaction."""

    verifiable: bool = False
    files_changed: dict[str, Any] | None = None
    heads: tuple[str, ...] = ()
    note: str = ""

    @property
    def paths(self) -> tuple[str, ...] | None:
        if self.files_changed is None:
            return None
        files = self.files_changed["files"]
        # A rename out of target_path changes the place it left too.
        return tuple(dict.fromkeys(p for f in files for p in (f.get("old_path"), f["path"]) if p))


async def _read_change(core: Core, fence: Fence) -> ReadChange:
    """files_changed for a verifiable task (server/core/git/verified.py), read before the fenced change so no
    transaction waits on git. A caller the fence will refuse gets nothing read."""
    if not core.repos.place_of_any():
        return ReadChange()
    async with core.db.read() as conn:
        task = await queries.get_task(conn, fence.task_id)
        if task is None:
            return ReadChange()
        try:
            if core.repos.place(task.target_repo) is None:
                return ReadChange()  # not verifiable: one primary-key read was all this cost
        except JctError:
            return ReadChange(verifiable=True, note="the repository name cannot be read")
        run = await leases.open_run(core, conn, fence)
        if run is None:
            return ReadChange()
        rows = await queries.artifacts_of_run(conn, run.id)
    if run.workspace:
        return await _read_workspace(core, task, run)
    commits = [a for a in rows if a.type == ArtifactType.COMMIT and a.stored]
    heads = await anyio.to_thread.run_sync(_commit_ids, core, commits)
    try:
        change = await verified.change_of_run(core, task, run, heads)
        if change is None:
            why = "no base commit was recorded at claim" if run.base_commit is None else "no commit was reported"
            return ReadChange(verifiable=True, heads=heads, note=f"nothing verified to read: {why}")
        return ReadChange(True, await verified.files_changed(core, change), heads)
    except JctError as exc:
        return ReadChange(verifiable=True, heads=heads, note=exc.message)


async def _read_workspace(core: Core, task: Task, run: Run) -> ReadChange:
    """A run with a workspace (an integrable repository): its change is its branch, base commit to tip, after
    JCT commits whatever the agent left uncommitted in its worktree."""
    try:
        place = await core.repos.open(task.target_repo, max_age=0)
        if place is None or run.base_commit is None:
            return ReadChange(verifiable=True, note="the run's repository cannot be read now")
        head = await workspace.head_of(core, place, run)
        if head is None or head == run.base_commit:
            return ReadChange(
                verifiable=True, note=f"nothing was committed on branch {(run.workspace or {}).get('branch')}"
            )
        change = verified.Change(place, run.base_commit, head, working_tree=False)
        return ReadChange(True, await verified.files_changed(core, change), (head,))
    except gitcli.GitError as exc:
        return ReadChange(verifiable=True, note=f"the run's branch cannot be read: {exc}")
    except JctError as exc:
        return ReadChange(verifiable=True, note=exc.message)


def _commit_ids(core: Core, rows: list[Artifact]) -> tuple[str, ...]:
    """The commit ids verified commit artifacts hold (JCT stored the full id at report)."""
    ids = []
    for row in rows:
        text, _total, _more = core.store.read_text(row.uri, 0, 200)
        if gitcli.SHA.match(text.strip()):
            ids.append(text.strip())
    return tuple(ids)


def _prover_artifact(core: Core, row: Reported, json_titles: Collection[str] = ()) -> prover.ProverArtifact:
    """Called off the event loop: it reads stored content (diffs, logs, and JSON outputs)."""
    content = None
    if row.stored and (row.type in PROVED_CONTENT or row.title in json_titles):
        content, _total, _more = core.store.read_text(row.uri, 0, core.settings.max_artifact_bytes)
    return prover.ProverArtifact(id=row.id, type=row.type, title=row.title, content=content)


async def _recorded_outcome(core: Core, conn: AsyncConnection, fence: Fence) -> results.Completion | None:
    """A retried completion: the caller's run already has its evidence, so report that, change nothing."""
    mine = await leases.claimant_run(core, conn, fence)
    if mine is None:
        return None
    pack = await queries.evidence_pack_for_run(conn, mine.id)
    if pack is None:
        return None
    task_id = fence.task_id
    task = await task_row(conn, task_id)
    decision = await queries.review_decision_for_pack(conn, pack.id)
    return results.Completion(
        task_id=task_id,
        task_status=task.status,
        run_id=mine.id,
        run_status=mine.status,
        evidence_pack=views.evidence_summary(pack),
        review=policy.outcome_of(pack, decision),
        duplicate=True,
    )


def _parse_outputs(outputs: str | dict[str, Any] | None) -> Any:
    if outputs is None:
        return None
    if isinstance(outputs, dict):
        storable(outputs, "outputs")
        text = json.dumps(outputs)
    else:
        text = outputs
    if len(text) > Limits.OUTPUTS:
        raise invalid(
            f"outputs is {len(text)} characters; the limit is {Limits.OUTPUTS}.", "Report large data as an artifact."
        )
    parsed = outputs if isinstance(outputs, dict) else parse_json(outputs, "outputs")
    if not isinstance(parsed, dict):
        raise invalid("outputs is not a JSON object.", 'Send an object, e.g. {"pr_url": "https://..."}.')
    return parsed
