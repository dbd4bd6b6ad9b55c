"""jct:// resources over MCP: the @-mention flow, every page, resources/list pagination, templates,
completions, not-found errors and the size of a briefing."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mcp import Client
from mcp.server import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ResourceTemplateReference, TextResourceContents

from server.core import results
from server.core.claims import queue, work
from server.core.operators import observe
from server.core.review import completion
from server.core.review import reviews as review
from server.core.service import Core
from server.db import queries
from server.identity import FixedIdentity
from server.mcp import build_mcp
from server.prompts import register_prompts
from server.resources import register_resources
from tests.core.helpers import ADMIN, ALICE, BOB, PATCH, enqueue, satisfied_by

pytestmark = pytest.mark.anyio

CRITERIA = ["Email is validated", "Invalid emails get a 400 response", "Tests cover invalid emails"]
SUMMARY = "The signup endpoint accepts anything. Validation belongs in src/app.py; see the users module."


def serve(core: Core, **options: Any) -> MCPServer[Any]:
    server = build_mcp(core, FixedIdentity("x"))
    register_resources(server, core, **options)
    register_prompts(server, core)
    return server


@pytest.fixture
async def client(core: Core) -> AsyncIterator[Client]:
    async with Client(serve(core)) as connected:
        yield connected


async def read(client: Client, uri: str) -> TextResourceContents:
    result = await client.read_resource(uri)
    assert len(result.contents) == 1
    content = result.contents[0]
    assert isinstance(content, TextResourceContents)
    assert content.uri == uri
    return content


async def text(client: Client, uri: str) -> str:
    return (await read(client, uri)).text


async def all_listed(client: Client) -> list[Any]:
    listed, cursor = [], None
    while True:
        page = await client.list_resources(cursor=cursor)
        listed += page.resources
        cursor = page.next_cursor
        if cursor is None:
            return listed


async def run_to_review(core: Core, task_id: str, *, cite: bool = False) -> results.Completion:
    """Claim, report a patch, complete; without citations the verdict is partial and waits for review."""
    await queue.claim_task(core, ALICE, task_id)
    await work.report_progress(core, ALICE, task_id, message="Reading the signup handler", progress=20)
    patch = await work.report_artifact(
        core, ALICE, task_id, title="Code changes", artifact_type="code_patch", content=PATCH, media_type="text/x-diff"
    )
    claims = satisfied_by(patch.artifact_id) if cite else []
    return await completion.complete_task(
        core, ALICE, task_id, success=True, summary="Validated emails in signup", criteria_results=claims
    )


async def issue_of(core: Core, task_id: str) -> str:
    view = await observe.get_context(core, task_id)
    assert view.issue is not None
    return view.issue.id


# --- the @-mention flow ---------------------------------------------------------------------


async def test_a_mentioned_issue_is_listed_by_objective_and_briefs_the_agent(core: Core, client: Client) -> None:
    enqueued = await client.call_tool(
        "jct_enqueue_task",
        {
            "objective": "Validate emails on signup",
            "operation": "code_change",
            "target_repo": "myorg/api",
            "target_path": "src",
            "priority": "P1",
            "acceptance_criteria": CRITERIA,
            "context_summary": SUMMARY,
        },
    )
    assert not enqueued.is_error, enqueued.content
    assert enqueued.structured_content is not None
    task_id, issue_id = enqueued.structured_content["task_id"], enqueued.structured_content["cwom_issue_id"]

    listed = {str(r.uri): r for r in (await client.list_resources()).resources}
    issue = listed[f"jct://issues/{issue_id}"]
    assert issue.name == "Issue: Validate emails on signup"
    assert issue.title == issue.name
    assert issue.description is not None
    assert "ready" in issue.description
    assert "P1" in issue.description
    assert "myorg/api" in issue.description
    assert issue.mime_type == "text/markdown"
    assert listed[f"jct://tasks/{task_id}"].name == "Task: Validate emails on signup"

    briefing = await read(client, f"jct://issues/{issue_id}")
    assert briefing.mime_type == "text/markdown"
    body = briefing.text
    assert body.index("## Objective") < body.index("## Acceptance criteria") < body.index("## Context")
    assert "Validate emails on signup" in body
    for criterion in CRITERIA:
        assert criterion in body
    assert SUMMARY in body
    assert "## Review feedback" not in body
    assert f'jct_claim_task(task_id="{task_id}")' in body

    done = await run_to_review(core, task_id)
    assert done.review.status == "awaiting_manual_review"
    await review.submit_review(core, BOB, done.evidence_pack.id, "needs_changes", "Also reject emails without a TLD.")
    body = await text(client, f"jct://issues/{issue_id}")
    assert "## Review feedback (review round 1 of 3; oldest first" in body
    assert "Also reject emails without a TLD." in body
    assert "briefing v2" in body
    assert f"jct://runs/{done.run_id}" in body


async def test_two_review_rounds_stay_in_the_briefing_which_stays_compact(core: Core, client: Client) -> None:
    task_id = await enqueue(
        core,
        objective="Validate emails on signup\n\nThe handler in src/app.py takes any string as an email.",
        acceptance_criteria=CRITERIA,
        context_summary=SUMMARY * 6,
        target_path="src",
    )
    issue = await issue_of(core, task_id)
    async with core.db.write() as conn:
        doctrine = await queries.upsert_doctrine(
            conn,
            {"id": str(uuid.uuid4()), "namespace": "myorg", "name": "testing", "body": "Every fix comes with a test."},
        )
        await queries.link_doctrine(conn, issue, doctrine)
    reasons = ["Round one: also reject emails without a TLD.", "Round two: add a test for uppercase domains."]
    for reason in reasons:
        done = await run_to_review(core, task_id)
        await review.submit_review(core, BOB, done.evidence_pack.id, "needs_changes", reason)
    body = await text(client, f"jct://issues/{issue}")
    assert "**myorg/testing** (jct://doctrine/myorg/testing):\n> Every fix comes with a test." in body
    assert "## Review feedback (review round 2 of 3: the next review asking for changes fails the task;" in body
    assert body.index(reasons[0]) < body.index(reasons[1])
    assert len(body) < 8_000, len(body)
    assert "truncated" not in body


async def test_huge_fields_are_cut_with_a_pointer(core: Core, client: Client) -> None:
    task_id = await enqueue(
        core,
        objective="Rewrite the parser\n" + "Keep the grammar. " * 220,
        acceptance_criteria=[f"Criterion {i}: " + "x" * 900 for i in range(50)],
        context_summary="word " * 4_000,
    )
    body = await text(client, f"jct://issues/{await issue_of(core, task_id)}")
    assert len(body) < 12_500
    assert f'jct_get_context(task_id="{task_id}")' in body
    assert "truncated" in body
    assert "more not shown" in body


# --- runs, evidence, artifacts, queue, reviews ----------------------------------------------


async def test_run_evidence_and_artifact_pages_after_a_completion(core: Core, client: Client) -> None:
    task_id = await enqueue(core, acceptance_criteria=["Email is validated", "Docs mention it"], target_path="src")
    await queue.claim_task(core, ALICE, task_id)
    await work.report_progress(core, ALICE, task_id, message="Halfway through the handler", progress=50)
    patch = await work.report_artifact(
        core, ALICE, task_id, title="Code changes", artifact_type="code_patch", content=PATCH, media_type="text/x-diff"
    )
    remote = await work.report_artifact(
        core, ALICE, task_id, title="CI log", artifact_type="log", uri="https://ci.example.com/runs/7/log"
    )
    done = await completion.complete_task(
        core, ALICE, task_id, success=True, summary="Validated emails", criteria_results=satisfied_by(patch.artifact_id)
    )

    run = await text(client, f"jct://runs/{done.run_id}")
    assert "Halfway through the handler" in run
    assert "50%" in run
    assert f"jct://artifacts/{patch.artifact_id}" in run
    assert f"jct://artifacts/{remote.artifact_id}" in run
    assert "Code changes (code_patch, text/x-diff" in run
    assert f"Verdict **{done.evidence_pack.verdict}**" in run
    assert f"jct://evidence/{done.evidence_pack.id}" in run
    assert "by alice" in run

    evidence = await text(client, f"jct://evidence/{done.evidence_pack.id}")
    assert f"Verdict **{done.evidence_pack.verdict}**" in evidence
    assert "## Checks" in evidence
    assert "required_evidence" in evidence
    assert "**satisfied** · Email is validated" in evidence
    assert "Docs mention it" in evidence
    assert "## Missing evidence" in evidence
    assert "Review: pending" in evidence
    assert "jct_submit_review" in evidence

    diff = await read(client, f"jct://artifacts/{patch.artifact_id}")
    assert diff.mime_type == "text/x-diff"
    assert diff.text == PATCH
    link = await read(client, f"jct://artifacts/{remote.artifact_id}")
    assert link.mime_type == "text/uri-list"
    assert "https://ci.example.com/runs/7/log" in link.text.splitlines()


async def test_a_long_artifact_is_cut_with_a_pointer(core: Core, client: Client) -> None:
    task_id = await enqueue(core)
    await queue.claim_task(core, ALICE, task_id)
    log = await work.report_artifact(
        core, ALICE, task_id, title="Test log", artifact_type="log", content="line of output\n" * 5_000
    )
    content = await text(client, f"jct://artifacts/{log.artifact_id}")
    assert len(content) < 41_000
    assert f'jct_get_artifact(artifact_id="{log.artifact_id}", offset=40000)' in content


async def test_queue_and_pending_reviews_pages(core: Core, client: Client) -> None:
    low = await enqueue(core, objective="Tidy the changelog", priority="P3")
    high = await enqueue(core, objective="Fix the login outage", priority="P0")
    waiting = await enqueue(core, objective="Validate emails on signup")
    done = await run_to_review(core, waiting)

    page = await read(client, "jct://queue")
    assert page.mime_type == "text/markdown"
    assert page.text.index(f"jct://tasks/{high}") < page.text.index(f"jct://tasks/{low}")
    assert "Fix the login outage" in page.text
    assert "2 queued" in page.text
    assert "Validate emails on signup" not in page.text

    pending = await text(client, "jct://reviews/pending")
    assert "1 pending" in pending
    assert f"jct://evidence/{done.evidence_pack.id}" in pending
    assert "Validate emails on signup" in pending

    await review.submit_review(core, ADMIN, done.evidence_pack.id, "approved", "Looks right.")
    assert "Nothing awaits a decision." in await text(client, "jct://reviews/pending")


async def test_task_page_shows_runs_and_the_briefing_link(core: Core, client: Client) -> None:
    task_id = await enqueue(core)
    done = await run_to_review(core, task_id)
    await review.submit_review(core, BOB, done.evidence_pack.id, "needs_changes", "Handle plus-addressing.")
    body = await text(client, f"jct://tasks/{task_id}")
    assert body.startswith("# Task: Add input validation")
    assert f"jct://issues/{await issue_of(core, task_id)}" in body
    assert f"jct://runs/{done.run_id}" in body
    assert "review needs_changes by" in body
    assert "Handle plus-addressing." in body
    assert f'jct_claim_task(task_id="{task_id}")' in body


# --- resources/list -------------------------------------------------------------------------


@pytest.mark.parametrize("page_tasks", [3, 4, 25])
async def test_next_cursor_walks_every_resource_once_running_first(core: Core, page_tasks: int) -> None:
    tasks = [await enqueue(core, objective=f"Task number {i}") for i in range(9)]
    running = tasks[:4]
    for task_id in running:
        await queue.claim_task(core, ALICE, task_id)
    done = await run_to_review(core, tasks[4])
    async with Client(serve(core, page_tasks=page_tasks)) as client:
        pages = []
        cursor = None
        while True:
            page = await client.list_resources(cursor=cursor)
            pages.append([str(r.uri) for r in page.resources])
            cursor = page.next_cursor
            if cursor is None:
                break
        with pytest.raises(MCPError) as bad:
            await client.list_resources(cursor="not-a-cursor")
        assert bad.value.error.code == INVALID_PARAMS

    uris = [uri for page in pages for uri in page]
    assert len(uris) == len(set(uris)), "a resource was listed twice"
    assert pages[0][:2] == ["jct://queue", "jct://reviews/pending"]
    assert len(pages) == -(-9 // page_tasks)
    task_uris = [uri for uri in uris if uri.startswith("jct://tasks/")]
    assert sorted(task_uris) == sorted(f"jct://tasks/{t}" for t in tasks)
    assert {uri.removeprefix("jct://tasks/") for uri in task_uris[:4]} == set(running)
    # Newest first after the running ones.
    assert [uri.removeprefix("jct://tasks/") for uri in task_uris[4:]] == list(reversed(tasks[4:]))
    assert f"jct://runs/{done.run_id}" in uris
    assert f"jct://evidence/{done.evidence_pack.id}" in uris
    assert sum(uri.startswith("jct://issues/") for uri in uris) == 9
    assert sum(uri.startswith("jct://runs/") for uri in uris) == 5


async def test_listed_names_are_readable(core: Core, client: Client) -> None:
    task_id = await enqueue(core, objective="Speed up the nightly export\nIt takes four hours.")
    done = await run_to_review(core, task_id)
    listed = {str(r.uri): r for r in await all_listed(client)}
    run = listed[f"jct://runs/{done.run_id}"]
    assert run.name == "Run 1: Speed up the nightly export"
    assert run.description is not None
    assert "under_review" in run.description
    evidence = listed[f"jct://evidence/{done.evidence_pack.id}"]
    assert evidence.name == "Evidence: Speed up the nightly export"
    assert evidence.description is not None
    assert "review pending" in evidence.description
    bare = await enqueue(core, objective="Rotate the API keys", create_cwom=False)
    listed = {str(r.uri): r for r in await all_listed(client)}
    assert listed[f"jct://tasks/{bare}"].name == "Task: Rotate the API keys"
    assert sum(r.name == "Issue: Rotate the API keys" for r in listed.values()) == 0
    assert "Briefing:" not in await text(client, f"jct://tasks/{bare}")
    for uri, resource in listed.items():
        if uri.count("/") == 3 and not uri.startswith("jct://workflows/"):  # named for the objective, not the id
            assert resource.name
            assert uri.rsplit("/", 1)[-1] not in resource.name


# --- templates and completions -------------------------------------------------------------


async def test_templates_are_listed(client: Client) -> None:
    templates = {t.uri_template: t for t in (await client.list_resource_templates()).resource_templates}
    assert set(templates) == {
        "jct://tasks/{task_id}",
        "jct://issues/{issue_id}",
        "jct://runs/{run_id}",
        "jct://runs/{run_id}/diff",
        "jct://evidence/{evidence_pack_id}",
        "jct://artifacts/{artifact_id}",
        "jct://missions/{mission_id}",
        "jct://workflows/{name}",
        "jct://doctrine/{namespace}/{name}",
    }
    assert all(t.description for t in templates.values())
    assert templates["jct://issues/{issue_id}"].mime_type == "text/markdown"


async def complete(client: Client, template: str, name: str, value: str) -> list[str]:
    result = await client.complete(
        ResourceTemplateReference(type="ref/resource", uri=template), {"name": name, "value": value}
    )
    return list(result.completion.values)


async def test_completions_by_id_prefix_and_by_objective_words(core: Core, client: Client) -> None:
    signup = await enqueue(core, objective="Validate emails on Signup")
    export = await enqueue(core, objective="Speed up the nightly export")
    done = await run_to_review(core, signup)
    issue = await issue_of(core, signup)

    assert await complete(client, "jct://tasks/{task_id}", "task_id", signup[:6]) == [signup]
    assert await complete(client, "jct://tasks/{task_id}", "task_id", "signup") == [signup]
    assert await complete(client, "jct://tasks/{task_id}", "task_id", "NIGHTLY export") == [export]
    assert await complete(client, "jct://tasks/{task_id}", "task_id", "signup export") == []
    assert set(await complete(client, "jct://tasks/{task_id}", "task_id", "")) == {signup, export}
    assert await complete(client, "jct://issues/{issue_id}", "issue_id", "emails") == [issue]
    assert await complete(client, "jct://issues/{issue_id}", "issue_id", issue[:5]) == [issue]
    assert await complete(client, "jct://runs/{run_id}", "run_id", "signup") == [done.run_id]
    assert await complete(client, "jct://evidence/{evidence_pack_id}", "evidence_pack_id", "validate") == [
        done.evidence_pack.id
    ]
    artifacts = await complete(client, "jct://artifacts/{artifact_id}", "artifact_id", "code changes")
    assert len(artifacts) == 1
    assert await complete(client, "jct://tasks/{task_id}", "task_id", "100%_") == []
    assert await complete(client, "jct://tasks/{task_id}", "wrong_name", "") == []


async def test_completions_are_bounded(core: Core, client: Client) -> None:
    for i in range(22):
        await enqueue(core, objective=f"Batch job {i}")
    result = await client.complete(
        ResourceTemplateReference(type="ref/resource", uri="jct://tasks/{task_id}"),
        {"name": "task_id", "value": "batch"},
    )
    assert len(result.completion.values) == 20
    assert result.completion.has_more is True


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tasks", "issues", "runs", "evidence", "artifacts"])
@pytest.mark.parametrize("ident", ["6f1c2a9e-0000-4000-8000-000000000000", "not-a-uuid", "12345", "%2E%2E"])
async def test_missing_or_malformed_ids_are_resource_not_found(client: Client, kind: str, ident: str) -> None:
    with pytest.raises(MCPError) as missing:
        await client.read_resource(f"jct://{kind}/{ident}")
    assert missing.value.error.code == INVALID_PARAMS
    assert "Traceback" not in missing.value.error.message
    assert "# JCT queue" in await text(client, "jct://queue")


async def test_unknown_uris_are_resource_not_found(client: Client) -> None:
    for uri in ["jct://nothing", "jct://tasks/a/b", "jct://tasks/"]:
        with pytest.raises(MCPError) as missing:
            await client.read_resource(uri)
        assert missing.value.error.code == INVALID_PARAMS
    assert "# Evidence packs awaiting review" in await text(client, "jct://reviews/pending")


# --- the handshake-era transport -------------------------------------------------------------


async def test_resources_work_over_a_legacy_session(core: Core) -> None:
    task_id = await enqueue(core, acceptance_criteria=CRITERIA, context_summary=SUMMARY)
    issue = await issue_of(core, task_id)
    async with Client(serve(core), mode="legacy") as client:
        listed = [str(r.uri) for r in (await client.list_resources()).resources]
        assert f"jct://issues/{issue}" in listed
        body = await text(client, f"jct://issues/{issue}")
        assert all(criterion in body for criterion in CRITERIA)
        assert await complete(client, "jct://issues/{issue_id}", "issue_id", "validation") == [issue]
        prompt = await client.get_prompt("work_next")
        assert "jct_claim_next" in prompt.messages[0].content.text  # type: ignore[union-attr]
        with pytest.raises(MCPError) as missing:
            await client.read_resource(f"jct://tasks/{uuid.uuid4()}")
        assert missing.value.error.code == INVALID_PARAMS
