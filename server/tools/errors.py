"""The one place a tool failure becomes the result the model reads.

Could a smarter model have avoided it? Then it is a tool result with `isError: true` and
`{"success": false, "error": {"code", "message", "suggestion"}}`. Anything unexpected is
INTERNAL_ERROR with a correlation id that is also in the server log, and never a traceback.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import CallToolResult, TextContent
from pydantic import ValidationError

from server.errors import ErrorCode, JctError

log = logging.getLogger("jct.tools")


def error_result(error: JctError) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(error.to_dict()))], is_error=True)


def translate(tool: str, exc: ToolError) -> CallToolResult:
    cause = exc.__cause__
    if isinstance(cause, JctError):
        log.info("tool %s refused: %s %s", tool, cause.code, cause.message)
        return error_result(cause)
    if isinstance(cause, ValidationError):
        return error_result(_invalid_arguments(tool, cause))
    if not isinstance(exc, UnexpectedToolError):
        # The SDK's own anticipated errors: an unknown tool name, mostly.
        return error_result(JctError(ErrorCode.INVALID_ARGUMENT, str(exc), "Call tools/list for the available tools."))
    correlation = uuid.uuid4().hex[:12]
    log.error("tool %s crashed (correlation id %s)", tool, correlation, exc_info=cause or exc)
    return error_result(
        JctError(
            ErrorCode.INTERNAL_ERROR,
            f"JCT failed unexpectedly (correlation id {correlation}). Nothing you sent caused this.",
            "Retry once; if it fails again, report the correlation id to the JCT operator.",
        )
    )


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
