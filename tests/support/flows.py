"""Workflow files as tests write them: the head every one starts with, then its steps as the test spells them."""

from __future__ import annotations


def workflow_yaml(name: str, summary: str, required_input: str, steps: str) -> str:
    """A workflow file: `name`, `summary`, one required input, then `steps` (the YAML list items, verbatim)."""
    return f"name: {name}\nsummary: {summary}\ninputs:\n  - {{name: {required_input}, required: true}}\nsteps:\n{steps}"
