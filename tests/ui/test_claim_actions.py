"""The dashboard's hand on a claim, over HTTP on both databases: a running task's page releases its claim or
expires it now; the stuck page offers the buttons its action column names (release, expire now, cancel, requeue
the failed dependency). Every form needs its CSRF token, and only an admin's role may (as for cancelling)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx2
import pytest
from sqlalchemy import select, update

from server.config import Settings
from server.core import tokens
from server.core.briefings import intake
from server.core.claims import queue, work
from server.core.missions import plan
from server.core.models import Actor
from server.core.review import completion
from server.core.service import Core
from server.db import queries, tables
from server.errors import ErrorCode, JctError
from tests.core.helpers import bare
from tests.support import missions
from tests.support.serving import running
from tests.ui.test_pages import asgi, csrf_of

pytestmark = pytest.mark.anyio

AGENT = Actor(actor_id="agent-1", name="agent-1", session="agent-1")
ADMIN = Actor(actor_id="root", actor_kind="human", admin=True)
Dashboard = tuple[httpx2.AsyncClient, Core]


@pytest.fixture
async def dashboard(make_settings: Callable[..., Settings]) -> AsyncIterator[Dashboard]:
    async with running(make_settings()) as (app, core), asgi(app) as http:
        yield http, core


async def claimed(core: Core, objective: str = "Held by a lost agent") -> tuple[str, str]:
    """A task claimed by AGENT: (task id, run id)."""
    task = await intake.enqueue_task(core, ADMIN, objective=objective, operation="docs", target_repo="a/b")
    claim = await queue.claim_task(core, AGENT, task.task_id)
    assert claim.run_id is not None
    return task.task_id, bare(claim.run_id)


async def statuses(core: Core, task_id: str, run_id: str) -> tuple[str, str, int]:
    async with core.db.read() as conn:
        task = await queries.get_task(conn, task_id)
        run = await queries.get_run(conn, run_id)
    assert task is not None
    assert run is not None
    return task.status, run.status, task.attempts


async def audit_of(core: Core, entity_id: str) -> list[tuple[str, str, Any]]:
    log = tables.audit_log
    query = select(log.c.action, log.c.actor_id, log.c.after).where(log.c.entity_id == entity_id).order_by(log.c.id)
    async with core.db.read() as conn:
        return [(row.action, row.actor_id, row.after) for row in await conn.execute(query)]


async def silent_for(core: Core, run_id: str, minutes: int) -> None:
    """The run started `minutes` ago and said nothing since: stuck with no progress."""
    runs = tables.runs.c
    async with core.db.write() as conn:
        started, budget_end = (
            await conn.execute(select(runs.started_at, runs.budget_ends_at).where(runs.id == run_id))
        ).one()
        moved = datetime.now(UTC) - timedelta(minutes=minutes)
        await conn.execute(
            update(tables.runs)
            .where(runs.id == run_id)
            .values(started_at=moved, budget_ends_at=budget_end - (started - moved))
        )


def form_of(html: str, action: str) -> str:
    """The form posting to `action`, as the page renders it."""
    found = re.search(rf'<form method="post" action="{re.escape(action)}".*?</form>', html, re.S)
    assert found is not None, html
    return found.group(0)


async def test_release_gives_a_running_task_back_to_the_queue_as_the_person_who_did_it(dashboard: Dashboard) -> None:
    http, core = dashboard
    task_id, run_id = await claimed(core)
    page = (await http.get(f"/ui/tasks/{task_id}")).text
    form = form_of(page, f"/ui/tasks/{task_id}/release")
    assert "Release claim</button>" in form
    assert f'formaction="/ui/tasks/{task_id}/expire">Expire now</button>' in form

    released = await http.post(
        f"/ui/tasks/{task_id}/release", data={"reason": "its agent is gone", "csrf": csrf_of(page)}
    )

    assert released.status_code == 303
    assert "Released run" in (await http.get(released.headers["location"])).text
    assert await statuses(core, task_id, run_id) == ("queued", "released", 0)
    assert ("task.released", "local", {"status": "queued", "reason": "released by local: its agent is gone"}) in (
        await audit_of(core, task_id)
    )
    with pytest.raises(JctError) as late:
        await work.report_progress(core, AGENT, task_id, message="still here?")
    assert late.value.code is ErrorCode.TASK_NOT_CLAIMED
    twice = await http.post(f"/ui/tasks/{task_id}/release", data={"reason": "twice", "csrf": csrf_of(page)})
    assert twice.status_code == 400
    again = await queue.claim_next(core, Actor(actor_id="agent-2", session="agent-2"))
    assert again.task_id == task_id


async def test_expire_now_ends_the_claim_as_a_lapsed_lease_would_and_counts_the_attempt(
    make_settings: Callable[..., Settings],
) -> None:
    async with running(make_settings(max_attempts=2)) as (app, core), asgi(app) as http:
        task_id, run_id = await claimed(core)
        token = csrf_of((await http.get(f"/ui/tasks/{task_id}")).text)

        expired = await http.post(f"/ui/tasks/{task_id}/expire", data={"reason": "killed session", "csrf": token})

        assert expired.status_code == 303
        assert "(1 expired lease(s)): the task is queued." in (await http.get(expired.headers["location"])).text
        assert await statuses(core, task_id, run_id) == ("queued", "expired", 1)
        assert ("run.lease_expired", "local", {"status": "expired"}) in await audit_of(core, run_id)
        with pytest.raises(JctError) as late:
            await work.report_progress(core, AGENT, task_id, message="back")
        assert late.value.code is ErrorCode.LEASE_EXPIRED

        # The last attempt: expired again, the task fails as the sweeper would fail it.
        second = await queue.claim_task(core, AGENT, task_id)
        assert second.run_id is not None
        again = await http.post(f"/ui/tasks/{task_id}/expire", data={"reason": "killed again", "csrf": token})
        assert again.status_code == 303
        assert await statuses(core, task_id, bare(second.run_id)) == ("failed", "expired", 2)


async def test_a_queued_task_has_no_claim_to_release_or_expire(dashboard: Dashboard) -> None:
    http, core = dashboard
    task = await intake.enqueue_task(core, ADMIN, objective="Nobody holds me", operation="docs", target_repo="a/b")
    page = (await http.get(f"/ui/tasks/{task.task_id}")).text
    assert f"/ui/tasks/{task.task_id}/release" not in page
    for verb in ("release", "expire"):
        refused = await http.post(f"/ui/tasks/{task.task_id}/{verb}", data={"reason": "x", "csrf": csrf_of(page)})
        assert refused.status_code == 400
        assert f"only a running task has a claim to {verb}" in refused.text


async def test_claim_forms_need_their_csrf_token(dashboard: Dashboard) -> None:
    http, core = dashboard
    task_id, run_id = await claimed(core)
    for verb in ("release", "expire"):
        for data in ({"reason": "forged"}, {"reason": "forged", "csrf": "0" * 64}):
            forged = await http.post(f"/ui/tasks/{task_id}/{verb}", data=data)
            assert forged.status_code == 403
            assert "Form refused" in forged.text
    assert await statuses(core, task_id, run_id) == ("running", "running", 0)


async def test_only_an_admin_may_release_or_expire_a_claim(make_settings: Callable[..., Settings]) -> None:
    async with running(make_settings(auth="token")) as (app, core), asgi(app) as http:
        task_id, run_id = await claimed(core)
        await silent_for(core, run_id, minutes=20)
        for name, role in (("walt", "worker"), ("rita", "reviewer")):
            secret, _ = await tokens.create_token(core, name, [role])
            login = (await http.get("/ui/login")).text
            await http.post("/ui/login", data={"token": secret, "csrf": csrf_of(login)})
            page = (await http.get(f"/ui/tasks/{task_id}")).text
            assert f"/ui/tasks/{task_id}/release" not in page
            stuck = (await http.get("/ui/stuck")).text
            assert "Held by a lost agent" in stuck
            assert "Expire now" not in stuck
            for verb in ("release", "expire"):
                denied = await http.post(f"/ui/tasks/{task_id}/{verb}", data={"reason": "x", "csrf": csrf_of(page)})
                assert denied.status_code == 403
                assert f"do not allow {verb}" in denied.text
            await http.post("/ui/logout", data={"csrf": csrf_of(page)})
        assert await statuses(core, task_id, run_id) == ("running", "running", 0)

        admin, _ = await tokens.create_token(core, "ada", ["admin"])
        login = (await http.get("/ui/login")).text
        await http.post("/ui/login", data={"token": admin, "csrf": csrf_of(login)})
        page = (await http.get(f"/ui/tasks/{task_id}")).text
        done = await http.post(f"/ui/tasks/{task_id}/release", data={"reason": "mine", "csrf": csrf_of(page)})
        assert done.status_code == 303
        assert await statuses(core, task_id, run_id) == ("queued", "released", 0)
        assert ("task.released", "ada") in [(action, actor) for action, actor, _ in await audit_of(core, task_id)]


async def test_the_stuck_page_has_a_button_for_each_action_it_names(dashboard: Dashboard) -> None:
    http, core = dashboard
    silent, silent_run = await claimed(core, "Silent for twenty minutes")
    await silent_for(core, silent_run, minutes=20)
    cancelled, cancelled_run = await claimed(core, "Silent and unwanted")
    await silent_for(core, cancelled_run, minutes=20)
    steps = [
        missions.task("first", objective="First step", operation="docs", target_repo="a/b"),
        missions.task("second", "first", objective="Second step", operation="docs", target_repo="a/b"),
    ]
    mission = await plan.create_mission(
        core, ADMIN, **missions.mission(steps, title="Two steps", goal="First, then second")
    )
    first = next(t.task_id for t in mission.tasks if t.key == "first")
    await queue.claim_task(core, AGENT, first)
    await completion.complete_task(core, AGENT, first, success=False, summary="no", error_message="broken")

    page = (await http.get("/ui/stuck")).text
    row = form_of(page, f"/ui/tasks/{silent}/release")
    assert f'formaction="/ui/tasks/{silent}/expire">Expire now</button>' in row
    assert f'formaction="/ui/tasks/{silent}/cancel" class="danger">Cancel</button>' in row
    assert 'name="back" value="stuck"' in row
    requeue = form_of(page, f"/ui/tasks/{first}/requeue")
    assert f"Requeue {first[:8]}</button>" in requeue

    token = csrf_of(page)
    expired = await http.post(
        f"/ui/tasks/{silent}/expire", data={"reason": "no sign of life", "back": "stuck", "csrf": token}
    )
    assert expired.status_code == 303
    assert expired.headers["location"].startswith("/ui/stuck?")
    assert "the task is queued" in (await http.get(expired.headers["location"])).text
    assert await statuses(core, silent, silent_run) == ("queued", "expired", 1)
    gone = await http.post(f"/ui/tasks/{cancelled}/cancel", data={"reason": "unwanted", "back": "stuck", "csrf": token})
    assert gone.status_code == 303
    assert await statuses(core, cancelled, cancelled_run) == ("cancelled", "cancelled", 0)
    requeued = await http.post(
        f"/ui/tasks/{first}/requeue", data={"reason": "try again", "back": "stuck", "csrf": token}
    )
    assert requeued.status_code == 303
    assert "Requeued: queued." in (await http.get(requeued.headers["location"])).text
    after = (await http.get("/ui/stuck")).text
    assert "Nothing is stuck." in after
