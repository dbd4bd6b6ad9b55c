"""The one place a tool failure becomes the result the model reads, and a failure of the world a protocol error.

Could a smarter model have avoided it? Then it is a tool result with `isError: true` and
`{"success": false, "error": {"code", "message", "suggestion"}}`. A failure of the world (the database
unreachable or busy, the disk full: server/failures.py) is UNAVAILABLE with `retry_after_seconds`,
logged one line per kind per interval. Anything else unexpected is INTERNAL_ERROR with a correlation id
that is also in the server log (with its traceback), and never a traceback to the caller.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent
from pydantic import ValidationError

from server.errors import ErrorCode, JctError, RpcCode
from server.failures import FailureLog, as_error, world_failure

log = logging.getLogger("jct.tools")


def error_result(error: JctError) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(error.to_dict()))], is_error=True)


def translate(tool: str, exc: ToolError, failures: FailureLog) -> CallToolResult:
    cause = exc.__cause__
    if isinstance(cause, JctError):
        log.info("tool %s refused: %s %s", tool, cause.code, cause.message)
        return error_result(cause)
    if isinstance(cause, ValidationError):
        return error_result(_invalid_arguments(tool, cause))
    if not isinstance(exc, UnexpectedToolError):
        # The SDK's own anticipated errors: an unknown tool name, mostly.
        return error_result(JctError(ErrorCode.INVALID_ARGUMENT, str(exc), "Call tools/list for the available tools."))
    failure = world_failure(exc)
    if failure is not None:
        failures.failed(failure, tool)
        return error_result(as_error(failure))
    correlation = uuid.uuid4().hex[:12]
    log.error("tool %s crashed (correlation id %s)", tool, correlation, exc_info=cause or exc)
    return error_result(
        JctError(
            ErrorCode.INTERNAL_ERROR,
            f"JCT failed unexpectedly (correlation id {correlation}). Nothing you sent caused this.",
            "Retry once; if it fails again, report the correlation id to the JCT operator.",
        )
    )


def protocol_error(exc: Exception, failures: FailureLog) -> MCPError | None:
    """For resources and prompts: the JSON-RPC error for a failure of the world, or None for anything else."""
    failure = world_failure(exc)
    if failure is None:
        return None
    failures.failed(failure)
    error = as_error(failure)
    data = {"code": error.code.value, "retry_after_seconds": error.retry_after_seconds}
    return MCPError(code=RpcCode.UNAVAILABLE, message=f"{error.message} {error.suggestion}", data=data)


def _invalid_arguments(tool: str, error: ValidationError) -> JctError:
    problems = []
    for item in error.errors()[:5]:
        where = ".".join(str(part) for part in item["loc"]) or "arguments"
        problems.append(f"{where}: {_describe(item)}")
    return JctError(
        ErrorCode.INVALID_ARGUMENT,
        f"Invalid arguments for {tool}: " + "; ".join(problems),
        "Fix the named arguments to match the tool's input schema and call again.",
    )


def _describe(item: Any) -> str:
    message = str(item.get("msg", "invalid"))
    # Keep the caller's own (possibly huge) value out of the message.
    return message[:200]
