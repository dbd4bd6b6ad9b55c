"""Workflow files as tests write them: the head every one starts with, then its steps as the test spells them;
and the directory a server reads them from."""

from __future__ import annotations

from pathlib import Path


def workflow_yaml(name: str, summary: str, required_input: str, steps: str) -> str:
    """A workflow file: `name`, `summary`, one required input, then `steps` (the YAML list items, verbatim)."""
    return f"name: {name}\nsummary: {summary}\ninputs:\n  - {{name: {required_input}, required: true}}\nsteps:\n{steps}"


def flows_with(tmp_path: Path, **texts: str) -> Path:
    """The workflows directory tmp_path/flows, made, holding each of `texts` as <its keyword>.yaml."""
    flows = tmp_path / "flows"
    flows.mkdir()
    for name, text in texts.items():
        (flows / f"{name}.yaml").write_text(text)
    return flows
