"""The dashboard in a real browser: headless Chromium from Debian's `chromium` package, driven by Playwright for
Python pointed at that binary (never a downloaded browser). Every page opens and no agent text runs as script;
a change made through MCP on a second `jct serve` process shows on an open page without a reload, also after
the page's server restarts; each role sees and may do what its tools allow; a forged POST is refused.
Screenshots land in tests/ui/screenshots/ (not committed)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import Client
from playwright.async_api import Browser, Page, async_playwright

from server.config import Settings
from server.core import tokens
from server.core.briefings import intake
from server.core.claims import queue
from server.core.review import completion
from tests.core.helpers import built_core
from tests.support.servers import serving as processes
from tests.support.serving import serving
from tests.transports.conftest import call, free_port, open_serve, server_env, stop_process, wait_ready
from tests.ui.test_pages import ADMIN, AGENT, SCRIPT, scene

pytestmark = [pytest.mark.anyio, pytest.mark.xdist_group("browser")]

CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(__file__).parent / "screenshots"
WAIT_MS = 60_000  # how long a page may take to show a change on a busy machine (not a performance bound)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (the .ci/run script does)")
    SHOTS.mkdir(exist_ok=True)
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            await launched.close()


async def opened(browser: Browser, **context: object) -> tuple[Page, list[str]]:
    """A fresh page that records every dialog a script might open (and dismisses it)."""
    page = await (await browser.new_context(**context)).new_page()  # type: ignore[arg-type]
    page.set_default_timeout(WAIT_MS)
    dialogs: list[str] = []

    async def dismiss(dialog: object) -> None:
        dialogs.append(str(getattr(dialog, "message", "")))
        await dialog.dismiss()  # type: ignore[attr-defined]

    page.on("dialog", dismiss)
    return page, dialogs


async def live(page: Page) -> None:
    await page.wait_for_selector("body[data-live=on]", state="attached")


async def test_every_page_opens_and_agent_text_never_runs(
    browser: Browser, make_settings: Callable[..., Settings], dialect: str
) -> None:
    settings = make_settings(review_auto_approve=False)
    async with serving(settings) as (base, _mcp):
        async with built_core(settings) as core:
            ids = await scene(core)
        page, dialogs = await opened(browser)
        pages = {
            "overview": "/ui/",
            "queue": "/ui/queue?status=all",
            "task": f"/ui/tasks/{ids['hostile']}",
            "task-reviewed": f"/ui/tasks/{ids['done']}",
            "artifact": f"/ui/artifacts/{ids['artifact']}",
            "reviews": "/ui/reviews",
            "missions": "/ui/missions",
            "mission": f"/ui/missions/{ids['mission']}",
            "agents": "/ui/agents",
            "stuck": "/ui/stuck",
            "merges": "/ui/merges",
            "audit": "/ui/audit",
        }
        for name, path in pages.items():
            response = await page.goto(base + path)
            assert response is not None
            assert response.status == 200, name
            await live(page)
            await page.screenshot(path=SHOTS / f"{name}-{dialect}.png", full_page=True)
        await page.goto(base + pages["task"])
        assert await page.locator("h1").inner_text() == SCRIPT  # shown as text, never parsed
        assert await page.locator("main img").count() == 0
        assert await page.locator("main script").count() == 0
        missing = await page.goto(f"{base}/ui/tasks/00000000-0000-4000-8000-000000000000")
        assert missing is not None
        assert missing.status == 404
        assert await page.locator("h1").inner_text() == "Not found"
        await page.screenshot(path=SHOTS / f"not-found-{dialect}.png")
        phone, _ = await opened(browser, viewport={"width": 390, "height": 844}, color_scheme="dark")
        await phone.goto(base + "/ui/")
        assert await phone.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        await phone.screenshot(path=SHOTS / f"overview-phone-dark-{dialect}.png", full_page=True)
        assert dialogs == []


@asynccontextmanager
async def serve_on(env: dict[str, str], cwd: Path, port: int) -> AsyncIterator[str]:
    """`jct serve` on this port (so a restarted server is found where the page left it)."""
    log = (cwd / f"jct-{port}.log").open("ab")
    process = await open_serve(port, env, cwd, log)
    try:
        base = f"http://127.0.0.1:{port}"
        assert await wait_ready(process, base), (cwd / f"jct-{port}.log").read_text()
        yield base
    finally:
        await stop_process(process)
        log.close()


async def test_a_change_through_mcp_on_another_process_shows_live_and_after_a_restart(
    browser: Browser, database_url: str, tmp_path: Path, dialect: str
) -> None:
    env = server_env(database_url, tmp_path)
    port = free_port()
    async with processes(env, tmp_path, count=1) as (other,), Client(f"{other.base_url}/mcp", mode="legacy") as agent:
        page, dialogs = await opened(browser)
        async with serve_on(env, tmp_path, port) as base:
            await page.goto(base + "/ui/queue")
            await live(page)
            await page.evaluate("window.jctMarker = 'same page'")
            await call(
                agent, "jct_enqueue_task", objective="Live from process two", operation="docs", target_repo="a/b"
            )
            await page.get_by_text("Live from process two").wait_for()
            assert await page.evaluate("window.jctMarker") == "same page"  # updated in place, not reloaded
            await page.screenshot(path=SHOTS / f"live-{dialect}.png")
        await page.wait_for_selector("body[data-live=off]", state="attached")
        # Made while the page's server is down: the page catches up once it reconnects.
        await call(agent, "jct_enqueue_task", objective="Made during the restart", operation="docs", target_repo="a/b")
        async with serve_on(env, tmp_path, port):
            await page.get_by_text("Made during the restart").wait_for()
            await live(page)
            await call(agent, "jct_enqueue_task", objective="After the restart", operation="ops", target_repo="a/b")
            await page.get_by_text("After the restart").wait_for()
            assert await page.evaluate("window.jctMarker") == "same page"
        assert dialogs == []


async def login(page: Page, base: str, secret: str) -> None:
    await page.goto(base + "/ui/login")
    await page.fill("input[name=token]", secret)
    await page.click("form button")
    await page.wait_for_load_state()
    assert secret not in page.url


async def test_each_role_sees_and_does_what_its_tools_allow(
    browser: Browser, make_settings: Callable[..., Settings], dialect: str
) -> None:
    settings = make_settings(auth="token", review_auto_approve=False)
    async with serving(settings) as (base, _mcp), built_core(settings) as core:
        ids = await scene(core)
        failed = await intake.enqueue_task(core, ADMIN, objective="Failed once", operation="docs", target_repo="a/b")
        claim = await queue.claim_task(core, AGENT, failed.task_id)
        await completion.complete_task(core, AGENT, failed.task_id, run_id=claim.run_id, success=False, summary="no")
        secrets = {
            role: (await tokens.create_token(core, f"{role}-1", [role]))[0] for role in ("worker", "reviewer", "admin")
        }

        page, dialogs = await opened(browser)
        await page.goto(base + "/ui/reviews")
        assert "/ui/login" in page.url
        await page.screenshot(path=SHOTS / f"login-{dialect}.png")

        await login(page, base, secrets["worker"])
        await page.goto(base + "/ui/reviews")
        await page.screenshot(path=SHOTS / f"reviews-worker-{dialect}.png", full_page=True)
        assert await page.get_by_text("Your roles cannot review.").count() == 1
        assert await page.locator("form[action^='/ui/reviews/']").count() == 0
        forged = await page.request.post(
            f"{base}/ui/reviews/{ids['pack']}", form={"decision": "approved", "reason": "no csrf"}
        )
        assert forged.status == 403
        assert "Form refused" in await forged.text()
        csrf = await page.locator("input[name=csrf]").first.get_attribute("value")
        assert csrf
        as_worker = await page.request.post(
            f"{base}/ui/reviews/{ids['pack']}", form={"decision": "approved", "reason": "mine", "csrf": csrf}
        )
        assert as_worker.status == 403  # the right form, the wrong role
        await page.click("header form button")  # log out
        await page.wait_for_url("**/ui/login")

        await login(page, base, secrets["reviewer"])
        await page.goto(base + "/ui/reviews")
        await page.fill("textarea[name=reason]", "Clear and tested.")
        await page.click("button[value=approved]")
        await page.get_by_text("Review recorded: approved.").wait_for()
        await page.goto(f"{base}/ui/tasks/{failed.task_id}")
        assert await page.locator("form[action$='/requeue']").count() == 0
        await page.click("header form button")

        await login(page, base, secrets["admin"])
        await page.goto(f"{base}/ui/tasks/{failed.task_id}")
        await page.fill("form[action$='/requeue'] input[name=reason]", "flaky")
        await page.fill("form[action$='/requeue'] textarea[name=feedback]", "Retry with <b>care</b>")
        await page.click("form[action$='/requeue'] button")
        await page.get_by_text("Requeued: queued.").wait_for()
        assert await page.get_by_text("Retry with <b>care</b>").count() == 1
        await page.screenshot(path=SHOTS / f"task-admin-{dialect}.png", full_page=True)

        assert await tokens.revoke_token(core, "admin-1")
        await page.goto(base + "/ui/")
        assert "/ui/login" in page.url  # revocation ended the session
        assert dialogs == []


async def test_eight_tabs_of_one_browser_all_load_and_all_update_live(
    browser: Browser, make_settings: Callable[..., Settings]
) -> None:
    """A browser opens six HTTP/1.1 connections to a host: with one event stream per tab, the seventh tab
    never loaded. The tabs of one browser share one stream, so eight all load, all go live and all show
    a change; closing the tab that holds the stream hands it to another."""
    settings = make_settings()
    async with serving(settings) as (base, _mcp), built_core(settings) as core:
        context = await browser.new_context()
        tabs = []
        for n in range(8):
            tab = await context.new_page()
            tab.set_default_timeout(WAIT_MS)
            response = await tab.goto(f"{base}/ui/queue?tab={n}")
            assert response is not None
            assert response.status == 200
            tabs.append(tab)
        for tab in tabs:
            await live(tab)
        await intake.enqueue_task(core, ADMIN, objective="Seen in every tab", operation="docs", target_repo="a/b")
        for tab in tabs:
            await tab.get_by_text("Seen in every tab").wait_for()

        await tabs[0].close()  # the first tab opened the stream: another takes it over
        await intake.enqueue_task(core, ADMIN, objective="Seen after a tab left", operation="docs", target_repo="a/b")
        for tab in tabs[1:]:
            await tab.get_by_text("Seen after a tab left").wait_for()
        await context.close()
