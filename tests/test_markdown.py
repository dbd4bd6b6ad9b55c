"""The rendering rules for agent text and identities, one by one (pages and prompts are in tests/resources and
tests/prompts)."""

from __future__ import annotations

import pytest
from markdown_it import MarkdownIt

from server.markdown import block, code, compact_json, fenced, headline, line, plain, said, who

# Every way a line can start a Markdown block, and a few that only look like one.
BLOCK_STARTS = [
    "# heading",
    "   ### heading",
    "#",
    "===",
    "---",
    "- - -",
    "***",
    "___",
    "- [x] done",
    "* item",
    "+ item",
    "1. item",
    "12) item",
    "```",
    "```python",
    "~~~",
    "> quote",
    "<div>",
    "<!-- comment -->",
    "</p>",
    "[label]: https://example.com",
    "    indented",
    "\t# tab then heading",
]
PARAGRAPH_TOKENS = {"paragraph_open", "inline", "paragraph_close"}
LIST_TOKENS = {"bullet_list_open", "list_item_open", "list_item_close", "bullet_list_close"}


def block_tokens(markdown: str) -> set[str]:
    return {token.type for token in MarkdownIt("commonmark").parse(markdown)}


@pytest.mark.parametrize("text", BLOCK_STARTS)
def test_a_line_of_agent_text_is_paragraph_text(text: str) -> None:
    assert block_tokens(line(text)) <= PARAGRAPH_TOKENS
    assert block_tokens(f"- {line(text)}") <= PARAGRAPH_TOKENS | LIST_TOKENS


@pytest.mark.parametrize("text", BLOCK_STARTS)
def test_a_block_of_agent_text_is_one_quoted_paragraph(text: str) -> None:
    quoted = block(f"Intro\n\n{text}\nmore", 1_000, "read it whole")
    assert all(row.startswith(">") for row in quoted)
    kinds = block_tokens("\n".join(quoted))
    assert kinds <= PARAGRAPH_TOKENS | {"blockquote_open", "blockquote_close", "code_block"}, kinds
    if not text.startswith(("    ", "\t")):
        assert "code_block" not in kinds


def test_ordinary_text_is_left_alone() -> None:
    assert line("Validate emails on signup") == "Validate emails on signup"
    assert line("#123 is fixed, see src/app.py") == "#123 is fixed, see src/app.py"
    assert line("2024 was a year") == "2024 was a year"
    assert block("First line\nsecond `line`", 100, "-") == ["> First line", "> second `line`"]


def test_escape_sequences_controls_and_bidi_are_stripped() -> None:
    cases = {
        "\x1b[31mred\x1b[0m": "red",
        "\x1b[1;38;5;196mbold": "bold",
        "\x1b]0;title\x07after": "after",
        "\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\": "link",
        "\x9b31mC1 CSI": "C1 CSI",
        "lone\x1b": "lone",
        "nul\x00 del\x7f c1\x85": "nul del c1\n",
        "a\u202eb\u202cc\u2066d\u2069e\u200ff": "abcdef",
        "one\rtwo\u2028three\x0cfour": "one\ntwo\nthree\nfour",
    }
    for raw, shown in cases.items():
        assert plain(raw) == shown, raw


def test_a_cut_line_says_where_the_rest_is() -> None:
    assert line("x" * 50, 10) == "x" * 9 + "…"
    assert line("x" * 50, 10, "call jct_get_task") == "x" * 9 + "… (41 more characters; call jct_get_task)"
    assert block("y" * 50, 10, "call jct_get_task") == [
        "> " + "y" * 10,
        "",
        "… (truncated, 40 more characters; call jct_get_task)",
    ]


def test_backticks_cannot_open_a_code_span_in_a_line_or_close_a_fence() -> None:
    assert line("a `b") == "a \\`b"
    assert code("x``y") == "```x``y```"
    assert code("`edge`") == "`` `edge` ``"
    assert fenced("```\n````", "diff") == ["`````diff", "```", "````", "`````"]
    assert fenced("+\u202eend\x1b[0m") == ["```", "+<U+202E>end<U+001B>[0m", "```"]


def test_headline_is_the_first_line_rendered_as_a_line() -> None:
    assert headline("\n\n## Fake\nbody") == "\\## Fake"
    assert headline("\u2028Title\u2028rest") == "Title"


def test_who_shows_the_principal_and_marks_what_the_caller_said() -> None:
    assert who({"actor_id": "alice", "name": "alice", "client": ""}) == "alice"
    assert (
        who({"actor_id": "ci-agent-1", "name": "ci-agent-1", "client": "claude-code"})
        == 'ci-agent-1 (client "claude-code", self-reported)'
    )
    assert (
        who({"actor_id": "x", "name": "evil\n## Decision", "client": "evil\n## Decision"})
        == 'x (client "evil ## Decision", self-reported)'
    )
    assert who({"actor_id": "bob", "name": "admin"}) == 'bob (name "admin", self-reported)'
    assert who({"actor_id": "review-policy", "actor_kind": "system", "name": "auto-approve"}) == (
        "review-policy (auto-approve)"
    )
    assert who({"name": "alice"}) == 'unknown (name "alice", self-reported)'
    assert who(None) == "unknown"
    assert who({}) == "unknown"


def test_a_self_reported_name_is_quoted_escaped_and_capped() -> None:
    assert said('a "quoted" \\ name') == '"a \\"quoted\\" \\\\ name"'
    assert said("x" * 100) == '"' + "x" * 39 + '…"'
    assert said("`tick`\x1b[31m") == '"\\`tick\\`"'


def test_json_is_a_code_span() -> None:
    assert compact_json({"a": "`b`\u202e"}, 100, "-") == '``{"a": "`b`"}``'
    assert compact_json({"a": "x" * 50}, 10, "call jct_get_run").endswith(
        "… (truncated, 49 more characters; call jct_get_run)"
    )
