"""A scripted stand-in for the Anthropic Messages API, so the real Claude Code CLI runs without a model.

Claude Code is pointed at it with `ANTHROPIC_BASE_URL`. The script is a list of steps, played in order
on the main conversation: each step is a `ToolUse` (the model asks Claude Code to call a tool), a
`Reply` (a final text, `end_turn`), or a function of the previous tool result (`ToolResult`) returning
one of those, so a later step can use ids an earlier tool returned.

Which step answers a request is read from the request itself: the number of assistant turns already
in its `messages`. A request Claude Code retries therefore gets the same answer, and side requests
(titles, quota probes, summaries: any request whose `tools` name no MCP tool) never consume a step;
they get a short text. One that names no MCP tool yet but offers WaitForMcpServers (a server still
connecting) is answered with a call of it, as a model wanting the server's tools would; that turn is
not a step either. (In print mode, with the harness's environment, Claude Code 2.1.328 sends no side
requests: only the main conversation, one streaming request per turn.) Every request is recorded
(`requests`), and every tool result Claude Code sent back on the main conversation is in `tool_results`;
a step may read the request it answers (`body`), to see what Claude Code added (a hook's message). A
step that raises is recorded in `errors` and answered with a 400, which Claude Code does not retry. A
subagent's conversation (its requests name MCP tools too) is told apart by a text of its system prompt
and plays a script of its own (`subagents`), counted the same way.
"""

from __future__ import annotations

import inspect
import json
import socket
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

MODEL = "claude-sonnet-4-5"
SIDE_TEXT = "OK"
MCP_PREFIX = "mcp__"
# Offered while an MCP server is still connecting (a plugin's server, loaded with --plugin-dir, is not waited
# for before the first request); a model that wants that server's tools calls it, and so does the stand-in.
WAIT_TOOL = "WaitForMcpServers"
# Calls of it in one conversation before the stand-in gives up and answers as to a side request. Each call
# returns as soon as the server connects; on a loaded machine a plugin's server took more than three.
WAITS = 10


@dataclass(frozen=True)
class ToolUse:
    """The model calls `name` with `input`."""

    name: str
    input: dict[str, Any] = field(default_factory=dict)
    text: str = ""  # an optional text block before the tool_use block


@dataclass(frozen=True)
class Reply:
    """The model answers with text and ends its turn."""

    text: str


@dataclass(frozen=True)
class ToolResult:
    """What Claude Code sent back for one tool_use: the text of its content and whether it is an error."""

    tool_use_id: str
    text: str
    is_error: bool

    def json(self) -> Any:
        """The text parsed as JSON (JCT's tools answer JSON)."""
        return json.loads(self.text)


def ok(result: ToolResult | None) -> dict[str, Any]:
    """The JSON of a successful JCT tool result (fails the step, and so the test, otherwise)."""
    assert result is not None
    assert not result.is_error, result
    body: dict[str, Any] = result.json()
    assert body["success"] is True, body
    return body


Answer = ToolUse | Reply
Step = Answer | Callable[[ToolResult | None], Answer | Awaitable[Answer]]


@dataclass
class Recorded:
    """One HTTP request Claude Code made to the stand-in."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    # "main" (played or replayed a step), "subagent", "failed" (its step raised), "wait" (WAIT_TOOL called), "side",
    # "count_tokens", "other"
    kind: str
    step: int | None = None


def tool_names(body: Any) -> list[str]:
    if not isinstance(body, dict):
        return []
    return [str(tool.get("name", "")) for tool in body.get("tools") or [] if isinstance(tool, dict)]


def is_wait(message: dict[str, Any]) -> bool:
    """An assistant turn that only called WAIT_TOOL."""
    content = message.get("content")
    return (
        message.get("role") == "assistant"
        and isinstance(content, list)
        and any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content)
        and all(b.get("name") == WAIT_TOOL for b in content if isinstance(b, dict) and b.get("type") == "tool_use")
    )


def last_tool_result(messages: list[dict[str, Any]]) -> ToolResult | None:
    """The last tool_result block of the last user message, if it has one."""
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if not isinstance(content, list):
            return None
        for block in reversed(content):
            if isinstance(block, dict) and block.get("type") == "tool_result":
                return ToolResult(
                    tool_use_id=str(block.get("tool_use_id", "")),
                    text=content_text(block.get("content")),
                    is_error=bool(block.get("is_error", False)),
                )
        return None
    return None


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


class ScriptedModel:
    """The stand-in's state: the script, what was asked, and what was answered."""

    def __init__(self, steps: list[Step], subagents: dict[str, list[Step]] | None = None) -> None:
        self.steps = list(steps)
        # A subagent's conversation, told apart by a text of its system prompt, plays a script of its own.
        self.subagents = {marker: list(script) for marker, script in (subagents or {}).items()}
        self._subagent_answers: dict[str, dict[int, Answer]] = {marker: {} for marker in self.subagents}
        self.requests: list[Recorded] = []
        self.tool_results: list[ToolResult] = []
        self.errors: list[str] = []  # requests it could not answer from the script, and failed steps
        self.body: dict[str, Any] = {}  # the main-conversation request being answered, for a step to read
        self._answers: dict[int, Answer] = {}
        self._lock = anyio.Lock()  # one step at a time, so a retry waits for the answer it repeats

    # --- what the tests read ---------------------------------------------------------------------

    def main_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.kind == "main"]

    def side_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.kind == "side"]

    # --- answering -------------------------------------------------------------------------------

    async def answer_for(self, body: dict[str, Any]) -> tuple[str, Answer, int | None]:
        async with self._lock:
            return await self._answer_for(body)

    async def _answer_for(self, body: dict[str, Any]) -> tuple[str, Answer, int | None]:
        messages = body.get("messages") or []
        names = tool_names(body)
        if not any(name.startswith(MCP_PREFIX) for name in names):
            if WAIT_TOOL in names and sum(1 for m in messages if is_wait(m)) < WAITS:
                return "wait", ToolUse(WAIT_TOOL, {}), None
            return "side", Reply(SIDE_TEXT), None
        index = sum(1 for m in messages if m.get("role") == "assistant" and not is_wait(m))
        kind, steps, answers = "main", self.steps, self._answers
        system = json.dumps(body.get("system") or "")
        for marker, script in self.subagents.items():
            if marker in system:
                kind, steps, answers = "subagent", script, self._subagent_answers[marker]
        if index in answers:  # a retry of a request already answered
            return kind, answers[index], index
        self.body = body
        assistant = [m for m in messages if m.get("role") == "assistant"]
        previous = None if assistant and is_wait(assistant[-1]) else last_tool_result(messages)
        if previous is not None:
            self.tool_results.append(previous)
        if index >= len(steps):
            self.errors.append(f"{kind} request for step {index}, but the script has {len(steps)} steps")
            answer: Answer = Reply("(the script has no more steps)")
        else:
            step = steps[index]
            if callable(step):
                made = step(previous)
                answer = await made if inspect.isawaitable(made) else made
            else:
                answer = step
        answers[index] = answer
        return kind, answer, index

    async def messages(self, request: Request) -> Response:
        body = await request.json()
        try:
            kind, answer, index = await self.answer_for(body)
        except Exception as error:  # a step that failed (its assertion on the tool result, say)
            self.errors.append("".join(traceback.format_exception(error)))
            self.requests.append(Recorded("POST", request.url.path, dict(request.headers), body, "failed"))
            # 400 is an error Claude Code does not retry: the run ends, and the test reports `errors`.
            message = f"the scripted step failed: {error!r}"
            return JSONResponse({"type": "error", "error": {"type": "invalid_request_error", "message": message}}, 400)
        self.requests.append(Recorded("POST", request.url.path, dict(request.headers), body, kind, index))
        model = str(body.get("model") or MODEL)
        if body.get("stream"):
            return StreamingResponse(sse_events(answer, model), media_type="text/event-stream")
        return JSONResponse(message_json(answer, model))

    async def count_tokens(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(Recorded("POST", request.url.path, dict(request.headers), body, "count_tokens"))
        return JSONResponse({"input_tokens": 1000})

    async def other(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        self.requests.append(Recorded(request.method, request.url.path, dict(request.headers), body, "other"))
        return JSONResponse(
            {"type": "error", "error": {"type": "not_found_error", "message": f"{request.url.path} is not scripted"}},
            status_code=404,
        )

    def app(self) -> Starlette:
        methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]
        return Starlette(
            routes=[
                Route("/v1/messages", self.messages, methods=["POST"]),
                Route("/v1/messages/count_tokens", self.count_tokens, methods=["POST"]),
                Route("/{path:path}", self.other, methods=methods),
            ]
        )


# --- the wire format ---------------------------------------------------------------------------


def content_blocks(answer: Answer) -> list[dict[str, Any]]:
    if isinstance(answer, Reply):
        return [{"type": "text", "text": answer.text}]
    blocks: list[dict[str, Any]] = []
    if answer.text:
        blocks.append({"type": "text", "text": answer.text})
    tool_use_id = f"toolu_{uuid.uuid4().hex[:24]}"
    blocks.append({"type": "tool_use", "id": tool_use_id, "name": answer.name, "input": answer.input})
    return blocks


def stop_reason(answer: Answer) -> str:
    return "tool_use" if isinstance(answer, ToolUse) else "end_turn"


USAGE = {"input_tokens": 100, "output_tokens": 20, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def message_json(answer: Answer, model: str) -> dict[str, Any]:
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content_blocks(answer),
        "stop_reason": stop_reason(answer),
        "stop_sequence": None,
        "usage": USAGE,
    }


def sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def sse_events(answer: Answer, model: str) -> Iterator[str]:
    start = message_json(answer, model) | {"content": [], "stop_reason": None}
    start["usage"] = USAGE | {"output_tokens": 1}
    yield sse("message_start", {"type": "message_start", "message": start})
    for index, block in enumerate(content_blocks(answer)):
        if block["type"] == "text":
            yield sse(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
            )
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            empty = block | {"input": {}}
            yield sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": empty})
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        yield sse("content_block_stop", {"type": "content_block_stop", "index": index})
    yield sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason(answer), "stop_sequence": None},
            "usage": {"output_tokens": 20},
        },
    )
    yield sse("message_stop", {"type": "message_stop"})


# --- serving -----------------------------------------------------------------------------------


def loopback_socket() -> socket.socket:
    """A listening socket on a free loopback port: connections queue from the first moment."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


@asynccontextmanager
async def serve_app(app: Any) -> AsyncIterator[str]:
    """Serve an ASGI app on a free loopback port in this event loop; yields its base URL."""
    sock = loopback_socket()
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    # pytest owns the signals: a server that captured them would hand them back out of order when several
    # run at once, leaving SIGTERM bound to a stopped server (sse-starlette then ends every event stream).
    server.capture_signals = nullcontext  # type: ignore[method-assign, assignment]
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            try:
                yield f"http://127.0.0.1:{port}"
            finally:
                server.should_exit = True
    finally:
        sock.close()


@asynccontextmanager
async def scripted_model(
    steps: list[Step], subagents: dict[str, list[Step]] | None = None
) -> AsyncIterator[tuple[ScriptedModel, str]]:
    """A running stand-in playing `steps` (and `subagents`' scripts); yields it and its base URL."""
    model = ScriptedModel(steps, subagents)
    async with serve_app(model.app()) as url:
        yield model, url
