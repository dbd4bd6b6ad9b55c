"""What the fleet costs on the dashboard, on both databases: the agents page sums each agent's runs, the mission
page shows its cost and budget, a spent budget as a blocker with how to lift it (also on the stuck page), and
once it has ended, its outcome. The browser test renders them in headless Chromium and keeps screenshots."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from typing import Any

import pytest
from playwright.async_api import async_playwright

from server.config import Settings
from server.core.claims import queue, work
from server.core.missions import budget, plan
from server.core.review import completion, reviews
from server.core.service import Core
from tests.core.helpers import built_core
from tests.support.serving import running, serving
from tests.ui.test_pages import ADMIN, AGENT, DIFF, SCRIPT, asgi

pytestmark = pytest.mark.anyio

CHROMIUM = "/usr/bin/chromium"


def phases(*keys: str) -> list[dict[str, Any]]:
    """The first key in phase 0, the others in phase 1."""
    tasks = [{"key": k, "objective": f"Do {k}", "operation": "docs", "target_repo": "a/b"} for k in keys]
    return [{"name": "Build", "tasks": tasks[:1]}] + ([{"name": "Then", "tasks": tasks[1:]}] if tasks[1:] else [])


async def work_on(core: Core, task_id: str, cost: float, summary: str, *, approve: bool) -> None:
    claim = await queue.claim_task(core, AGENT, task_id)
    telemetry = {"tokens_input": 12_000, "tokens_output": 3_000, "cost_usd": cost, "duration_seconds": 90}
    await work.report_progress(core, AGENT, task_id, message="working", telemetry=telemetry, run_id=claim.run_id)
    await work.report_artifact(
        core, AGENT, task_id, title="Patch", artifact_type="code_patch", content=DIFF, run_id=claim.run_id
    )
    done = await completion.complete_task(core, AGENT, task_id, run_id=claim.run_id, success=True, summary=summary)
    if approve:
        assert done.evidence_pack is not None
        await reviews.submit_review(core, ADMIN, done.evidence_pack.id, "approved", "fine")


async def costly_scene(core: Core) -> dict[str, str]:
    """A mission whose budget is spent with a task left, and one that ended, both with costs."""
    held = await plan.create_mission(
        core, ADMIN, title="Over budget", goal="g", phases=phases("a", "b"), max_cost_usd=1.0
    )
    ended = await plan.create_mission(core, ADMIN, title="Ended " + SCRIPT, goal="g", phases=phases("c"))
    keys = {t.key: t.task_id for t in held.tasks + ended.tasks}
    await work_on(core, keys["a"], 1.25, "Built a", approve=True)
    await work_on(core, keys["c"], 0.5, "Built c " + SCRIPT, approve=True)
    await budget.set_summary(core, ADMIN, ended.mission_id, "All done: " + SCRIPT)
    return {"held": held.mission_id, "ended": ended.mission_id, "b": keys["b"], "c": keys["c"]}


async def test_the_agents_mission_and_stuck_pages_show_costs_budgets_and_outcomes(
    make_settings: Callable[..., Settings],
) -> None:
    async with running(make_settings(review_auto_approve=False)) as (app, core), asgi(app) as http:
        ids = await costly_scene(core)
        agents = (await http.get("/ui/agents")).text
        assert re.search(r"agent-1.*\$1\.75 · 30,000 tokens", agents, re.S), agents

        held = (await http.get(f"/ui/missions/{ids['held']}")).text
        assert "Spent $1.25 · 15,000 tokens of a budget of $1.00" in held
        assert 's-budget_spent">budget_spent' in held
        assert "jct mission-budget " + ids["held"] in held
        assert 's-stalled">stalled' in held  # b is held back and nothing runs: it waits for a person
        ended = (await http.get(f"/ui/missions/{ids['ended']}")).text
        assert 'class="outcome"' in ended
        assert 's-completed">completed' in ended
        assert "Built c" in ended
        assert SCRIPT not in ended  # agent text escaped
        stuck = (await http.get("/ui/stuck")).text
        assert f"/ui/missions/{ids['held']}" in stuck
        assert "mission_budget_spent" in stuck
        listing = (await http.get("/ui/missions")).text
        assert "budget spent" in listing
        overview = (await http.get("/ui/")).text
        assert 's-budget_spent">budget_spent' in overview


async def test_the_cost_pages_render_in_a_browser(make_settings: Callable[..., Settings], dialect: str) -> None:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium")
    from tests.ui.test_browser import SHOTS, live

    SHOTS.mkdir(exist_ok=True)
    settings = make_settings(review_auto_approve=False)
    async with serving(settings) as (base, _mcp):
        async with built_core(settings) as core:
            ids = await costly_scene(core)
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                page = await browser.new_page()
                dialogs: list[str] = []
                page.on("dialog", lambda dialog: dialogs.append(dialog.message))
                for name, path in {
                    "agents-cost": "/ui/agents",
                    "mission-budget-spent": f"/ui/missions/{ids['held']}",
                    "mission-outcome": f"/ui/missions/{ids['ended']}",
                    "stuck-budget": "/ui/stuck",
                }.items():
                    response = await page.goto(base + path)
                    assert response is not None
                    assert response.status == 200, name
                    await live(page)
                    await page.screenshot(path=SHOTS / f"{name}-{dialect}.png", full_page=True)
                await page.goto(f"{base}/ui/missions/{ids['ended']}")
                assert await page.locator("section.outcome h2").inner_text() == "Outcome completed"
                assert await page.locator("main script").count() == 0
                assert dialogs == []
            finally:
                await browser.close()
