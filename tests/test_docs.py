"""Docs that cannot drift: every tool, setting, error code, resource, prompt and command appears in the README."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup

from server import cli
from server.config import Settings
from server.core.service import Core
from server.errors import ErrorCode, RpcCode
from server.identity import LocalIdentity
from server.mcp import JctServer, build_mcp

README = (Path(__file__).parent.parent / "README.md").read_text()


def test_every_setting_is_documented() -> None:
    for name in Settings.model_fields:
        assert f"JCT_{name.upper()}" in README, f"JCT_{name.upper()} is not in README.md"


@pytest.mark.parametrize("code", list(ErrorCode))
def test_every_error_code_is_documented(code: ErrorCode) -> None:
    assert f"`{code.value}`" in README


@pytest.mark.parametrize("code", list(RpcCode))
def test_every_json_rpc_error_code_is_documented(code: RpcCode) -> None:
    assert f"`{code.value}`" in README


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
    return "\n".join(re.findall(pattern, README, re.MULTILINE))


def test_the_cli_is_walked() -> None:
    assert {"jct serve", "jct db upgrade", "jct db copy", "jct token rotate", "jct review"} <= set(COMMANDS)
    assert "--stdio" in COMMANDS["jct serve"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_and_its_options_are_in_the_commands_table(command: str) -> None:
    rows = _rows(command)
    assert rows, f"{command} is not in the Commands table"
    for option in COMMANDS[command]:
        assert option in rows, f"{command} {option} is not in the Commands table"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[JctServer]:
    """The MCP server as `jct serve` builds it; listing what it registered never touches the database."""
    core = Core.build(Settings(_env_file=None, home=tmp_path))  # type: ignore[call-arg]
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
        assert f"| `{uri}` |" in README, f"{uri} is not in the README's resources table"


@pytest.mark.anyio
async def test_every_tool_is_in_the_tools_table(server: JctServer) -> None:
    tools = [tool.name for tool in await server.list_tools()]
    assert len(tools) == 33
    for name in tools:
        assert f"| `{name}` |" in README, f"{name} is not in the README's tools table"


@pytest.mark.anyio
async def test_every_prompt_is_documented(server: JctServer) -> None:
    prompts = [prompt.name for prompt in await server.list_prompts()]
    assert prompts
    for name in prompts:
        assert f"`/mcp__jct__{name}" in README, f"the prompt {name} is not in README.md"
