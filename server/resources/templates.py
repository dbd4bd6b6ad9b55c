"""Reading jct:// resources: the two fixed pages, one template per record kind, and completions for the ids."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypedDict, TypeVar, Unpack

from mcp.server import MCPServer
from mcp.server.context import HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, UnexpectedResourceError
from mcp.server.mcpserver.resources import Resource, ResourceTemplate, TextResource
from mcp.shared.exceptions import MCPError
from mcp.shared.uri_template import UriTemplate
from mcp_types import CompleteRequestParams, CompleteResult, Completion, InputRequiredResult, ResourceTemplateReference
from pydantic import validate_call

from server import sdk, uris
from server.core.briefings import doctrine
from server.core.claims import queue
from server.core.git import history
from server.core.missions import status as mission_status
from server.core.operators import catalog, pages
from server.core.review import reviews as review
from server.core.service import Core
from server.errors import NOT_FOUND, ErrorCode, JctError
from server.markdown import PENDING_REVIEWS_URI, QUEUE_URI, artifact_cut_note
from server.resources import briefing, mission_page, render, workflow_page
from server.vocab import EntityKind

MARKDOWN = "text/markdown"
URI_LIST = "text/uri-list"
QUEUE_SHOWN = 50
REVIEWS_SHOWN = 25
RUN_DIFF_CHARS = 50_000

TASK = uris.TEMPLATES["Task"]
ISSUE = uris.TEMPLATES["Issue"]
RUN = uris.TEMPLATES["Run"]
EVIDENCE = uris.TEMPLATES["EvidencePack"]
ARTIFACT = uris.TEMPLATES["Artifact"]
MISSION = uris.TEMPLATES["Mission"]
WORKFLOW = uris.WORKFLOW

# Completion of each template's one variable: ids by prefix, or by words of the objective or title.
COMPLETERS: dict[str, tuple[str, EntityKind]] = {
    TASK: ("task_id", EntityKind.TASK),
    ISSUE: ("issue_id", EntityKind.ISSUE),
    RUN: ("run_id", EntityKind.RUN),
    uris.RUN_DIFF: ("run_id", EntityKind.RUN),
    EVIDENCE: ("evidence_pack_id", EntityKind.EVIDENCE_PACK),
    ARTIFACT: ("artifact_id", EntityKind.ARTIFACT),
    MISSION: ("mission_id", EntityKind.MISSION),
}

# Each Markdown template's title (its name is the title in lower case) and description.
PAGES: dict[str, tuple[str, str]] = {
    TASK: ("Task", "A task: status, target, objective, outcome, and its runs with verdicts and reviews."),
    ISSUE: (
        "Issue briefing",
        "Everything to start work: objective and acceptance criteria first, then context (summary, prior art, "
        "files of interest), constraints, doctrine, all review feedback so far, and the issue's tasks.",
    ),
    RUN: (
        "Run",
        "A run: status, executor, lease, verdict and review, artifacts (with jct://artifacts URIs), progress events.",
    ),
    EVIDENCE: (
        "Evidence pack",
        "The prover's verdict, each check, each acceptance criterion with cited artifacts, missing "
        "evidence, and the review state.",
    ),
    MISSION: (
        "Mission",
        "A mission: goal, phases with progress, open blockers, decisions so far, the tasks claimable next.",
    ),
    WORKFLOW: ("Workflow", "A workflow definition: inputs, and each step's objective, instructions, outputs and gate."),
    uris.DOCTRINE: (
        "Doctrine",
        "Standing guidance by name (myorg/code-style) that briefings carry, and which tasks get it.",
    ),
}

# A malformed id is as absent as an unknown one: both are the client's resource-not-found.
_NOT_FOUND = NOT_FOUND | {ErrorCode.INVALID_ARGUMENT}

T = TypeVar("T")
_Read = TypeVar("_Read", bound=Callable[..., Awaitable[Any]])


def _resource_error(uri: str, exc: JctError) -> ResourceError:
    if exc.code in _NOT_FOUND:
        return ResourceNotFoundError(f"Unknown resource {uri}: {exc.message}")
    return ResourceError(f"Could not read {uri}: {exc.message}")


async def _guard(uri: str, load: Awaitable[T]) -> T:
    try:
        return await load
    except JctError as exc:
        raise _resource_error(uri, exc) from None


class MediaTypedTemplate(ResourceTemplate):
    """A template whose function returns (text, media type), so each instance keeps its own mime type.

    The SDK's templates stamp every read with the template's one mime type; artifacts need theirs.
    """

    async def create_resource(
        self, uri: str, params: dict[str, Any], context: Context[Any, Any]
    ) -> Resource | InputRequiredResult:
        try:
            text, media_type = await self.fn(**params)
        except (ResourceError, MCPError):
            raise
        except Exception as exc:
            raise UnexpectedResourceError(f"Error creating resource from template {uri}") from exc
        return TextResource(
            uri=uri, name=self.name, title=self.title, description=self.description, mime_type=media_type, text=text
        )


def register(server: MCPServer[Any], core: Core) -> None:
    _register_fixed(server, core)
    _register_templates(server, core)
    _register_artifacts(server, core)
    _register_completions(server, core)


def _register_fixed(server: MCPServer[Any], core: Core) -> None:
    @server.resource(
        QUEUE_URI,
        name="JCT queue",
        title="JCT queue",
        description=f"Queued tasks, highest priority first (top {QUEUE_SHOWN}), and counts by status.",
        mime_type=MARKDOWN,
    )
    async def read_queue() -> str:
        stats = await queue.queue_stats(core)
        page = await queue.list_tasks(core, status="queued", limit=QUEUE_SHOWN)
        return render.queue_page(stats, page)

    @server.resource(
        PENDING_REVIEWS_URI,
        name="Pending reviews",
        title="Pending reviews",
        description="Evidence packs awaiting a review decision, oldest first, with verdicts and links.",
        mime_type=MARKDOWN,
    )
    async def read_pending_reviews() -> str:
        page = await review.list_pending_reviews(core, limit=REVIEWS_SHOWN)
        stats = await queue.queue_stats(core)
        return render.pending_reviews_page(page, stats.pending_reviews)


# Each template as the SDK built it from its function (its argument model and their JSON schema, about 1 ms), by
# the function's code and the template's words. `jct serve` builds one server, but a process that builds several
# (the test suite builds one per test, in-process) gives each later one a copy with its own function, as tools do
# (server/tools/declare.py); nothing kept holds a server's function or the Core it closes over.
_BUILT: dict[Hashable, ResourceTemplate] = {}


class _Words(TypedDict):
    """What a template says of itself in resources/templates/list."""

    name: str
    title: str
    description: str
    mime_type: str


def _template(
    server: MCPServer[Any], uri: str, kind: type[ResourceTemplate] = ResourceTemplate, **words: Unpack[_Words]
) -> Callable[[_Read], _Read]:
    """Register the function as the template `uri`, built once per process."""

    def register(fn: _Read) -> _Read:
        kwdefaults = tuple(sorted((fn.__kwdefaults__ or {}).items()))
        key = (kind, fn.__name__, fn.__code__, fn.__defaults__, kwdefaults, uri, *words.values())
        built = _BUILT.get(key)
        if built is None:
            # What `@server.resource` checks before it builds a template.
            variables = set(UriTemplate.parse(uri).variable_names)
            assert variables == set(inspect.signature(fn).parameters), f"{uri} and {fn.__name__} name other values"
            made = kind.from_function(fn, uri_template=uri, security=sdk.resource_security(server), **words)
            built = _BUILT[key] = made.model_copy(update={"fn": _unbound})
        # The SDK reads a template through validate_call, which casts what the URI gives to the annotated types.
        own = {"fn": validate_call(fn), "security": sdk.resource_security(server)}
        sdk.add_resource_template(server, built.model_copy(update=own))
        return fn

    return register


def _unbound(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a built template is registered with its own function")


def _page(server: MCPServer[Any], uri: str) -> Callable[[_Read], _Read]:
    """A template read as Markdown, as PAGES describes it."""
    title, description = PAGES[uri]
    return _template(server, uri, name=title.lower(), title=title, description=description, mime_type=MARKDOWN)


def _register_templates(server: MCPServer[Any], core: Core) -> None:
    @_page(server, TASK)
    async def read_task(task_id: str) -> str:
        return render.task_page(await _guard(uris.task(task_id), pages.task_page(core, task_id)))

    @_page(server, ISSUE)
    async def read_issue(issue_id: str) -> str:
        return briefing.issue_briefing(await _guard(uris.issue(issue_id), pages.issue_brief(core, issue_id)))

    @_page(server, RUN)
    async def read_run(run_id: str) -> str:
        return render.run_page(await _guard(uris.run(run_id), pages.run_page(core, run_id)))

    @_template(
        server,
        uris.RUN_DIFF,
        name="run diff",
        title="Run diff",
        description="What a run changed, read by JCT in the task's repository: base_commit to the reported commit.",
        mime_type="text/x-diff",
    )
    async def read_run_diff(run_id: str) -> str:
        try:
            read = await history.run_diff(core, run_id, max_chars=RUN_DIFF_CHARS)
        except JctError as exc:
            if exc.code in (ErrorCode.REPO_NOT_AVAILABLE, ErrorCode.COMMIT_NOT_FOUND):
                return f"# JCT has no diff of this run: {exc.message}\n# {exc.suggestion}\n"
            raise _resource_error(uris.run_diff(run_id), exc) from None
        return f"# {read.repo}: {read.base} .. {read.head or 'the working tree'}\n{read.text}"

    @_page(server, EVIDENCE)
    async def read_evidence(evidence_pack_id: str) -> str:
        uri = uris.evidence(evidence_pack_id)
        return render.evidence_page(await _guard(uri, pages.evidence_page(core, evidence_pack_id)))

    @_page(server, MISSION)
    async def read_mission(mission_id: str) -> str:
        uri = uris.mission(mission_id)
        view = await _guard(uri, mission_status.get_mission(core, mission_id, include=["tasks"]))
        return mission_page.mission_page(view)

    @_page(server, WORKFLOW)
    async def read_workflow(name: str) -> str:
        try:
            found = core.workflows.catalog().get(name)
        except JctError as exc:
            raise ResourceNotFoundError(f"Unknown resource {uris.workflow(name)}: {exc.message}") from None
        return workflow_page.workflow_page(found)

    @_page(server, uris.DOCTRINE)
    async def read_doctrine(namespace: str, name: str) -> str:
        ref = f"{namespace}/{name}"
        shown = await _guard(uris.doctrine(ref), doctrine.show(core, ref))
        return render.doctrine_page(shown.doctrine[0])


def _register_artifacts(server: MCPServer[Any], core: Core) -> None:
    @_template(
        server,
        ARTIFACT,
        MediaTypedTemplate,
        name="artifact",
        title="Artifact",
        description=(
            f"An artifact's content with its own media type (the first {pages.ARTIFACT_CHARS:,} characters; "
            "jct_get_artifact pages through the rest), or text/uri-list for one stored outside JCT."
        ),
        mime_type="text/plain",
    )
    async def read_artifact(artifact_id: str) -> tuple[str, str]:
        uri = uris.artifact(artifact_id)
        artifact, text, total = await _guard(uri, pages.artifact_content(core, artifact_id))
        if text is None:
            return render.remote_artifact(artifact), URI_LIST
        if total > len(text):
            text += f"\n{artifact_cut_note(artifact.artifact_id, len(text), total)}\n"
        return text, artifact.media_type


def _register_completions(server: MCPServer[Any], core: Core) -> None:
    """Completions for the templates' ids; any other reference goes to the handler registered before."""
    previous = sdk.request_handler(server, "completion/complete")

    async def complete(ctx: ServerRequestContext[Any, Any], params: CompleteRequestParams) -> HandlerResult:
        ref = params.ref
        if isinstance(ref, ResourceTemplateReference) and ref.uri == WORKFLOW and params.argument.name == "name":
            names = [n for n in core.workflows.catalog().workflows if n.startswith(params.argument.value)]
            return CompleteResult(completion=Completion(values=names[:100], has_more=len(names) > 100))
        entry = COMPLETERS.get(ref.uri) if isinstance(ref, ResourceTemplateReference) else None
        if entry is None:
            if previous is not None:
                return await previous(ctx, params)
            return CompleteResult(completion=Completion(values=[]))
        variable, kind = entry
        if params.argument.name != variable:
            return CompleteResult(completion=Completion(values=[]))
        found = await catalog.complete_ids(core, kind, params.argument.value)
        return CompleteResult(completion=Completion(values=found.ids, has_more=found.has_more))

    sdk.add_request_handler(server, "completion/complete", CompleteRequestParams, complete)
