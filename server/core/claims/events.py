"""Progress events with structure (DESIGN section 11, seed 001's log_decision / log_issue / log_milestone).

`jct_report_progress(kind, message, data)`: a `decision` carries {decision, rationale, alternatives} and is
read by every later task of its mission; a `blocker` with {"requires_human": true} flags its run (never approved
automatically, shown as its mission's blocker until a person reviews); a `milestone` counts in its mission's
progress. Every kind may carry other small data.
"""

from __future__ import annotations

import json
from typing import Any

from server.core.models import Limits, check_text
from server.core.text import storable
from server.errors import invalid
from server.vocab import EventKind

DATA_CHARS = 8_000
ALTERNATIVES = 20


def check_data(kind: EventKind, message: str, data: object) -> dict[str, Any] | None:
    """The event's data as stored: checked for its kind, storable, small. A decision without data is its message."""
    if data is None:
        return {"decision": message} if kind is EventKind.DECISION else None
    if not isinstance(data, dict):
        raise invalid("data must be an object.", 'Send e.g. {"decision": "...", "rationale": "..."}.')
    storable(data, "data")
    if len(json.dumps(data)) > DATA_CHARS:
        raise invalid(f"data is larger than {DATA_CHARS:,} characters.", "Keep it to what the next agent needs.")
    if kind is EventKind.DECISION:
        decision = data.get("decision", message)
        check_text(decision, "data.decision", Limits.CRITERION)
        if "rationale" in data:
            check_text(data["rationale"], "data.rationale", Limits.MESSAGE, required=False)
        alternatives = data.get("alternatives", [])
        if not isinstance(alternatives, list) or len(alternatives) > ALTERNATIVES:
            raise invalid(f"data.alternatives must be a list of at most {ALTERNATIVES} texts.", "Name the options.")
        for n, option in enumerate(alternatives):
            check_text(option, f"data.alternatives[{n}]", Limits.CRITERION)
        return {**data, "decision": decision}
    if "requires_human" in data and not isinstance(data["requires_human"], bool):
        raise invalid("data.requires_human must be true or false.", "Send true when only a person can lift it.")
    if data.get("requires_human") and kind is not EventKind.BLOCKER:
        raise invalid("requires_human belongs to a blocker.", 'Report it with kind="blocker".')
    return data


def needs_a_person(kind: EventKind, data: dict[str, Any] | None) -> bool:
    return kind is EventKind.BLOCKER and bool(data and data.get("requires_human"))
