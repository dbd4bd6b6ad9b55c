"""The lease rule (DESIGN sections 3 and 10): who may act on a claimed task, and why a late call may not.

A claim grants a lease on one run (server/db/claims/). Every later call on the task (report, progress,
complete, release) acts on one run: the `run_id` it names, else the run its agent claimed through the same
connection. It passes the fence (server/db/leases.py `fence_statement`) only while that run is the task's
active run, its lease is live, and the caller is its claimant; passing renews the lease. A late call gets
LEASE_EXPIRED and changes nothing, also when the task was re-claimed under the same identity.

Who is the claimant: with tokens, the principal that claimed (a token proves it). Without tokens every caller
is `local`, and a run's id is no secret (jct_get_task, resources, the dashboard and the audit log show it), so
the claim's result hands out its run_id with a key appended (`<run id>.<32 hex digits>`; the runs table keeps
only its hash). A call naming the run with its key acts on it from any connection and any process: the
stateless protocol, a client that reconnected, another server on the same database. A call naming the bare
id acts on it only from the agent and connection that claimed it; from anyone else it gets NOT_CLAIMANT.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from server.core.models import Actor, key_hash, parse_run_id
from server.core.service import Core
from server.db import leases, queries
from server.db.leases import Fence
from server.db.records import FencedRun
from server.errors import ErrorCode, JctError, invalid, not_found, task_not_found
from server.vocab import RunStatus, TaskStatus

NAME_YOUR_RUN = "Pass the run_id that jct_claim_task or jct_claim_next returned, exactly as it returned it."


def fence_for(core: Core, actor: Actor, task_id: str, run_id: str | None) -> Fence:
    """The fence a call of `actor` on `task_id` must pass."""
    key = None
    if run_id is not None:
        run_id, key = parse_run_id(run_id)
    elif actor.session is None:
        raise invalid(
            "This call names no run_id, and it came without a session (the stateless protocol), so nothing "
            "tells your claim apart from another agent's.",
            NAME_YOUR_RUN,
        )
    # The lease a call that passes renews to: short when the call's connection renews it meanwhile (holding.py).
    return Fence(
        task_id,
        run_id,
        actor.actor_id,
        actor.claimant,
        actor.session,
        core.holdings.lease_seconds(),
        key_hash=key_hash(key) if key is not None else None,
    )


async def refusal(core: Core, conn: AsyncConnection, fence: Fence) -> JctError:
    """Why the fence refused: worked out only on the error path, so a call that passes is one statement."""
    task = await queries.get_task(conn, fence.task_id)
    if task is None:
        return task_not_found(fence.task_id, "Check the task_id you were given.")
    run = await leases.claimant_run(conn, fence, core.now())
    if run is None:
        if fence.run_id is not None:
            return not_found(ErrorCode.RUN_NOT_FOUND, "Run", fence.run_id, NAME_YOUR_RUN)
        if task.status == TaskStatus.RUNNING:
            return JctError(
                ErrorCode.NOT_CLAIMANT,
                f"Task {fence.task_id} is claimed by another agent.",
                "Work only on tasks you claimed; use jct_claim_next to get one. If you claimed it through "
                f"another connection, {NAME_YOUR_RUN[0].lower()}{NAME_YOUR_RUN[1:]}",
            )
        return JctError(
            ErrorCode.TASK_NOT_CLAIMED,
            f"Task {fence.task_id} is not claimed by you (status: {task.status}).",
            "Claim it first with jct_claim_task, or take another with jct_claim_next.",
        )
    if run.task_id != fence.task_id:
        return invalid(
            f"Run {run.id} is a run of task {run.task_id}, not of task {fence.task_id}.",
            "Pass the task_id and run_id of the same claim.",
        )
    if not fence.admits(run):
        return not_claimant(fence, run)
    if _lapsed(run):
        expired_at = run.lease_expires_at
        return JctError(
            ErrorCode.LEASE_EXPIRED,
            f"Your lease on task {fence.task_id} (run {run.id}) expired at {expired_at:%Y-%m-%dT%H:%M:%SZ}; "
            "nothing was recorded.",
            "Stop work on this task: it went back to the queue. Claim another with jct_claim_next; "
            "call jct_report_progress at least every few minutes to keep a lease alive.",
        )
    return JctError(
        ErrorCode.TASK_NOT_CLAIMED,
        f"Your run {run.id} on task {fence.task_id} has already ended (run status: {run.status}, "
        f"task status: {task.status}).",
        "Nothing more to report on this run. Use jct_get_task to see where the task stands.",
    )


def not_claimant(fence: Fence, run: FencedRun) -> JctError:
    if run.principal == fence.principal and run.claim_key is not None:
        # Without tokens: a bare id from another connection, or a key that is not this run's.
        return JctError(
            ErrorCode.NOT_CLAIMANT,
            f"Run {run.id} was claimed by another agent, or through another connection.",
            "Pass the run_id exactly as your claim returned it (with the key after its '.'); a run_id read "
            "anywhere else does not act on a claim. Work only on runs you claimed; use jct_claim_next to get one.",
        )
    return JctError(
        ErrorCode.NOT_CLAIMANT,
        f"Run {run.id} was claimed by another agent.",
        "Work only on runs you claimed; use jct_claim_next to get one.",
    )


def _lapsed(run: FencedRun) -> bool:
    """The run lost its lease: swept already, or running past its lease or after the task moved on."""
    return bool(
        run.status == RunStatus.EXPIRED or (run.status == RunStatus.RUNNING and not (run.lease_live and run.active))
    )


async def claimant_run(core: Core, conn: AsyncConnection, fence: Fence) -> FencedRun | None:
    """The run a call names (or its agent claimed through its connection), if its principal may see it."""
    run = await leases.claimant_run(conn, fence, core.now())
    if run is None or run.task_id != fence.task_id:
        return None
    return run if fence.admits(run) else None


async def open_run(core: Core, conn: AsyncConnection, fence: Fence) -> FencedRun | None:
    """The caller's run while it is still running: what a call reads ahead of its fenced change (so no
    transaction waits on git). None when the fence will refuse the call; the fenced change says why."""
    run = await claimant_run(core, conn, fence)
    return run if run is not None and run.status == RunStatus.RUNNING else None
