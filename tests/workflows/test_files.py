"""Workflow files: the shipped ones load, bad ones are refused with file, line and reason, never fatally."""

from __future__ import annotations

import logging
from pathlib import Path

import jsonschema
import pytest

from server.core.workflows.definitions import MAX_FILE_BYTES, Problem, Workflows, read, schema

GOOD = """\
name: tiny
summary: One step
inputs:
  - {name: thing, required: true}
steps:
  - id: only
    operation: docs
    objective: "Write about {thing}"
    outputs:
      - {name: page, type: doc}
"""


def problems(tmp_path: Path, text: str | bytes, name: str = "w.yaml") -> list[Problem]:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    result = read(path)
    assert isinstance(result, list), f"{name} was accepted"
    assert result
    for problem in result:
        assert problem.file == str(path)
    return result


def test_the_shipped_workflows_load_and_match_the_published_schema() -> None:
    catalog = Workflows(None).catalog()
    assert catalog.problems == ()
    assert {"bugfix", "feature", "docs"} <= set(catalog.workflows)
    for workflow in catalog.workflows.values():
        assert workflow.shipped
        assert len(workflow.version) == 12
        jsonschema.Draft202012Validator(schema()).validate(workflow.definition)
    feature = [step.id for step in catalog.workflows["feature"].steps]
    assert feature == ["spec", "implement", "review", "docs"]


def test_a_good_file_loads_with_a_version_that_follows_its_content(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(GOOD)
    first = read(path)
    assert not isinstance(first, list)
    assert first.name == "tiny"
    assert first.definition["steps"][0]["outputs"] == [{"name": "page", "type": "doc"}]
    (output,) = first.steps[0].outputs
    assert (output.name, output.type, output.required, output.schema_) == ("page", "doc", True, None)
    path.write_text(GOOD.replace("One step", "One small step"))
    second = read(path)
    assert not isinstance(second, list)
    assert second.version != first.version


def test_an_unknown_field_is_refused_at_its_line(tmp_path: Path) -> None:
    text = GOOD.replace("    operation: docs\n", "    operation: docs\n    colour: blue\n")
    [problem] = problems(tmp_path, text)
    assert problem.line == 8
    assert "unknown field 'steps.0.colour'" in problem.reason


def test_an_unknown_output_type_is_refused_at_its_line(tmp_path: Path) -> None:
    [problem] = problems(tmp_path, GOOD.replace("type: doc", "type: video"))
    assert problem.line == 10
    assert "'video' is not one of" in problem.reason


def test_a_schema_on_an_output_that_is_not_json_is_refused(tmp_path: Path) -> None:
    [problem] = problems(tmp_path, GOOD.replace("type: doc}", "type: doc, schema: {type: object}}"))
    assert problem.line == 10


def test_an_output_schema_that_is_no_json_schema_is_refused(tmp_path: Path) -> None:
    [problem] = problems(tmp_path, GOOD.replace("type: doc}", "type: json, schema: {type: 12}}"))
    assert problem.line == 10
    assert "not a JSON Schema" in problem.reason


def test_an_output_schema_with_a_key_that_is_not_text_is_refused_at_its_line(tmp_path: Path) -> None:
    """YAML reads `yes:` as true: a JSON Schema has text keys only, so the file is refused where the schema is,
    not loaded to fail when the workflow starts."""
    text = GOOD.replace("type: doc}", "type: json,\n         schema: {type: object, yes: 1}}")
    [problem] = problems(tmp_path, text)
    assert problem.line == 11
    assert problem.reason == "steps.0.outputs.0.schema: the key True is not text; quote it", problem


def test_a_cycle_in_depends_on_is_refused_naming_it(tmp_path: Path) -> None:
    text = GOOD + (
        "  - id: second\n    operation: docs\n    objective: again\n    depends_on: [third]\n"
        "  - id: third\n    operation: docs\n    objective: and again\n    depends_on: [second]\n"
    )
    [problem] = problems(tmp_path, text)
    assert "cycle: second -> third -> second" in problem.reason
    assert problem.line == 14


def test_an_unknown_dependency_and_a_placeholder_without_input_are_refused(tmp_path: Path) -> None:
    text = GOOD + "  - id: second\n    operation: docs\n    objective: 'Fix {bug}'\n    depends_on: [nowhere]\n"
    found = problems(tmp_path, text)
    reasons = {problem.line: problem.reason for problem in found}
    assert "{bug} in step 'second' names no input (inputs: thing)" in reasons[13]
    assert "unknown step 'nowhere'" in reasons[14]


def test_tags_that_construct_objects_are_refused(tmp_path: Path) -> None:
    [problem] = problems(tmp_path, GOOD.replace("summary: One step", "summary: !!python/object/apply:os.system [id]"))
    assert problem.line == 2
    assert "YAML tag" in problem.reason
    [custom] = problems(tmp_path, GOOD.replace("summary: One step", "summary: !thing x"), "custom.yaml")
    assert "'!thing'" in custom.reason


def test_anchors_and_aliases_are_refused(tmp_path: Path) -> None:
    laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + n)}: &{chr(98 + n)} [*{chr(97 + n)}, *{chr(97 + n)}, *{chr(97 + n)}]\n" for n in range(20)
    )
    [problem] = problems(tmp_path, laughs)
    assert "anchor or alias" in problem.reason


def test_a_file_over_a_megabyte_is_refused_unread(tmp_path: Path) -> None:
    [problem] = problems(tmp_path, GOOD + "#" * (5 * MAX_FILE_BYTES))
    assert "larger than" in problem.reason


def test_broken_yaml_deep_nesting_binary_and_empty_files_are_refused(tmp_path: Path) -> None:
    [broken] = problems(tmp_path, GOOD.replace("  - id: only", "  - id: [only"), "broken.yaml")
    assert "not valid YAML" in broken.reason
    assert broken.line > 1
    [deep] = problems(tmp_path, "[" * 100_000, "deep.yaml")
    assert "nested too deeply" in deep.reason or "not valid YAML" in deep.reason
    [binary] = problems(tmp_path, b"name: \xff\xfe", "binary.yaml")
    assert "UTF-8" in binary.reason
    [empty] = problems(tmp_path, "", "empty.yaml")
    assert "empty" in empty.reason
    [listing] = problems(tmp_path, "- 1\n- 2\n", "list.yaml")
    assert "is not of type 'object'" in listing.reason


def test_a_broken_file_is_logged_and_the_others_still_load(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "good.yaml").write_text(GOOD)
    (tmp_path / "bad.yaml").write_text(GOOD.replace("name: tiny", "name: bad\nextra: 1"))
    (tmp_path / "clone.yml").write_text(GOOD.replace("One step", "Another"))  # the same name twice
    (tmp_path / "bugfix.yaml").write_text(GOOD.replace("name: tiny", "name: bugfix"))  # replaces the shipped one
    workflows = Workflows(tmp_path)
    with caplog.at_level(logging.WARNING, logger="jct.workflows"):
        catalog = workflows.catalog()
    assert set(catalog.workflows) == {"bugfix", "docs", "feature", "tiny"}
    assert not catalog.workflows["bugfix"].shipped
    reasons = sorted(str(problem) for problem in catalog.problems)
    assert len(reasons) == 2
    assert any("bad.yaml:2: unknown field 'extra'" in reason for reason in reasons)
    assert any("already defined" in reason for reason in reasons)
    assert sum("workflow file refused" in record.message for record in caplog.records) == 2
    # Read again only when a file changes; a problem is logged once.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="jct.workflows"):
        assert workflows.catalog() is catalog
        (tmp_path / "bugfix.yaml").write_text(GOOD.replace("name: tiny", "name: bugfix").replace("One", "A"))
        changed = workflows.catalog()
    assert changed is not catalog
    assert changed.workflows["bugfix"].version != catalog.workflows["bugfix"].version
    assert not caplog.records


def test_a_missing_directory_is_no_workflows(tmp_path: Path) -> None:
    catalog = Workflows(tmp_path / "nowhere").catalog()
    assert set(catalog.workflows) == {"bugfix", "docs", "feature"}
