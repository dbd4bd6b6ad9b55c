"""The tool-call log (JCT_LOG_TOOL_CALLS): one info line per call on the `jct.calls` logger, for an operator to
follow who did what and how long it took.

A line names the tool, the principal and agent that called it, the task, run, mission or evidence pack it was
about (ids only: a value that is not a UUID is logged as `invalid`, and a run_id's claim key is left out), the
outcome (`ok` or the error code) and the duration. Never an argument's text, a token or an artifact's content:
what a call carried stays in the database, behind the tools that read it. With JCT_LOG_FORMAT=json each field
is a key of the line's object.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from mcp_types import CallToolResult

from server.core.models import KEY_SEPARATOR
from server.errors import JctError
from server.identity import Identity

log = logging.getLogger("jct.calls")

# The ids a line may carry, read from the arguments, else from the result (a claim's task and run).
IDS = ("task_id", "run_id", "mission_id", "evidence_pack_id")


def caller(identity: Identity, context: Any) -> tuple[str, str]:
    """(principal, agent) of the current call; `-` where there is none (a call without a valid token)."""
    try:
        actor = identity.actor(context)
    except (JctError, LookupError, AttributeError, TypeError):
        return "-", "-"
    return actor.principal or actor.actor_id, actor.actor_id


def _id(value: object) -> str | None:
    """The id as a UUID; a run_id's claim key (after KEY_SEPARATOR) is a credential and is left out."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 80:
        return "invalid"
    try:
        return str(uuid.UUID(value.partition(KEY_SEPARATOR)[0]))
    except ValueError:
        return "invalid"


def ids(arguments: Mapping[str, Any] | None, result: object) -> dict[str, str]:
    """The ids the call was about: what it was given, and what a claim handed out."""
    given = arguments if isinstance(arguments, Mapping) else {}
    structured = result.structured_content if isinstance(result, CallToolResult) else None
    answered = structured if isinstance(structured, Mapping) else {}
    found: dict[str, str] = {}
    for key in IDS:
        value = _id(given.get(key)) or (_id(answered.get(key)) if key in ("task_id", "run_id") else None)
        if value is not None:
            found[key] = value
    return found


def logged(
    tool: str,
    who: tuple[str, str],
    arguments: Mapping[str, Any] | None,
    result: object,
    outcome: str,
    seconds: float,
) -> None:
    fields = {
        "tool": tool,
        "principal": who[0],
        "agent": who[1],
        **ids(arguments, result),
        "outcome": outcome,
        "duration_ms": round(seconds * 1000, 1),
    }
    log.info(" ".join(f"{key}={_plain(value)}" for key, value in fields.items()), extra=fields)


def _plain(value: object) -> str:
    """A field as one token of a text line: a principal or agent name with a space or a control character
    cannot forge another field."""
    text = str(value)
    return text if text and all(c.isprintable() and not c.isspace() for c in text) else repr(text)
