"""Markdown for a model's context window, shared by the resources and the prompts.

Two promises (DESIGN section 10, "What agents read about each other is true"):

- Every cut says where the rest is (`clip`, `fit`, the `pointer` arguments).
- Text one agent wrote cannot forge structure in what another reads. `plain` strips what a terminal or
  a bidi-aware viewer would act on; `line` (one line) and `block` (several, as a block quote) escape
  whatever would start a Markdown block; `code` and `fenced` pick a fence the text cannot close.
  The identity shown is the principal (`who`); names a caller chose are quoted and marked (`said`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from server import uris
from server.core.text import BIDI as _BIDI
from server.core.text import plain as plain

# How much of a self-reported name is shown.
SAID_CHARS = 40
# The pages' URIs (server/uris.py), under the names the renderers use.
QUEUE_URI = uris.QUEUE
PENDING_REVIEWS_URI = uris.PENDING_REVIEWS
task_uri = uris.task
issue_uri = uris.issue
run_uri = uris.run
evidence_uri = uris.evidence
artifact_uri = uris.artifact


# --- agent text ------------------------------------------------------------------------------

# In verbatim text, every control but tab and newline, the bidi controls, and the Unicode line breaks.
_SPELLED = re.compile(rf"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029{_BIDI}]")
# What starts a Markdown block at the beginning of a line (after any indentation); its first mark is
# backslash-escaped, which turns the line into paragraph text.
_BLOCK_START = re.compile(
    r"[ \t]*(?:"
    r"#{1,6}(?:[ \t]|$)"  # an ATX heading
    r"|`{3,}|~{3,}"  # a code fence
    r"|>"  # a block quote
    r"|[-+*](?:[ \t]|$)"  # a bullet (and "- - -", "* * *")
    r"|([-*_])[ \t]*(?:\1[ \t]*){2,}$"  # a thematic break
    r"|=+[ \t]*$|-+[ \t]*$"  # a setext underline
    r"|<[A-Za-z/!?]"  # an HTML block
    r"|\[.*\]:"  # a link reference definition
    r")"
)
# An ordered list item: up to nine digits, then "." or ")" (the mark that is escaped).
_ORDERED = re.compile(r"([ \t]*\d{1,9})[.)](?:[ \t]|$)")


def _unblock(text: str) -> str:
    """One line of agent text that starts no Markdown block."""
    if _BLOCK_START.match(text):
        at = len(text) - len(text.lstrip(" \t"))
        return f"{text[:at]}\\{text[at:]}"
    if match := _ORDERED.match(text):
        return f"{match.group(1)}\\{text[match.end(1) :]}"
    return text


def _cut_note(extra: int, pointer: str) -> str:
    return f"… (truncated, {extra:,} more characters; {pointer})"


def artifact_cut_note(artifact_id: str, shown: int, total: int) -> str:
    """Where the rest of an artifact shown only in part is read."""
    return (
        f"… (truncated: showing {shown:,} of {total:,} characters; call "
        f'jct_get_artifact(artifact_id="{artifact_id}", offset={shown}) for the rest)'
    )


def line(text: str | None, limit: int = 100, pointer: str | None = None) -> str:
    """Agent text as one line of a title or list entry: plain, whitespace folded, cut, and escaped so that it
    starts no block and opens no code span. A cut ends with "…", and with `pointer` if one is given."""
    folded = " ".join(plain(text).split())
    if len(folded) <= limit:
        return _unblock(folded.replace("`", "\\`"))
    shown = _unblock(folded[: limit - 1].rstrip().replace("`", "\\`")) + "…"
    return f"{shown} ({len(folded) - limit + 1:,} more characters; {pointer})" if pointer else shown


def headline(text: str | None, limit: int = 100) -> str:
    """The first non-blank line of agent text, as `line` renders it."""
    first = next((part for part in plain(text).split("\n") if part.strip()), "")
    return line(first, limit)


def block(text: str | None, limit: int, pointer: str) -> list[str]:
    """Agent text of any length as a block quote: each line marked "> " and escaped like `line` escapes its
    start, so that none of them is a heading, fence, list, quote, HTML block or break; cut at `limit`.

    Follow it with a blank line: a paragraph in a quote would otherwise run on into the next line."""
    body = plain(text).strip()
    note = None
    if len(body) > limit:
        note = _cut_note(len(body) - limit, pointer)
        body = body[:limit].rstrip()
    quoted = [f"> {_unblock(part.expandtabs(4))}".rstrip() for part in body.split("\n")]
    return [*quoted, "", note] if note else quoted


def said(value: object) -> str:
    """A name the caller chose, in double quotes: plain, one line, escaped, at most SAID_CHARS characters."""
    text = " ".join(plain(str(value)).split())
    if len(text) > SAID_CHARS:
        text = text[: SAID_CHARS - 1].rstrip() + "…"
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`") + '"'


def _longest_backticks(text: str) -> int:
    return max((len(run) for run in re.findall(r"`+", text)), default=0)


def code(text: str | None, limit: int = 200) -> str:
    """Agent text as an inline code span, fenced with more backticks than any run inside it; cut with "…"."""
    body = " ".join(plain(text).split())
    if len(body) > limit:
        body = body[: limit - 1].rstrip() + "…"
    if not body:
        return '""'
    fence = "`" * (_longest_backticks(body) + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def visible(text: str) -> str:
    """Text shown verbatim (a diff) with every control and bidi character spelled out as <U+XXXX>, so that a
    reviewer sees an escape sequence or a direction override instead of its effect."""
    return _SPELLED.sub(lambda found: f"<U+{ord(found.group()):04X}>", text.replace("\r\n", "\n"))


def fenced(text: str, info: str = "") -> list[str]:
    """A fenced code block whose fence is longer than any run of backticks in `text` (CommonMark lets a fence
    close only on a run at least as long), so the text cannot end it."""
    fence = "`" * max(3, _longest_backticks(text) + 1)
    return [f"{fence}{info}", *visible(text).split("\n"), fence]


def who(record: Mapping[str, Any] | None) -> str:
    """The actor of an executor or reviewer record. The identity is `actor_id` (the authenticated principal,
    or JCT's own id for an agent); `name`, `client` and a review's `reviewer_name` are what the caller said
    about itself, so they follow it in quotes, marked self-reported. A system actor's name is JCT's own."""
    if not record:
        return "unknown"
    actor_id = str(record.get("actor_id") or "")
    identity = line(actor_id, 64) or "unknown"
    name = str(record.get("name") or "")
    client = str(record.get("client") or "")
    if record.get("actor_kind") == "system":
        return f"{identity} ({line(name, SAID_CHARS)})" if name and name != actor_id else identity
    claims = [f"name {said(name)}"] if name and name not in (actor_id, client) else []
    if client:
        claims.append(f"client {said(client)}")
    return f"{identity} ({', '.join(claims)}, self-reported)" if claims else identity


# --- JCT's own text --------------------------------------------------------------------------


def clip(text: str, limit: int, pointer: str) -> str:
    """`text` if it fits in `limit` characters, else its start and a note naming where the rest is."""
    text = text.strip()
    if len(text) <= limit:
        return text
    return f"{text[:limit].rstrip()}\n{_cut_note(len(text) - limit, pointer)}"


def fit(lines: Sequence[str], budget: int, pointer: str, *, keep: str = "first") -> list[str]:
    """As many whole lines as fit in `budget` characters (the first or the last ones), then a note."""
    total = sum(len(item) + 1 for item in lines)
    if total <= budget:
        return list(lines)
    ordered = list(lines) if keep == "first" else list(reversed(lines))
    kept: list[str] = []
    used = 0
    for item in ordered:
        if used + len(item) + 1 > budget:
            break
        kept.append(item)
        used += len(item) + 1
    if not kept and ordered:  # one oversized entry: show its start rather than nothing
        kept.append(ordered[0][: max(budget - 1, 0)] + "…")
    dropped = len(lines) - len(kept)
    note = f"… ({dropped} more not shown; {pointer})" if dropped else f"… (cut short; {pointer})"
    return [*kept, note] if keep == "first" else [note, *reversed(kept)]


def stamp(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%SZ") if value is not None else "-"


def duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 90:
        return f"{seconds}s"
    if seconds < 5400:
        return f"{round(seconds / 60)}m"
    if seconds < 172_800:
        return f"{seconds // 3600}h {seconds % 3600 // 60}m"
    return f"{seconds // 86400}d {seconds % 86400 // 3600}h"


def compact_json(value: Any, limit: int, pointer: str) -> str:
    """Agent-supplied JSON as an inline code span, cut at `limit` with a note."""
    text = plain(json.dumps(value, default=str, sort_keys=True, ensure_ascii=False))
    if len(text) <= limit:
        return code(text)
    return f"{code(text[:limit])} {_cut_note(len(text) - limit, pointer)}"


def bullets(items: Sequence[str], each: int = 200) -> list[str]:
    return [f"- {line(item, each)}" for item in items]
