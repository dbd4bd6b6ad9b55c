"""Workflow definitions (DESIGN section 12): YAML files checked against a published JSON Schema.

JCT ships some (server/workflows/*.yaml); a user adds more in JCT_WORKFLOWS_DIR (a file there with a shipped
workflow's name replaces it). Each is versioned by its content, so a mission keeps the version it started
with: its tasks carry their step (outputs, gate) and the mission its {name, version, inputs}.

A file is refused, with its path, a line and the reason, when it is too large, is not plain YAML (a tag
that would construct an object, an anchor or alias, several documents), breaks the schema (an unknown
field, an unknown output type), holds what JCT cannot store (an output schema's key that YAML reads as a
boolean or a number), or means nothing runnable (a cycle in depends_on, an unknown step, a
{placeholder} no input fills). A refused file is logged and left out; the others still load.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from pydantic import ConfigDict, ValidationError
from pydantic_core import ErrorDetails

from server.core.briefings.paths import check_touches
from server.core.missions import dag
from server.core.models import check_text
from server.core.results import WorkflowInput
from server.db.records import Frozen, Gate, StepOutput
from server.errors import ErrorCode, JctError

log = logging.getLogger("jct.workflows")

SHIPPED_DIR = Path(__file__).resolve().parents[2] / "workflows"
SCHEMA_FILE = SHIPPED_DIR / "workflow.schema.json"
MAX_FILE_BYTES = 1024 * 1024
SUFFIXES = (".yaml", ".yml")
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# The only tags a workflow file may hold: plain data. Any other (`!!python/object`, `!custom`) is refused.
_PLAIN = "tag:yaml.org,2002:"
ALLOWED_TAGS = frozenset(_PLAIN + kind for kind in ("str", "int", "float", "bool", "null", "map", "seq"))
TIMESTAMP = _PLAIN + "timestamp"  # an unquoted date: read as the text it is

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    """Why a file is refused: where (its path and a 1-based line) and what is wrong."""

    file: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


class Output(StepOutput):
    """An output a step declares, as the file says it (a task keeps it without `description`)."""

    description: str | None = None


class WorkflowStep(Frozen):
    """A step of a workflow file: one task of the mission a start makes. None: the start's own value."""

    id: str
    operation: str
    objective: str
    depends_on: tuple[str, ...] = ()
    instructions: str = ""
    acceptance_criteria: tuple[str, ...] = ()
    priority: str | None = None
    time_budget_seconds: int = 3600
    target_path: str | None = None
    touches: tuple[str, ...] | None = None  # None: its target_path (DESIGN section 16)
    outputs: tuple[Output, ...] = ()
    gate: Gate = Gate()
    doctrine: tuple[str, ...] = ()


@dataclass(frozen=True)
class Workflow:
    version: str  # the first 12 hex digits of the file's sha256
    source: str  # the file it came from
    shipped: bool
    definition: dict[str, Any]  # the file as read (what the schema checked)
    typed: _Typed

    @classmethod
    def of(cls, definition: dict[str, Any], version: str, source: str, shipped: bool) -> Workflow:
        """A file that passed `check`, typed once (pydantic.ValidationError: what the schema let through and a
        type does not, such as an output schema's key that is not text)."""
        return cls(version=version, source=source, shipped=shipped, definition=definition, typed=_Typed.of(definition))

    @property
    def name(self) -> str:
        return self.typed.name

    @property
    def summary(self) -> str:
        return self.typed.summary

    @property
    def inputs(self) -> tuple[WorkflowInput, ...]:
        """Each input the caller gives; `{name}` in a step's text is replaced by its value (`default`, None when the
        file gives none: an input left out is then empty)."""
        return self.typed.inputs

    @property
    def steps(self) -> tuple[WorkflowStep, ...]:
        return self.typed.steps


class _Typed(Frozen):
    """The parts of a workflow file JCT reads by attribute."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str
    summary: str
    inputs: tuple[WorkflowInput, ...] = ()
    steps: tuple[WorkflowStep, ...]


# A workflow's name is at most this long (its schema's pattern).
NAME_LIMIT = 64


@dataclass(frozen=True)
class Catalog:
    workflows: dict[str, Workflow]
    problems: tuple[Problem, ...] = ()

    def get(self, name: object) -> Workflow:
        # A name no file can carry (NUL, a control character, a newline) is a bad argument, not a miss.
        check_text(name, "name", NAME_LIMIT, single_line=True)
        if isinstance(name, str) and name in self.workflows:
            return self.workflows[name]
        known = ", ".join(sorted(self.workflows)) or "none"
        raise JctError(
            ErrorCode.WORKFLOW_NOT_FOUND,
            f"There is no workflow named {str(name)[:64]!r}.",
            f"Use jct_list_workflows; the workflows are: {known}.",
        )


@cache
def schema() -> dict[str, Any]:
    """The published JSON Schema of a workflow file (`jct workflow schema`)."""
    loaded: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())
    return loaded


@cache
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema())


# --- reading one file -----------------------------------------------------------------------------


class _Refused(Exception):
    def __init__(self, line: int, reason: str) -> None:
        super().__init__(reason)
        self.line = line
        self.reason = reason


def read(path: Path, *, shipped: bool = False) -> Workflow | list[Problem]:
    """One workflow file: the workflow, or every problem found (each with its line)."""
    name = str(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        return [Problem(name, 1, f"cannot be read: {exc.strerror or exc}")]
    if len(raw) > MAX_FILE_BYTES:
        return [Problem(name, 1, f"is larger than {MAX_FILE_BYTES} bytes; a workflow file is a few kilobytes")]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [Problem(name, raw[: exc.start].count(b"\n") + 1, "is not UTF-8 text")]
    try:
        data, lines = parse(text)
    except _Refused as refused:
        return [Problem(name, refused.line, refused.reason)]
    problems = [Problem(name, line, reason) for line, reason in check(data, lines)]
    if problems:
        return problems
    assert isinstance(data, dict)
    try:
        return Workflow.of(data, hashlib.sha256(raw).hexdigest()[:12], name, shipped)
    except ValidationError as exc:
        return [Problem(name, _line_of(lines, error["loc"]), _typing_problem(error)) for error in exc.errors()]


def _typing_problem(error: ErrorDetails) -> str:
    """What `Workflow.of` refused, said for the file's author."""
    *where, last = error["loc"]
    if last == "[key]":  # YAML reads `yes:`, `on:` and `12:` as a boolean or a number
        return f"{'.'.join(map(str, where[:-1]))}: the key {error['input']!r} is not text; quote it"
    return f"{'.'.join(map(str, error['loc']))}: {error['msg']}"


def parse(text: str) -> tuple[Any, dict[Path_, int]]:
    """Plain YAML data, and the 1-based line of every mapping key and sequence item, by its path."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise _Refused(mark.line + 1 if mark else 1, f"is not valid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise _Refused(1, f"is not valid YAML: {exc}") from None
    except RecursionError:
        raise _Refused(1, "is nested too deeply") from None
    if node is None:
        raise _Refused(1, "is empty")
    lines: dict[Path_, int] = {}
    try:
        _walk(node, (), lines, set())
    except RecursionError:
        raise _Refused(1, "is nested too deeply") from None
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_document(node), lines
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise _Refused(mark.line + 1 if mark else 1, f"holds a value JCT cannot read: {exc.problem}") from None
    finally:
        loader.dispose()


def _walk(node: yaml.Node, path: Path_, lines: dict[Path_, int], seen: set[int]) -> None:
    line = node.start_mark.line + 1
    if id(node) in seen:
        raise _Refused(line, "uses a YAML anchor or alias; write the value out where it is used")
    seen.add(id(node))
    lines.setdefault(path, line)
    if node.tag == TIMESTAMP:
        node.tag = _PLAIN + "str"
    if node.tag not in ALLOWED_TAGS:
        raise _Refused(line, f"uses the YAML tag {node.tag!r}; a workflow file holds plain data only")
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            _walk(key, (*path, "<key>"), lines, seen)
            name = key.value if isinstance(key, yaml.ScalarNode) else "<key>"
            lines[(*path, name)] = key.start_mark.line + 1
            _walk(value, (*path, name), lines, seen)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*path, index), lines, seen)


# --- what the schema cannot say ---------------------------------------------------------------------


def check(data: Any, lines: Mapping[Path_, int]) -> list[tuple[int, str]]:
    """Every problem of a parsed file, in line order: the schema's first, then the meaning's."""

    line_of = partial(_line_of, lines)
    found: list[tuple[int, str]] = []
    for error in _validator().iter_errors(data):
        path = tuple(error.absolute_path)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            allowed = set(error.schema.get("properties", {}))
            for extra in sorted(str(k) for k in error.instance if k not in allowed):
                where = ".".join(str(p) for p in (*path, extra))
                reason = f"unknown field {where!r} (allowed: {', '.join(sorted(allowed))})"
                found.append((line_of((*path, extra)), reason))
            continue
        where = ".".join(str(p) for p in path) or "the file"
        found.append((line_of(path), f"{where}: {error.message}"))
    if not found:
        found = list(_meaning(data, line_of))
    return sorted(found)


def _line_of(lines: Mapping[Path_, int], path: Sequence[Any]) -> int:
    """The line of `path`, or of the nearest part of the file that holds it."""
    where = tuple(path)
    while where and where not in lines:
        where = where[:-1]
    return lines.get(where, 1)


def _meaning(data: dict[str, Any], line_of: Any) -> Iterator[tuple[int, str]]:
    inputs = {item["name"] for item in data.get("inputs", [])}
    seen_inputs: set[str] = set()
    for n, item in enumerate(data.get("inputs", [])):
        if item["name"] in seen_inputs:
            yield line_of(("inputs", n, "name")), f"input {item['name']!r} is declared twice"
        seen_inputs.add(item["name"])
    steps = data["steps"]
    ids: dict[str, int] = {}
    for n, step in enumerate(steps):
        if step["id"] in ids:
            yield line_of(("steps", n, "id")), f"step id {step['id']!r} is used twice"
        ids.setdefault(step["id"], n)
    for n, step in enumerate(steps):
        for d, dep in enumerate(step.get("depends_on", [])):
            if dep not in ids:
                yield line_of(("steps", n, "depends_on", d)), f"step {step['id']!r} depends on unknown step {dep!r}"
            elif dep == step["id"]:
                yield line_of(("steps", n, "depends_on", d)), f"step {step['id']!r} depends on itself"
        for path, text in _texts(step):
            for placeholder in PLACEHOLDER.findall(text):
                if placeholder not in inputs:
                    yield (
                        line_of(("steps", n, *path)),
                        f"{{{placeholder}}} in step {step['id']!r} names no input (inputs: "
                        f"{', '.join(sorted(inputs)) or 'none'})",
                    )
        try:
            check_touches(step.get("touches", []))
        except JctError as bad:
            yield line_of(("steps", n, "touches")), f"step {step['id']!r}: {bad.message}"
        names: set[str] = set()
        for o, output in enumerate(step.get("outputs", [])):
            if output["name"] in names:
                yield line_of(("steps", n, "outputs", o, "name")), f"output {output['name']!r} is declared twice"
            names.add(output["name"])
            if "schema" in output:
                try:
                    jsonschema.Draft202012Validator.check_schema(output["schema"])
                except jsonschema.SchemaError as exc:
                    yield line_of(("steps", n, "outputs", o, "schema")), f"schema is not a JSON Schema: {exc.message}"
    cycle = dag.cycle({step["id"]: [d for d in step.get("depends_on", []) if d in ids] for step in steps})
    if cycle:
        yield line_of(("steps", ids[cycle[0]], "depends_on")), f"depends_on has a cycle: {' -> '.join(cycle)}"


def _texts(step: Mapping[str, Any]) -> Iterator[tuple[Path_, str]]:
    for key in ("objective", "instructions"):
        if key in step:
            yield (key,), step[key]
    for n, criterion in enumerate(step.get("acceptance_criteria", [])):
        yield ("acceptance_criteria", n), criterion


def levels(steps: Sequence[WorkflowStep]) -> dict[str, int]:
    """Each step's topological level: 0 without dependencies, else one past its deepest dependency."""
    by_id = {step.id: step for step in steps}
    level: dict[str, int] = {}

    def of(step_id: str) -> int:
        if step_id not in level:
            level[step_id] = 1 + max((of(dep) for dep in by_id[step_id].depends_on), default=-1)
        return level[step_id]

    for step in steps:
        of(step.id)
    return level


def fill(text: str, values: Mapping[str, str]) -> str:
    """A step's text with every {input} replaced by its value."""
    return PLACEHOLDER.sub(lambda match: values.get(match.group(1), match.group(0)), text)


# --- the catalog ----------------------------------------------------------------------------------------


@dataclass(eq=False)
class Workflows:
    """The workflows in force: the shipped ones and the user's directory, read again when a file changes.
    A refused file is logged once per version and left out."""

    user_dir: Path | None
    shipped_dir: Path = SHIPPED_DIR
    _stamp: tuple[Any, ...] | None = field(default=None, init=False, repr=False)
    _catalog: Catalog | None = field(default=None, init=False, repr=False)
    _logged: set[str] = field(default_factory=set, init=False, repr=False)

    def catalog(self) -> Catalog:
        files = [(path, True) for path in _files(self.shipped_dir)] + [
            (path, False) for path in (_files(self.user_dir) if self.user_dir is not None else [])
        ]
        stamp = tuple((str(path), *_stat(path)) for path, _ in files)
        if self._catalog is None or stamp != self._stamp:
            self._catalog = self._load(files)
            self._stamp = stamp
        return self._catalog

    def _load(self, files: Sequence[tuple[Path, bool]]) -> Catalog:
        found: dict[str, Workflow] = {}
        problems: list[Problem] = []
        for path, shipped in files:
            try:
                result = read(path, shipped=shipped)
            except Exception as exc:  # a file must never stop the server: report it and go on
                log.exception("reading workflow file %s failed", path)
                result = [Problem(str(path), 1, f"could not be read ({type(exc).__name__})")]
            if isinstance(result, list):
                problems.extend(result)
                continue
            earlier = found.get(result.name)
            if earlier is not None and earlier.shipped == result.shipped:
                problems.append(
                    Problem(result.source, 1, f"workflow {result.name!r} is already defined in {earlier.source}")
                )
                continue
            found[result.name] = result
        for problem in problems:
            if str(problem) not in self._logged:
                self._logged.add(str(problem))
                log.warning("workflow file refused: %s", problem)
        return Catalog(dict(sorted(found.items())), tuple(problems))


def _files(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if p.suffix in SUFFIXES and p.is_file())
    except OSError:
        return []


def _stat(path: Path) -> tuple[int, int]:
    try:
        info = path.stat()
    except OSError:
        return (0, 0)
    return (info.st_mtime_ns, info.st_size)
