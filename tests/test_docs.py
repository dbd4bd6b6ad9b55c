"""Docs that cannot drift: every tool, setting, error code and command appears in the README."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.config import Settings
from server.errors import ErrorCode, RpcCode
from server.tools import TOOLSETS

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


def test_every_tool_is_in_the_tools_table() -> None:
    import ast
    import inspect

    for register in TOOLSETS.values():
        source = inspect.getsource(inspect.getmodule(register))  # type: ignore[arg-type]
        names = [
            node.value
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("jct_")
        ]
        assert names
        for name in names:
            assert f"| `{name}` |" in README, f"{name} is not in the README's tools table"
