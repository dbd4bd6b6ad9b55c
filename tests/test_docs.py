"""Docs that cannot drift: every tool, resource, prompt, setting, error code, command, workflow field and
dashboard page is documented on its page in docs/, the README links every page, and no link is broken."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from markdown_it import MarkdownIt
from markdown_it.token import Token
from starlette.routing import Mount, Route
from typer.core import TyperGroup

from server import cli
from server.app import create_app
from server.config import Settings
from server.core.service import Core
from server.errors import ErrorCode, RpcCode
from server.identity import LocalIdentity
from server.mcp import JctServer, build_mcp

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text()


def page(name: str) -> str:
    return (DOCS / name).read_text()


def rows(text: str, first: str) -> str:
    """The table rows of `text` whose first cell starts with `first`."""
    return "\n".join(re.findall(rf"^\| {re.escape(first)}.*$", text, re.MULTILINE))


def test_every_setting_is_in_the_configuration_table() -> None:
    table = rows(page("configuration.md"), "`JCT_")
    for name in Settings.model_fields:
        assert f"| `JCT_{name.upper()}`" in table, f"JCT_{name.upper()} is not in docs/configuration.md"


@pytest.mark.parametrize("code", list(ErrorCode))
def test_every_error_code_is_documented(code: ErrorCode) -> None:
    assert f"`{code.value}`" in page("errors.md"), f"{code.value} is not in docs/errors.md"


@pytest.mark.parametrize("code", list(RpcCode))
def test_every_json_rpc_error_code_is_in_the_errors_table(code: RpcCode) -> None:
    assert f"| `{code.value}` |" in page("errors.md"), f"{code.value} is not in docs/errors.md"


def _commands(group: TyperGroup, prefix: str = "jct") -> dict[str, list[str]]:
    """Every command and subcommand of `group`, as typed (`jct db upgrade`), with its long options."""
    found: dict[str, list[str]] = {}
    for name, command in group.commands.items():
        path = f"{prefix} {name}"
        if isinstance(command, TyperGroup):
            found |= _commands(command, path)
        else:
            options = [o for param in command.params for o in param.opts if o.startswith("--")]
            found[path] = [option for option in options if option != "--help"]
    return found


COMMANDS = _commands(typer.main.get_group(cli.app))


def _rows(command: str) -> str:
    """The Commands table's rows for `command`."""
    pattern = rf"^\| `{re.escape(command)}[ `].*$"
    return "\n".join(re.findall(pattern, page("commands.md"), re.MULTILINE))


def test_the_cli_is_walked() -> None:
    assert {"jct serve", "jct db upgrade", "jct db copy", "jct token rotate", "jct review"} <= set(COMMANDS)
    assert "--stdio" in COMMANDS["jct serve"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_and_its_options_are_in_the_commands_table(command: str) -> None:
    found = _rows(command)
    assert found, f"{command} is not in the table of docs/commands.md"
    for option in COMMANDS[command]:
        assert option in found, f"{command} {option} is not in the table of docs/commands.md"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[JctServer]:
    """The MCP server as `jct serve` builds it; listing what it registered never touches the database."""
    core = Core.build(Settings(_env_file=None, home=tmp_path))
    try:
        yield build_mcp(core, LocalIdentity())
    finally:
        await core.db.dispose()


@pytest.mark.anyio
async def test_every_resource_and_resource_template_is_in_the_resources_table(server: JctServer) -> None:
    fixed = [str(resource.uri) for resource in await server.list_resources()]
    templates = [template.uri_template for template in await server.list_resource_templates()]
    assert len(fixed) == 2
    assert len(templates) == 9
    for uri in fixed + templates:
        assert f"| `{uri}` |" in page("resources.md"), f"{uri} is not in the table of docs/resources.md"


@pytest.mark.anyio
async def test_every_tool_is_in_the_tools_table(server: JctServer) -> None:
    tools = [tool.name for tool in await server.list_tools()]
    assert len(tools) == 33
    for name in tools:
        assert f"| `{name}` |" in page("tools.md"), f"{name} is not in the table of docs/tools.md"


@pytest.mark.anyio
async def test_every_prompt_is_documented(server: JctServer) -> None:
    prompts = [prompt.name for prompt in await server.list_prompts()]
    assert prompts
    for name in prompts:
        assert f"`/mcp__jct__{name}" in page("prompts.md"), f"the prompt {name} is not in docs/prompts.md"


def _fields(node: dict[str, Any], defs: dict[str, Any], prefix: str = "") -> Iterator[str]:
    """Every field a workflow file may hold, as a path (`steps[].outputs[].schema`), from the JSON Schema."""

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            node = defs[node["$ref"].rsplit("/", 1)[-1]]
        return node

    for name, value in resolve(node).get("properties", {}).items():
        path, value = prefix + name, resolve(value)
        yield path
        if "properties" in value:
            yield from _fields(value, defs, path + ".")
        if value.get("type") == "array" and "properties" in resolve(value["items"]):
            yield from _fields(value["items"], defs, path + "[].")


WORKFLOW_SCHEMA = json.loads((ROOT / "server" / "workflows" / "workflow.schema.json").read_text())
WORKFLOW_FIELDS = list(_fields(WORKFLOW_SCHEMA, WORKFLOW_SCHEMA["$defs"]))


def test_the_workflow_schema_is_walked() -> None:
    assert {"name", "inputs[].default", "steps[].outputs[].schema", "steps[].gate.max_rounds"} <= set(WORKFLOW_FIELDS)


@pytest.mark.parametrize("field", WORKFLOW_FIELDS)
def test_every_workflow_field_is_in_the_fields_table(field: str) -> None:
    assert f"| `{field}` |" in page("workflows.md"), f"the workflow field {field} is not in docs/workflows.md"


def _dashboard_paths(tmp_path: Path) -> list[str]:
    """Every route of the dashboard as a visitor types it (`/ui/tasks/{task_id}`), from the app itself."""
    app = create_app(Settings(_env_file=None, home=tmp_path))
    (ui,) = [route for route in app.routes if isinstance(route, Mount) and route.path == "/ui"]
    paths = [f"/ui{route.path}" for route in ui.routes if isinstance(route, Route)]
    return [path for path in paths if "{rest:path}" not in path]


def test_every_dashboard_page_and_form_is_in_its_tables(tmp_path: Path) -> None:
    paths = _dashboard_paths(tmp_path)
    assert {"/ui/", "/ui/tasks/{task_id}", "/ui/reviews/{pack_id}", "/ui/events"} <= set(paths)
    documented = rows(page("dashboard.md"), "`/ui/")
    for path in paths:
        assert f"| `{path}` |" in documented, f"the dashboard route {path} is not in docs/dashboard.md"


PAGES = sorted(DOCS.glob("*.md"))
MARKDOWN = [ROOT / "README.md", *PAGES, ROOT / "bench" / "README.md", ROOT / "deploy" / "README.md"]


def test_the_readme_links_every_docs_page() -> None:
    assert len(PAGES) >= 10
    for doc in PAGES:
        assert f"](docs/{doc.name})" in README, f"README.md does not link docs/{doc.name}"


def _tokens(path: Path) -> list[Token]:
    flat: list[Token] = []
    for token in MarkdownIt("commonmark").parse(path.read_text()):
        flat.append(token)
        flat.extend(token.children or [])
    return flat


def _anchors(path: Path) -> set[str]:
    """The heading anchors GitHub gives a Markdown file: lower case, punctuation dropped, spaces to hyphens."""
    tokens = _tokens(path)
    titles = [tokens[i + 1].content for i, token in enumerate(tokens) if token.type == "heading_open"]
    return {re.sub(r"[^\w\- ]", "", title.replace("`", "").lower()).replace(" ", "-") for title in titles}


@pytest.mark.parametrize("source", MARKDOWN, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(source: Path) -> None:
    for token in _tokens(source):
        target = token.attrs.get("href") or token.attrs.get("src")
        if not isinstance(target, str) or re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        resolved = (source.parent / file).resolve() if file else source
        assert resolved.exists(), f"{source.relative_to(ROOT)} links {target}, which does not exist"
        if anchor and resolved.suffix == ".md":
            assert anchor in _anchors(resolved), f"{source.relative_to(ROOT)} links {target}: no such heading"
