"""The deterministic prover: turns a finished run into an evidence pack, check by check (DESIGN section 8).

Pure functions over plain data: no database, no I/O. The same input always gives the same verdict.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import jsonschema

from server.core.review.logs import diff_files, parse_test_summary
from server.errors import invalid

CriterionStatus = Literal["satisfied", "unsatisfied", "unverified"]
Verdict = Literal["pass", "fail", "partial"]

PROVER_ID = "jct-prover-1"
MAX_CLAIMS = 100


@dataclass(frozen=True)
class ProverArtifact:
    id: str
    type: str
    title: str
    content: str | None


@dataclass(frozen=True)
class CriterionClaim:
    index: int
    status: Literal["satisfied", "unsatisfied"]
    evidence: tuple[str, ...]
    note: str | None = None


@dataclass(frozen=True)
class DeclaredOutput:
    """An output a workflow step declares (DESIGN section 12): the artifact titled `name` of type `type`;
    `json`: an artifact of any type whose content is JSON, matching `schema` when there is one."""

    name: str
    type: str
    required: bool = True
    schema: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ProverInput:
    operation: str
    success: bool
    target_path: str
    time_budget_seconds: int
    duration_seconds: float
    acceptance_criteria: tuple[str, ...]
    claims: tuple[CriterionClaim, ...]
    artifacts: tuple[ProverArtifact, ...]
    outputs: tuple[DeclaredOutput, ...] = ()
    # A verifiable task (JCT reads its repository, server/core/git/verified.py): the files JCT found changed (None
    # when it could not read them, `change_note` says why) and the commits it verified. Pasted diffs then
    # decide nothing.
    verifiable: bool = False
    files_changed: tuple[str, ...] | None = None
    change_note: str = ""
    verified_commits: tuple[str, ...] = ()


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool | None
    detail: str


@dataclass(frozen=True)
class CriterionResult:
    criterion: str
    status: CriterionStatus
    evidence: tuple[str, ...]
    note: str | None


@dataclass(frozen=True)
class Evidence:
    verdict: Verdict
    verdict_reason: str
    checks: tuple[Check, ...]
    criteria_results: tuple[CriterionResult, ...]
    evidence_collected: tuple[dict[str, str], ...]
    evidence_missing: tuple[str, ...]
    unexpected_files: tuple[str, ...]


# Operations a verified commit is evidence for.
COMMIT_PROVES = frozenset({"code_change", "docs"})
REQUIRED_EVIDENCE: dict[str, tuple[str, ...]] = {
    "code_change": ("code_patch", "commit"),
    "docs": ("doc", "code_patch"),
    "analysis": ("report",),
    "ops": ("log", "report"),
}
# Checks whose failure fails the run outright; any other failed check only makes it partial.
FAILING_CHECKS = frozenset({"run_succeeded", "scope", "tests", "criteria", "outputs"})
# Checks the agent can put right by working again (JCT_AUTO_REWORK): a verdict held back by these alone sends the
# task back. A failing test log is not among them (a reproduce step's log fails by design), nor an overrun budget.
FIXABLE_CHECKS = frozenset({"required_evidence", "criteria", "scope", "outputs"})
JSON_OUTPUT = "json"


def prove(inp: ProverInput) -> Evidence:
    """Run the checks over a finished run (six, and `outputs` for a workflow step) and decide its verdict."""
    evidence_missing: list[str] = []
    required = _check_required_evidence(inp, evidence_missing)
    results = _criteria_results(inp, evidence_missing)
    scope, unexpected = _check_scope(inp)
    checks: tuple[Check, ...] = (
        Check("run_succeeded", inp.success, "agent reported success" if inp.success else "agent reported failure"),
        required,
        _check_criteria(results),
        scope,
        _check_tests(inp.artifacts),
        _check_time_budget(inp),
    )
    if inp.outputs:
        checks = (*checks, _check_outputs(inp, evidence_missing))
    verdict, reason = _decide(checks, results)
    return Evidence(
        verdict=verdict,
        verdict_reason=reason,
        checks=checks,
        criteria_results=results,
        evidence_collected=tuple({"artifact_id": a.id, "type": a.type, "title": a.title} for a in inp.artifacts),
        evidence_missing=tuple(evidence_missing),
        unexpected_files=unexpected,
    )


def _check_required_evidence(inp: ProverInput, missing: list[str]) -> Check:
    wanted = REQUIRED_EVIDENCE.get(inp.operation)
    if inp.verified_commits and inp.operation in COMMIT_PROVES:
        return Check("required_evidence", True, f"verified commit {inp.verified_commits[-1][:12]}")
    if wanted is None:
        return Check("required_evidence", None, f"no evidence rule for operation '{inp.operation}'")
    found = [a for a in inp.artifacts if a.type in wanted]
    if found:
        return Check("required_evidence", True, f"{found[0].type} artifact '{found[0].title}'")
    item = f"a {' or '.join(wanted)} artifact"
    missing.append(item)
    return Check("required_evidence", False, f"missing {item}")


def _check_outputs(inp: ProverInput, missing: list[str]) -> Check:
    """Every required output was reported (titled with its name, of its type); a JSON output parses and matches
    its schema. The latest artifact of a name counts."""
    absent: list[str] = []
    wrong: list[str] = []
    for output in inp.outputs:
        found = [a for a in inp.artifacts if a.title == output.name and (output.type in (JSON_OUTPUT, a.type))]
        if not found:
            if output.required:
                absent.append(f"{output.name} ({output.type})")
            continue
        if output.type == JSON_OUTPUT:
            problem = _json_problem(found[-1], output.schema)
            if problem is not None:
                wrong.append(f"{output.name}: {problem}")
    missing.extend(f"output {item}" for item in absent)
    if absent or wrong:
        parts = ([f"missing {', '.join(absent)}"] if absent else []) + (
            [f"invalid {'; '.join(wrong)}"] if wrong else []
        )
        return Check("outputs", False, "; ".join(parts))
    return Check("outputs", True, f"{len(inp.outputs)} declared output(s) delivered")


def _json_problem(artifact: ProverArtifact, schema: Mapping[str, Any] | None) -> str | None:
    if artifact.content is None:
        return "its content is not stored inline, so it cannot be read"
    try:
        value = json.loads(artifact.content)
    except ValueError as exc:
        return f"not JSON ({exc.msg} at line {exc.lineno})" if isinstance(exc, json.JSONDecodeError) else "not JSON"
    if schema is None:
        return None
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(value))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{error.message[:200]}" + (f" at /{where}" if where else "")


def _criteria_results(inp: ProverInput, missing: list[str]) -> tuple[CriterionResult, ...]:
    run_ids = {a.id for a in inp.artifacts}
    claims = {c.index: c for c in inp.claims}
    results: list[CriterionResult] = []
    for index, criterion in enumerate(inp.acceptance_criteria):
        claim = claims.get(index)
        if claim is None:
            results.append(CriterionResult(criterion, "unverified", (), None))
            missing.append(f"evidence for criterion {index}: {criterion}")
            continue
        # A citation only counts when the artifact was reported on this run; ids from elsewhere prove nothing.
        cited = tuple(dict.fromkeys(e for e in claim.evidence if e in run_ids))
        status: CriterionStatus = claim.status
        if status == "satisfied" and not cited:
            status = "unverified"
            missing.append(f"evidence for criterion {index}: {criterion}")
        results.append(CriterionResult(criterion, status, cited, claim.note))
    return tuple(results)


def _check_criteria(results: Sequence[CriterionResult]) -> Check:
    total = len(results)
    if total == 0:
        return Check("criteria", True, "no acceptance criteria to check")
    unsatisfied = sum(r.status == "unsatisfied" for r in results)
    unverified = sum(r.status == "unverified" for r in results)
    if unsatisfied:
        return Check("criteria", False, f"{unsatisfied} of {total} unsatisfied")
    if unverified:
        return Check("criteria", None, f"{unverified} of {total} unverified")
    return Check("criteria", True, f"{total}/{total} satisfied")


def _normalise_path(path: str) -> str:
    path = path.strip()
    while path.startswith("./"):
        path = path[2:]
    path = path.lstrip("/").rstrip("/")
    return "" if path in ("", ".") else posixpath.normpath(path)


def _is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def _check_scope(inp: ProverInput) -> tuple[Check, tuple[str, ...]]:
    target = _normalise_path(inp.target_path)
    if not target:
        return Check("scope", None, "no target_path set; the whole repo is in scope"), ()
    if inp.verifiable:
        # JCT read the change in the repository itself: a pasted diff decides nothing.
        if inp.files_changed is None:
            return Check("scope", None, inp.change_note or "no verified change to read; report a commit"), ()
        files = [_normalise_path(f) for f in inp.files_changed]
        if not files:
            return Check("scope", True, "JCT read no changed file in the repository"), ()
    else:
        files = [
            _normalise_path(f)
            for a in inp.artifacts
            if a.type == "code_patch" and a.content
            for f in diff_files(a.content)
        ]
        if not files:
            return Check("scope", None, "no inline code_patch diffs to check"), ()
    read = " (read by JCT in the repository)" if inp.verifiable else ""
    outside = tuple(dict.fromkeys(f for f in files if not _is_under(f, target)))
    if not outside:
        return Check("scope", True, f"{_files(len(set(files)))} changed{read}, all under {target}/"), ()
    shown = ", ".join(outside[:5]) + (f" and {len(outside) - 5} more" if len(outside) > 5 else "")
    return Check("scope", False, f"{_files(len(outside))} outside {target}/{read}: {shown}"), outside


def _files(count: int) -> str:
    return f"{count} file" if count == 1 else f"{count} files"


def _check_tests(artifacts: Sequence[ProverArtifact]) -> Check:
    logs = [a for a in artifacts if a.type == "log" and a.content]
    if not logs:
        return Check("tests", None, "no log artifact with content")
    summaries = [s for s in (parse_test_summary(a.content or "") for a in logs) if s is not None]
    if not summaries:
        return Check("tests", None, f"no recognisable test summary in {len(logs)} log artifact(s)")
    passed = sum(p for p, _ in summaries)
    failed = sum(f for _, f in summaries)
    return Check("tests", failed == 0, f"{failed} failed, {passed} passed")


def _check_time_budget(inp: ProverInput) -> Check:
    took, budget = inp.duration_seconds, inp.time_budget_seconds
    if took <= budget:
        return Check("time_budget", True, f"took {took:.1f}s of a {budget}s budget")
    return Check("time_budget", False, f"took {took:.1f}s, over the {budget}s budget")


def _decide(checks: Sequence[Check], results: Sequence[CriterionResult]) -> tuple[Verdict, str]:
    failing = [c for c in checks if c.passed is False and c.name in FAILING_CHECKS]
    if failing:
        return "fail", "fail: " + ", ".join(f"{c.name} ({c.detail})" for c in failing)
    # The criteria check is skipped (None) exactly when some criteria are unverified, which still blocks a pass.
    lacking = [c for c in checks if c.passed is False or (c.name == "criteria" and c.passed is None)]
    if lacking:
        return "partial", "partial: " + ", ".join(f"{c.name} ({c.detail})" for c in lacking)
    skipped = [c.name for c in checks if c.passed is None]
    checked = f"all checks passed ({', '.join(skipped)} skipped)" if skipped else "all checks passed"
    total = len(results)
    criteria = f"{total}/{total} criteria satisfied" if total else "there are no acceptance criteria"
    return "pass", f"pass: {checked} and {criteria}"


def auto_approves(
    verdict: str, *, success: bool, policy: bool, verdicts: Collection[str], requires_human: bool, review: str
) -> bool:
    """The review policy (JCT_REVIEW_AUTO_APPROVE): a run's work is approved with no reviewer when the run
    succeeded, the policy is on and names its verdict (JCT_REVIEW_AUTO_APPROVE_VERDICTS), the run reported no
    blocker only a person can lift, and its workflow step's gate leaves the decision to the policy (`review:
    auto`, server/core/review/gates.py)."""
    return success and policy and verdict in verdicts and not requires_human and review == "auto"


def to_fix(evidence: Evidence) -> tuple[Check, ...]:
    """The checks that keep the verdict from `pass` when the agent can fix every one of them (FIXABLE_CHECKS);
    () when the verdict is `pass` or one of them is for a person."""
    if evidence.verdict == "pass":
        return ()
    # As `_decide` reads them: a failed check, or the criteria skipped because some are unverified.
    lacking = tuple(c for c in evidence.checks if c.passed is False or (c.name == "criteria" and c.passed is None))
    return lacking if lacking and all(c.name in FIXABLE_CHECKS for c in lacking) else ()


def sends_back(
    evidence: Evidence, *, success: bool, policy: bool, requires_human: bool, review: str
) -> tuple[Check, ...]:
    """Automatic rework (JCT_AUTO_REWORK): the checks a run that succeeded must fix, when its verdict is held back
    by those alone; () when the setting is off, the run reported a blocker only a person can lift, or its workflow
    step's gate is for a person (`review: human`). Decided after auto_approves."""
    if not (success and policy) or requires_human or review == "human":
        return ()
    return to_fix(evidence)


def resolve_claims(criteria: Sequence[str], raw: Sequence[Mapping[str, object]]) -> tuple[CriterionClaim, ...]:
    """Validate the agent's criteria_results and pin each one to the index of the criterion it is about."""
    if len(raw) > MAX_CLAIMS:
        raise invalid(f"criteria_results has {len(raw)} items; at most {MAX_CLAIMS} are allowed.")
    claims = [_resolve_claim(criteria, item, f"criteria_results[{n}]") for n, item in enumerate(raw)]
    seen: set[int] = set()
    for n, claim in enumerate(claims):
        if claim.index in seen:
            raise invalid(f"criteria_results[{n}] repeats criterion {claim.index}.", _criteria_hint(criteria))
        seen.add(claim.index)
    return tuple(claims)


def _resolve_claim(criteria: Sequence[str], item: object, where: str) -> CriterionClaim:
    if not isinstance(item, Mapping):
        raise invalid(f"{where} must be an object, got {type(item).__name__}.", _criteria_hint(criteria))
    unknown = sorted(str(k) for k in item if k not in ("criterion", "status", "evidence", "note"))
    if unknown:
        raise invalid(f"{where} has unknown field(s): {', '.join(unknown)}.", _criteria_hint(criteria))
    index = _criterion_index(criteria, item.get("criterion"), where)
    status = item.get("status")
    if status != "satisfied" and status != "unsatisfied":
        raise invalid(f"{where}.status must be 'satisfied' or 'unsatisfied', got {status!r}.")
    evidence = item.get("evidence", [])
    if not isinstance(evidence, list) or not all(isinstance(e, str) for e in evidence):
        raise invalid(f"{where}.evidence must be a list of artifact id strings.", "Cite artifact ids of this run.")
    note = item.get("note")
    if note is not None and not isinstance(note, str):
        raise invalid(f"{where}.note must be a string or omitted.")
    return CriterionClaim(index, status, tuple(evidence), note)


def _criterion_index(criteria: Sequence[str], ref: object, where: str) -> int:
    if isinstance(ref, int) and not isinstance(ref, bool):
        if 0 <= ref < len(criteria):
            return ref
        raise invalid(f"{where}.criterion index {ref} is out of range.", _criteria_hint(criteria))
    if isinstance(ref, str):
        if ref in criteria:
            return list(criteria).index(ref)
        folded = ref.strip().casefold()
        for index, criterion in enumerate(criteria):
            if criterion.strip().casefold() == folded:
                return index
        raise invalid(f"{where}.criterion {ref!r} matches no acceptance criterion.", _criteria_hint(criteria))
    raise invalid(f"{where}.criterion must be the criterion text or its 0-based index.", _criteria_hint(criteria))


def _criteria_hint(criteria: Sequence[str]) -> str:
    if not criteria:
        return "This task has no acceptance criteria; send an empty criteria_results."
    listed = "; ".join(f"{i}: {c[:60]}" for i, c in enumerate(criteria))
    return f"Use a 0-based index 0..{len(criteria) - 1} or the exact criterion text ({listed})."
