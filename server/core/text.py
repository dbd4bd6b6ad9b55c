"""Text from clients, as JCT keeps and shows it: what a terminal or a bidi-aware viewer would act on is
taken out (`plain`), and what no database can carry is refused (`storable`)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from server.errors import invalid

# ANSI/VT escape sequences, 7- and 8-bit: CSI (colours, cursor moves); OSC, DCS, SOS, PM and APC up to
# their terminator (or the end of the line); any other ESC sequence; a lone ESC.
_ESCAPES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
)
# Everything str.splitlines() breaks at, so that a line here is a line for every reader.
_BREAKS = re.compile(r"\r\n|[\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
# The Bidi_Control characters (marks, embeddings, overrides, isolates): they can show text in another
# order than a model reads it.
BIDI = r"\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# Controls other than tab and newline, C1 controls, and the bidi controls.
_INVISIBLE = re.compile(rf"[\x00-\x08\x0e-\x1f\x7f-\x9f{BIDI}]")


def plain(text: str | None) -> str:
    """Text without escape sequences, control characters or bidi controls; every line break a newline."""
    text = _ESCAPES.sub("", text or "")
    return _INVISIBLE.sub("", _BREAKS.sub("\n", text))


def one_line(text: str | None, limit: int) -> str:
    """`plain` text with its whitespace folded to single spaces, at most `limit` characters."""
    return " ".join(plain(text).split())[:limit]


# What no database JCT runs on can carry, or carries the same: NUL (PostgreSQL text refuses it) and UTF-16
# surrogates on their own (not valid Unicode; PostgreSQL refuses them, SQLite stores mangled bytes).
_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")
# Text a client sends: control characters other than tab, newline and carriage return, and C1 controls
# (8-bit escape sequences among them), are refused outright.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
MAX_DEPTH = 32


def has_control(text: str) -> bool:
    return _CONTROL.search(text) is not None


def storable(value: Any, field: str, depth: int = 0) -> None:
    """Refuse, naming the place, any value inside `value` that no database can carry as JSON: NaN or an
    infinity, a string with NUL or a lone surrogate, in a value or a key. Also refuses nesting deeper than
    MAX_DEPTH. Raises JctError(INVALID_ARGUMENT); returns None when every part can be stored."""
    if depth > MAX_DEPTH:
        raise invalid(f"{field} is nested more than {MAX_DEPTH} levels deep.", f"Flatten {field}.")
    if isinstance(value, float) and not math.isfinite(value):
        raise invalid(
            f"{field} is {value}, which JSON cannot carry.", f"Send {field} as a finite number, or leave it out."
        )
    if isinstance(value, str):
        if _UNSTORABLE.search(value):
            raise invalid(
                f"{field} contains NUL or an unpaired UTF-16 surrogate.", f"Send {field} as valid Unicode text."
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            storable(key, f"{field} (a key)", depth + 1)
            storable(item, f"{field}.{key}" if len(field) < 200 else field, depth + 1)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            storable(item, f"{field}[{index}]" if len(field) < 200 else field, depth + 1)


def parse_json(text: str, field: str) -> Any:
    """JSON as JCT stores it: NaN and infinities (which Python's json accepts) are refused, like NUL and lone
    surrogates inside strings."""

    def refuse(constant: str) -> Any:
        raise invalid(f"{field} contains {constant}, which JSON cannot carry.", f"Send {field} with finite numbers.")

    try:
        parsed = json.loads(text, parse_constant=refuse)
    except json.JSONDecodeError as exc:
        raise invalid(
            f"{field} is not valid JSON ({exc.msg} at position {exc.pos}).", f"Send {field} as JSON."
        ) from None
    storable(parsed, field)
    return parsed
