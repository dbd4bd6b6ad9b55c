"""MCP prompts: slash commands (/mcp__jct__work_next, review, enqueue, plan) with live state."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from mcp.server import MCPServer
from mcp.server.context import HandlerResult, ServerRequestContext
from mcp.server.mcpserver import UserMessage
from mcp.server.mcpserver.prompts.base import Prompt, PromptArgument
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CompleteRequestParams, CompleteResult, Completion, PromptReference
from pydantic import Field

from server import sdk
from server.core.claims import queue
from server.core.missions import status as mission_status
from server.core.models import parse_id
from server.core.operators import catalog, pages
from server.core.review import reviews
from server.core.service import Core
from server.core.workflows import start
from server.errors import ErrorCode, JctError
from server.prompts import texts
from server.vocab import Operation

# Claude Code splits what follows a slash command on whitespace and hands the words to the prompt's arguments
# in order, dropping words past the last one (its MCP prompt command: `args.split(/\s+/)` zipped with the
# argument names). So a free-text prompt takes its text as a first argument and WORDS - 1 more, one word each,
# which JCT joins again: `/mcp__jct__enqueue Add a CHANGELOG to myorg/api-service` reaches JCT whole. Other
# clients put the whole text in the first argument.
WORDS = 64
MORE = tuple(f"w{n}" for n in range(2, WORDS + 1))


def _free_text(first: str, more: dict[str, Any]) -> str:
    return " ".join([first, *(str(more[name]) for name in MORE if more.get(name))]).strip()


def _free_text_prompt(
    server: MCPServer[Any],
    render: Callable[[str], Awaitable[str]],
    *,
    name: str,
    title: str,
    description: str,
    argument: str,
    meaning: str,
    asks: str,
) -> None:
    """A prompt whose one required argument is free text, plus the continuation words (see WORDS); `render`
    turns the text into the message. `asks` says what the text should say, for when it is empty."""

    async def fn(**given: Any) -> list[UserMessage]:
        text = _free_text(given[argument], given)
        if not text:
            raise _bad(f"{argument} is empty: say in plain language {asks}.")
        return [UserMessage(await render(text))]

    arguments = [PromptArgument(name=argument, description=meaning, required=True)]
    arguments.append(
        PromptArgument(
            name=MORE[0],
            description=f"Clients that split a command line into words (Claude Code) pass the words after the "
            f"first as {MORE[0]}..{MORE[-1]}; JCT joins them to {argument}.",
        )
    )
    arguments += [PromptArgument(name=more) for more in MORE[1:]]
    server.add_prompt(Prompt(name=name, title=title, description=description, arguments=arguments, fn=fn))


def _bad(message: str) -> MCPError:
    return MCPError(code=INVALID_PARAMS, message=message)


def _operation(value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    try:
        return Operation(value.strip()).value
    except ValueError:
        choices = ", ".join(op.value for op in Operation)
        raise _bad(f"operation {value[:40]!r} is not one of: {choices}.") from None


async def _pack_state(core: Core, evidence_pack_id: str) -> pages.PackState:
    try:
        pack_id = parse_id(evidence_pack_id.strip(), "evidence_pack_id")
    except JctError as exc:
        raise _bad(exc.message) from None
    try:
        return await pages.pack_state(core, pack_id, texts.DIFF_CHARS)
    except JctError as exc:
        if exc.code is not ErrorCode.EVIDENCE_PACK_NOT_FOUND:
            raise
        raise _bad(f"Evidence pack {pack_id} does not exist; omit evidence_pack_id to see the pending ones.") from None


def register_prompts(server: MCPServer[Any], core: Core) -> None:
    """work_next, review, enqueue and plan, each rendering live state; completions for their arguments."""

    @server.prompt(
        name="work_next",
        title="Work the JCT queue",
        description=(
            "Start working: the claim → work → report → complete loop, with the queue as it is now. "
            "Optionally only tasks of one operation."
        ),
    )
    async def work_next(
        operation: Annotated[
            str | None, Field(description="Only claim tasks of this operation: code_change, docs, analysis or ops.")
        ] = None,
    ) -> list[UserMessage]:
        op = _operation(operation)
        stats = await queue.queue_stats(core)
        page = await queue.list_tasks(core, status="queued", operation=op, limit=texts.QUEUE_SHOWN)
        steps = await start.steps_of(core, [task.task_id for task in page.tasks])
        return [UserMessage(texts.work_next(stats, page, op, core.settings.lease_seconds, steps))]

    @server.prompt(
        name="review",
        title="Review JCT evidence",
        description=(
            "Judge evidence packs: verdict, checks, criteria, the diff. Lists the packs awaiting review, or "
            "embeds one pack's evidence when evidence_pack_id is given."
        ),
    )
    async def review_prompt(
        evidence_pack_id: Annotated[
            str | None, Field(description="The evidence pack to review; omit it to list the pending ones.")
        ] = None,
    ) -> list[UserMessage]:
        if evidence_pack_id is not None and evidence_pack_id.strip():
            return [UserMessage(texts.review_pack(await _pack_state(core, evidence_pack_id)))]
        page = await reviews.list_pending_reviews(core, limit=texts.REVIEWS_SHOWN)
        stats = await queue.queue_stats(core)
        return [UserMessage(texts.review_pending(page, stats.pending_reviews))]

    async def enqueue(request: str) -> str:
        queued = await queue.list_tasks(core, status="queued", limit=texts.QUEUE_SHOWN)
        return texts.enqueue(request, core.settings.allowed_repo_prefixes, queued)

    _free_text_prompt(
        server,
        enqueue,
        name="enqueue",
        title="Enqueue JCT tasks",
        description="Turn a plain-language request into well-formed tasks (objective, operation, repository, "
        "checkable acceptance criteria, context, priority) and enqueue them with jct_enqueue_task.",
        argument="request",
        meaning="What you want done, in plain language.",
        asks="what you want done",
    )

    async def plan(goal: str) -> str:
        active = await mission_status.list_missions(core, status="active", limit=texts.QUEUE_SHOWN)
        return texts.plan(goal, core.settings.allowed_repo_prefixes, active)

    _free_text_prompt(
        server,
        plan,
        name="plan",
        title="Plan a JCT mission",
        description="Turn a goal into a mission: phases of tasks with dependencies, created in one step with "
        "jct_create_mission, with the active missions embedded.",
        argument="goal",
        meaning="The goal, in plain language.",
        asks="what the mission should achieve",
    )

    _register_completions(server, core)


def _register_completions(server: MCPServer[Any], core: Core) -> None:
    """work_next's operation and review's evidence_pack_id; anything else goes to the handler registered before."""
    previous = sdk.request_handler(server, "completion/complete")

    async def complete(ctx: ServerRequestContext[Any, Any], params: CompleteRequestParams) -> HandlerResult:
        ref, argument = params.ref, params.argument
        if isinstance(ref, PromptReference) and ref.name == "work_next" and argument.name == "operation":
            values = [op.value for op in Operation if op.value.startswith(argument.value.strip().lower())]
            return CompleteResult(completion=Completion(values=values))
        if isinstance(ref, PromptReference) and ref.name == "review" and argument.name == "evidence_pack_id":
            found = await catalog.complete_pending_pack_ids(core, argument.value)
            return CompleteResult(completion=Completion(values=found.ids, has_more=found.has_more))
        if previous is not None:
            return await previous(ctx, params)
        return CompleteResult(completion=Completion(values=[]))

    sdk.add_request_handler(server, "completion/complete", CompleteRequestParams, complete)


__all__ = ["register_prompts"]
