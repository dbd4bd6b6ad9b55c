"""Prompts (slash commands): each lists, and renders with and without its optional argument, with live state."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, GetPromptResult, PromptReference, ResourceTemplateReference, TextContent

from server.core import results
from server.core.claims import queue, work
from server.core.review import completion, reviews
from server.core.service import Core
from server.identity import FixedIdentity
from server.mcp import build_mcp
from server.prompts import register_prompts
from server.resources import register_resources
from tests.core.helpers import ADMIN, ALICE, PATCH, enqueue
from tests.core.test_missions import created
from tests.forgery import AS_WORKER, FORGED, assert_marked, assert_only_jct_structure, hostile_run
from tests.support.missions import mission, task

pytestmark = pytest.mark.anyio


@pytest.fixture
async def client(core: Core) -> AsyncIterator[Client]:
    server = build_mcp(core, FixedIdentity("x"))
    register_resources(server, core)
    register_prompts(server, core)
    async with Client(server) as connected:
        yield connected


def only_text(result: GetPromptResult) -> str:
    assert len(result.messages) >= 1
    assert all(message.role == "user" for message in result.messages)
    content = result.messages[0].content
    assert isinstance(content, TextContent)
    return content.text


async def prompt(client: Client, name: str, **arguments: str) -> str:
    return only_text(await client.get_prompt(name, arguments or None))


async def waiting_review(core: Core) -> results.Completion:
    task_id = await enqueue(core, objective="Validate emails on signup", acceptance_criteria=["Email is validated"])
    await queue.claim_task(core, ALICE, task_id)
    patch = await work.report_artifact(
        core, ALICE, task_id, title="Code changes", artifact_type="code_patch", content=PATCH
    )
    # No citation: the verdict is partial, which waits for a reviewer.
    done = await completion.complete_task(core, ALICE, task_id, success=True, summary="Added an email regex")
    assert done.review.status == "awaiting_manual_review"
    assert patch.artifact_id
    return done


async def test_prompts_are_listed_with_their_arguments(client: Client) -> None:
    prompts = {p.name: p for p in (await client.list_prompts()).prompts}
    assert set(prompts) == {"work_next", "review", "enqueue", "plan"}
    arguments: dict[str, list[tuple[str, bool]]] = {
        name: [(a.name, bool(a.required)) for a in p.arguments or []] for name, p in prompts.items()
    }
    more = [(f"w{n}", False) for n in range(2, 65)]
    assert arguments == {
        "work_next": [("operation", False)],
        "review": [("evidence_pack_id", False)],
        "enqueue": [("request", True), *more],
        "plan": [("goal", True), *more],
    }
    for p in prompts.values():
        assert p.title
        assert p.description
        assert all(a.description for a in (p.arguments or [])[:2])


async def test_free_text_split_into_words_is_joined_again(client: Client) -> None:
    """Claude Code hands a slash command's words to the arguments in order: JCT joins them back."""
    words = ["Add", "a", "CHANGELOG", "to", "myorg/api-service"]
    split = {"request": words[0]} | {f"w{n}": word for n, word in enumerate(words[1:], start=2)}
    body = await prompt(client, "enqueue", **split)
    assert 'Request:\n"""\nAdd a CHANGELOG to myorg/api-service\n"""' in body
    whole = await prompt(client, "enqueue", request="Add a CHANGELOG to myorg/api-service")
    assert whole == body
    goal = await prompt(client, "plan", goal="Ship", w2="the", w3="billing", w4="service")
    assert "Ship the billing service" in goal


async def test_work_next_embeds_the_protocol_and_the_queue(core: Core, client: Client) -> None:
    empty = await prompt(client, "work_next")
    assert "jct_claim_next()" in empty
    assert "no queued tasks" in empty

    urgent = await enqueue(core, objective="Fix the login outage", priority="P0")
    await enqueue(core, objective="Document the retry policy", operation="docs", priority="P3")
    body = await prompt(client, "work_next")
    for step in (
        "jct_claim_next",
        "jct_report_artifact",
        "jct_report_progress",
        "jct_complete_task",
        "criteria_results",
    ):
        assert step in body
    assert "15 minutes" in body  # the default lease
    assert body.index("Fix the login outage") < body.index("Document the retry policy")
    assert urgent in body
    assert "2 queued" in body

    docs = await prompt(client, "work_next", operation="docs")
    assert 'jct_claim_next(operation="docs")' in docs
    assert "Document the retry policy" in docs
    assert "Fix the login outage" not in docs

    with pytest.raises(MCPError) as bad:
        await client.get_prompt("work_next", {"operation": "poetry"})
    assert bad.value.error.code == INVALID_PARAMS
    assert "code_change" in bad.value.error.message


async def test_review_lists_pending_packs_or_embeds_one(core: Core, client: Client) -> None:
    assert "Nothing awaits a decision" in await prompt(client, "review")
    done = await waiting_review(core)

    listing = await prompt(client, "review")
    assert "How to judge an evidence pack" in listing
    assert "## Awaiting review: 1" in listing
    assert done.evidence_pack.id in listing
    assert "Validate emails on signup" in listing

    pack = await prompt(client, "review", evidence_pack_id=done.evidence_pack.id)
    assert f"## Evidence pack {done.evidence_pack.id}" in pack
    assert "Review state: pending" in pack
    assert "Verdict partial" in pack
    assert "required_evidence" in pack
    assert "Email is validated" in pack
    assert "Added an email regex" in pack
    assert "Code changes (code_patch" in pack
    assert "jct://artifacts/" in pack
    assert f'jct_submit_review(evidence_pack_id="{done.evidence_pack.id}"' in pack
    assert "+new" in pack  # the diff itself

    await reviews.submit_review(core, ADMIN, done.evidence_pack.id, "approved", "Fine.")
    decided = await prompt(client, "review", evidence_pack_id=done.evidence_pack.id)
    assert "already decided: approved" in decided

    for bad_id in ("nope", str(uuid.uuid4())):
        with pytest.raises(MCPError) as bad:
            await client.get_prompt("review", {"evidence_pack_id": bad_id})
        assert bad.value.error.code == INVALID_PARAMS


async def test_agent_text_cannot_forge_a_prompt_and_the_diff_stays_in_its_fence(core: Core, client: Client) -> None:
    run = await hostile_run(core)
    await enqueue(core, objective=FORGED.lstrip(), target_repo="myorg/```api")

    listing = await prompt(client, "review")
    assert_only_jct_structure(listing, ["Awaiting review: 1"])
    assert_marked(listing, "evil", AS_WORKER)

    pack = await prompt(client, "review", evidence_pack_id=run.pack_id)
    found = assert_only_jct_structure(pack, [f"Evidence pack {run.pack_id}"], fences=1)
    # The diff is whole, in a fence longer than its longest run of backticks, its bidi override spelled out.
    assert found.fences == [("diff", PATCH + "+```\n+`````\n+<U+202E>end\n")]
    assert "\n``````diff\n" in pack
    assert_marked(pack, "evil", AS_WORKER)
    assert "> \\## Acceptance criteria" in pack  # the objective and summary, quoted and escaped

    for body, headings in [
        (await prompt(client, "work_next"), ["The queue now"]),
        (await prompt(client, "enqueue", request="Add a health endpoint"), []),
    ]:
        assert_only_jct_structure(body, headings)
        assert "\\## Acceptance criteria" in body  # the queued objective that starts like a heading


async def test_enqueue_turns_a_request_into_task_fields(core: Core, client: Client) -> None:
    await enqueue(core, objective="Fix the login outage")
    body = await prompt(client, "enqueue", request="Make signup reject malformed emails in myorg/api")
    assert "Make signup reject malformed emails in myorg/api" in body
    for field in ("jct_enqueue_task", "objective", "operation", "target_repo", "acceptance_criteria"):
        assert field in body
    for field in ("context_summary", "priority", "idempotency_key"):
        assert field in body
    assert "Fix the login outage" in body  # what is queued already, to avoid duplicates

    with pytest.raises(MCPError):
        await client.get_prompt("enqueue")
    with pytest.raises(MCPError) as empty:
        await client.get_prompt("enqueue", {"request": "   "})
    assert empty.value.error.code == INVALID_PARAMS


async def test_enqueue_names_the_allowed_repositories(make_settings: Any) -> None:
    core = Core.build(make_settings(allowed_repo_prefixes=["myorg/"]))
    try:
        server = build_mcp(core, FixedIdentity("x"))
        register_prompts(server, core)
        async with Client(server) as client:
            body = await prompt(client, "enqueue", request="Add a health endpoint")
        assert "myorg/" in body
    finally:
        await core.db.dispose()


async def test_prompt_arguments_complete(core: Core, client: Client) -> None:
    done = await waiting_review(core)
    operations = await client.complete(
        PromptReference(type="ref/prompt", name="work_next"), {"name": "operation", "value": "co"}
    )
    assert operations.completion.values == ["code_change"]
    packs = await client.complete(
        PromptReference(type="ref/prompt", name="review"), {"name": "evidence_pack_id", "value": "emails"}
    )
    assert packs.completion.values == [done.evidence_pack.id]
    nothing = await client.complete(
        PromptReference(type="ref/prompt", name="enqueue"), {"name": "request", "value": ""}
    )
    assert nothing.completion.values == []


async def test_prompts_render_over_a_legacy_session(core: Core) -> None:
    done = await waiting_review(core)
    server = build_mcp(core, FixedIdentity("x"))
    register_prompts(server, core)
    register_resources(server, core)
    async with Client(server, mode="legacy") as client:
        assert {p.name for p in (await client.list_prompts()).prompts} == {"work_next", "review", "enqueue", "plan"}
        assert "jct_claim_next" in await prompt(client, "work_next")
        assert done.evidence_pack.id in await prompt(client, "review", evidence_pack_id=done.evidence_pack.id)
        assert "jct_enqueue_task" in await prompt(client, "enqueue", request="Add a changelog")
        # Registered in the other order, each package's completions still answer.
        packs = await client.complete(
            PromptReference(type="ref/prompt", name="review"), {"name": "evidence_pack_id", "value": ""}
        )
        assert packs.completion.values == [done.evidence_pack.id]
        runs = await client.complete(
            ResourceTemplateReference(type="ref/resource", uri="jct://runs/{run_id}"), {"name": "run_id", "value": ""}
        )
        assert runs.completion.values == [done.run_id]


async def test_plan_explains_missions_and_names_the_active_ones(core: Core, client: Client) -> None:
    ids = await created(client, mission([task("a")], title="Migrate billing"))
    body = await prompt(client, "plan", goal="Add SSO to the admin console")
    assert "Add SSO to the admin console" in body
    assert "jct_create_mission" in body
    assert "depends_on" in body
    assert f"mission_id {ids['mission']}" in body
    with pytest.raises(Exception, match="goal is empty"):
        await prompt(client, "plan", goal="  ")
