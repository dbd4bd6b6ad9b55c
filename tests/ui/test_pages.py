"""The dashboard over HTTP, on both databases, with the app's lifespan running: every page answers, agent text is
escaped, unknown ids and bad filters get a clear page, forms need their CSRF token and the right role, and a
login sets a signed cookie that revocation ends."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
import pytest

from server.config import Settings
from server.core import tokens
from server.core.briefings import intake
from server.core.claims import queue, work
from server.core.missions import plan
from server.core.models import Actor
from server.core.review import completion
from server.core.service import Core
from server.ui.access import FORM_COOKIE
from tests.support.serving import running

pytestmark = pytest.mark.anyio

SCRIPT = '<script>alert("owned")</script><img src=x onerror=alert(1)>'
AGENT = Actor(actor_id="agent-1", name="agent-1", session="agent-1")
ADMIN = Actor(actor_id="root", actor_kind="human", admin=True)
DIFF = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-old\n+new\n"
UNKNOWN = "00000000-0000-4000-8000-000000000000"


def asgi(app: Any) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1")


async def scene(core: Core) -> dict[str, str]:
    """A queued task whose objective is a script, a run awaiting review with a diff, a mission."""
    hostile = await intake.enqueue_task(
        core, ADMIN, objective=SCRIPT, operation="code_change", target_repo="a/b", acceptance_criteria=[SCRIPT]
    )
    done = await intake.enqueue_task(core, ADMIN, objective="Reviewed work", operation="docs", target_repo="a/b")
    claim = await queue.claim_task(core, AGENT, done.task_id)
    artifact = await work.report_artifact(
        core, AGENT, done.task_id, title="Patch", artifact_type="code_patch", content=DIFF, run_id=claim.run_id
    )
    completed = await completion.complete_task(
        core, AGENT, done.task_id, run_id=claim.run_id, success=True, summary="ok"
    )
    mission = await plan.create_mission(
        core,
        ADMIN,
        title="Ship " + SCRIPT,
        goal="A goal",
        phases=[{"name": "one", "tasks": [{"key": "a", "objective": "A", "operation": "docs", "target_repo": "a/b"}]}],
    )
    assert completed.evidence_pack is not None
    return {
        "hostile": hostile.task_id,
        "done": done.task_id,
        "artifact": artifact.artifact_id,
        "pack": completed.evidence_pack.id,
        "mission": mission.mission_id,
    }


@pytest.fixture
async def dashboard(
    make_settings: Callable[..., Settings],
) -> AsyncIterator[tuple[httpx2.AsyncClient, Core, dict[str, str]]]:
    async with running(make_settings(review_auto_approve=False)) as (app, core), asgi(app) as http:
        yield http, core, await scene(core)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found is not None, html
    return found.group(1)


async def test_every_page_answers_and_escapes_agent_text(
    dashboard: tuple[httpx2.AsyncClient, Core, dict[str, str]],
) -> None:
    http, _core, ids = dashboard
    pages = [
        "/ui/",
        "/ui/queue",
        "/ui/queue?status=all&operation=docs",
        f"/ui/tasks/{ids['hostile']}",
        f"/ui/tasks/{ids['done']}",
        f"/ui/artifacts/{ids['artifact']}",
        "/ui/reviews",
        "/ui/missions",
        f"/ui/missions/{ids['mission']}",
        "/ui/agents",
        "/ui/stuck",
        "/ui/merges",
        "/ui/audit",
        "/ui/audit?action=task.enqueued&entity_kind=Task",
    ]
    for path in pages:
        response = await http.get(path)
        assert response.status_code == 200, (path, response.text)
        assert "<script>alert" not in response.text, path
        assert "onerror=alert" not in response.text.replace("onerror=alert(1)&gt;", ""), path
        assert "default-src 'self'" in response.headers["content-security-policy"]
    overview = (await http.get("/ui/")).text
    assert "1 completed, 0 failed" in overview  # the throughput chart's caption
    assert overview.count('<rect class="bar-done"') == 12
    task_page = (await http.get(f"/ui/tasks/{ids['hostile']}")).text
    assert "&lt;script&gt;alert(&#34;owned&#34;)&lt;/script&gt;" in task_page
    assert '<span class="add">+new</span>' in (await http.get(f"/ui/artifacts/{ids['artifact']}")).text
    assert "Reviewed work" in (await http.get("/ui/reviews")).text
    everything = (await http.get("/ui/queue?status=all&repo=a/")).text
    assert "Reviewed work" in everything
    assert "Reviewed work" not in (await http.get("/ui/queue?status=all&repo=b/")).text
    in_mission = (await http.get(f"/ui/queue?status=all&mission={ids['mission']}")).text
    assert ">A<" in in_mission
    assert "Reviewed work" not in in_mission


async def test_unknown_ids_and_bad_filters_get_a_clear_page(
    dashboard: tuple[httpx2.AsyncClient, Core, dict[str, str]],
) -> None:
    http, _core, _ids = dashboard
    for path in (
        f"/ui/tasks/{UNKNOWN}",
        "/ui/tasks/not-an-id",
        f"/ui/missions/{UNKNOWN}",
        f"/ui/artifacts/{UNKNOWN}",
        "/ui/nowhere",
    ):
        response = await http.get(path)
        assert response.status_code == 404, path
        assert "<h1>Not found</h1>" in response.text
    for path in (
        "/ui/queue?status=sleeping",
        "/ui/audit?since=yesterday",
        "/ui/queue?cursor=forged",
        "/ui/queue?mission=nope",
        "/ui/queue?repo=" + "x" * 600,
    ):
        response = await http.get(path)
        assert response.status_code == 400, path
        assert "INVALID_ARGUMENT" in response.text


async def test_forms_need_their_csrf_token_and_a_host_jct_answers_to(
    dashboard: tuple[httpx2.AsyncClient, Core, dict[str, str]],
) -> None:
    http, _core, ids = dashboard
    action = f"/ui/reviews/{ids['pack']}"
    forged = await http.post(action, data={"decision": "rejected", "reason": "forged"})
    assert forged.status_code == 403
    assert "Form refused" in forged.text
    wrong = await http.post(action, data={"decision": "rejected", "reason": "forged", "csrf": "0" * 64})
    assert wrong.status_code == 403
    token = csrf_of((await http.get("/ui/reviews")).text)
    elsewhere = await http.post(
        action, data={"decision": "rejected", "reason": "x", "csrf": token}, headers={"Origin": "http://evil.example"}
    )
    assert elsewhere.status_code == 403
    huge = await http.post(action, data={"decision": "approved", "reason": "x" * 70_000, "csrf": token})
    assert huge.status_code == 413
    assert (await http.get("/ui/reviews")).text.count("Reviewed work") == 1  # nothing was decided

    decided = await http.post(action, data={"decision": "approved", "reason": "Looks right.", "csrf": token})
    assert decided.status_code == 303
    assert "Review recorded" in (await http.get(decided.headers["location"])).text
    assert "Reviewed work" not in (await http.get("/ui/reviews")).text

    hostile = ids["hostile"]
    moved = await http.post(f"/ui/tasks/{hostile}/priority", data={"priority": "P0", "csrf": token})
    assert moved.status_code == 303
    assert "Priority P2 -&gt; P0." in (await http.get(moved.headers["location"])).text
    cancelled = await http.post(f"/ui/tasks/{hostile}/cancel", data={"reason": "no", "csrf": token})
    assert cancelled.status_code == 303
    requeued = await http.post(
        f"/ui/tasks/{hostile}/requeue", data={"reason": "yes", "feedback": "Mind the " + SCRIPT, "csrf": token}
    )
    assert requeued.status_code == 303
    page = (await http.get(requeued.headers["location"])).text
    assert "Requeued: queued." in page
    assert "Mind the &lt;script&gt;" in page
    again = await http.post(f"/ui/tasks/{hostile}/requeue", data={"reason": "again", "csrf": token})
    assert again.status_code == 400
    assert "only failed, cancelled or rejected" in again.text


@pytest.mark.parametrize("auth", ["none", "token"])
async def test_a_form_cookie_planted_by_another_port_does_not_make_a_form_valid(
    make_settings: Callable[..., Settings], auth: str
) -> None:
    """A page on another port of 127.0.0.1 can set JCT's cookies (cookies ignore ports) and post a form from
    its own origin, which the Origin check lets through as loopback: the token it planted is not one JCT
    signed, so the form (the login form, with tokens) is refused and nothing changes."""
    settings = make_settings(auth=auth, review_auto_approve=False)
    async with running(settings) as (app, core), asgi(app) as http:
        ids = await scene(core)
        planted = "a" * 64
        http.cookies.set(FORM_COOKIE, planted, domain="127.0.0.1", path="/ui")
        origin = {"Origin": "http://127.0.0.1:9999"}
        if auth == "token":
            secret, _ = await tokens.create_token(core, "rita", ["reviewer"])
            forged = await http.post("/ui/login", data={"token": secret, "csrf": planted}, headers=origin)
            assert forged.status_code == 403
            assert "jct_ui" not in forged.headers.get("set-cookie", "")
            return
        for action, data in [
            (f"/ui/reviews/{ids['pack']}", {"decision": "rejected", "reason": "forged"}),
            (f"/ui/tasks/{ids['hostile']}/priority", {"priority": "P0"}),
            (f"/ui/tasks/{ids['hostile']}/cancel", {"reason": "forged"}),
        ]:
            forged = await http.post(action, data={**data, "csrf": planted}, headers=origin)
            assert forged.status_code == 403
            assert "Form refused" in forged.text
        assert "Reviewed work" in (await http.get("/ui/reviews")).text  # nothing was decided
        assert "Priority P2" not in (await http.get(f"/ui/tasks/{ids['hostile']}")).text


async def test_tokens_log_in_with_a_signed_cookie_roles_and_revocation(make_settings: Callable[..., Settings]) -> None:
    async with running(make_settings(auth="token", review_auto_approve=False)) as (app, core), asgi(app) as http:
        ids = await scene(core)
        reviewer, _ = await tokens.create_token(core, "rita", ["reviewer"])
        worker, _ = await tokens.create_token(core, "walt", ["worker"])

        first = await http.get("/ui/reviews")
        assert first.status_code == 303
        assert first.headers["location"].startswith("/ui/login")
        login = await http.get("/ui/login")
        assert login.status_code == 200
        bad = await http.post("/ui/login", data={"token": "jct_nope", "csrf": csrf_of(login.text)})
        assert bad.status_code == 401
        assert "not valid" in bad.text
        assert (await http.post("/ui/login", data={"token": worker})).status_code == 403  # no CSRF token

        walt = await http.post("/ui/login?next=/ui/reviews", data={"token": worker, "csrf": csrf_of(login.text)})
        assert walt.status_code == 303
        assert walt.headers["location"] == "/ui/reviews"
        cookie = walt.headers["set-cookie"]
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
        assert worker not in cookie
        page = await http.get("/ui/reviews")
        assert "Your roles cannot review." in page.text
        refused = await http.post(
            f"/ui/reviews/{ids['pack']}", data={"decision": "approved", "reason": "me", "csrf": csrf_of(page.text)}
        )
        assert refused.status_code == 403
        assert "do not allow review" in refused.text
        await http.post("/ui/logout", data={"csrf": csrf_of(page.text)})
        assert (await http.get("/ui/")).status_code == 303

        await http.post("/ui/login", data={"token": reviewer, "csrf": csrf_of(login.text)})
        page = await http.get("/ui/reviews")
        assert "rita (reviewer)" in page.text
        approved = await http.post(
            f"/ui/reviews/{ids['pack']}", data={"decision": "approved", "reason": "fine", "csrf": csrf_of(page.text)}
        )
        assert approved.status_code == 303
        denied = await http.post(f"/ui/tasks/{ids['hostile']}/cancel", data={"reason": "x", "csrf": csrf_of(page.text)})
        assert denied.status_code == 403  # cancelling is an admin's, as jct_cancel_task is

        assert await tokens.revoke_token(core, "rita")
        after = await http.get("/ui/reviews")
        assert after.status_code == 303  # the session ended with its token


@pytest.mark.parametrize("auth", ["none", "token"])
async def test_a_form_from_one_server_process_is_accepted_by_another(
    make_settings: Callable[..., Settings], auth: str
) -> None:
    """Two JCT processes behind one address: a form served by one may be posted to the other. Without a session
    (the login form; JCT_AUTH=none) the form's token is the browser's own cookie, which another site can neither
    read nor send: the same form without that cookie is refused."""
    settings = make_settings(auth=auth, review_auto_approve=False)
    async with running(settings) as (app_a, core), running(settings) as (app_b, _), asgi(app_a) as a, asgi(app_b) as b:
        ids = await scene(core)
        form = await a.get("/ui/login" if auth == "token" else "/ui/reviews")
        assert FORM_COOKIE in a.cookies
        if auth == "token":
            secret, _ = await tokens.create_token(core, "rita", ["reviewer"])
            action, data = "/ui/login", {"token": secret, "csrf": csrf_of(form.text)}
        else:
            action = f"/ui/reviews/{ids['pack']}"
            data = {"decision": "approved", "reason": "Looks right.", "csrf": csrf_of(form.text)}
        async with asgi(app_b) as stranger:
            assert (await stranger.post(action, data=data)).status_code == 403
        b.cookies = a.cookies  # the same browser, answered by the other process
        assert (await b.post(action, data=data)).status_code == 303
        a.cookies = b.cookies
        if auth == "token":
            page = await b.get("/ui/reviews")
            assert "rita (reviewer)" in page.text
            data = {"decision": "approved", "reason": "Looks right.", "csrf": csrf_of(page.text)}
            assert (await a.post(f"/ui/reviews/{ids['pack']}", data=data)).status_code == 303
        assert "approved" in (await a.get(f"/ui/tasks/{ids['done']}")).text


async def test_logging_out_ends_the_session_on_every_process(make_settings: Callable[..., Settings]) -> None:
    """A copy of the session cookie kept after logging out (another tab's request in flight, a stolen copy)
    no longer loads a page or posts a form, on the process that logged out or any other on the database."""
    settings = make_settings(auth="token", review_auto_approve=False)
    async with running(settings) as (app_a, core), running(settings) as (app_b, _), asgi(app_a) as a:
        ids = await scene(core)
        secret, _ = await tokens.create_token(core, "alice", ["admin"])
        login = await a.get("/ui/login")
        assert (await a.post("/ui/login", data={"token": secret, "csrf": csrf_of(login.text)})).status_code == 303
        kept = dict(a.cookies)
        page = await a.get(f"/ui/tasks/{ids['hostile']}")
        assert page.status_code == 200
        csrf = csrf_of(page.text)
        assert (await a.post("/ui/logout", data={"csrf": csrf})).status_code == 303

        for app in (app_a, app_b):
            async with asgi(app) as copy:
                copy.cookies.update(kept)
                assert (await copy.get("/ui/")).status_code == 303
                moved = await copy.post(f"/ui/tasks/{ids['hostile']}/priority", data={"priority": "P0", "csrf": csrf})
                assert moved.status_code == 303
                assert moved.headers["location"].startswith("/ui/login")

        again = await a.get("/ui/login")
        assert (await a.post("/ui/login", data={"token": secret, "csrf": csrf_of(again.text)})).status_code == 303
        assert (await a.get("/ui/")).status_code == 200  # logging in again opens a new session


async def test_failed_logins_are_capped_per_address_and_logged_once(
    make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture
) -> None:
    """Guessing tokens through the login form: past JCT_LOGIN_FAILURES_PER_MINUTE failures from one address,
    every login from there (a right token too) answers 429 until the bucket refills; one log line."""
    settings = make_settings(auth="token", login_failures_per_minute=3)
    async with running(settings) as (app, core), asgi(app) as http:
        secret, _ = await tokens.create_token(core, "alice", ["admin"])
        csrf = csrf_of((await http.get("/ui/login")).text)
        wrong = [await http.post("/ui/login", data={"token": f"jct_wrong{n}", "csrf": csrf}) for n in range(3)]
        assert [response.status_code for response in wrong] == [401] * 3
        for attempt in ("jct_wrong", secret):
            refused = await http.post("/ui/login", data={"token": attempt, "csrf": csrf})
            assert refused.status_code == 429
            assert "JCT_LOGIN_FAILURES_PER_MINUTE" in refused.text
            assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert sum("failed login" in record.getMessage() for record in caplog.records) == 1
