from __future__ import annotations

from dataclasses import replace

import pytest

from server.core.review.logs import diff_files, parse_test_summary
from server.core.review.prover import (
    Check,
    CriterionClaim,
    Evidence,
    ProverArtifact,
    ProverInput,
    auto_approves,
    prove,
    resolve_claims,
)
from server.errors import ErrorCode, JctError

PATCH_IN_SRC = """diff --git a/src/app.py b/src/app.py
index 1111111..2222222 100644
--- a/src/app.py
+++ b/src/app.py
@@ -1,2 +1,2 @@
-x = 1
+x = 2
"""

PATCH_OUTSIDE = """diff --git a/src/app.py b/src/app.py
--- a/src/app.py
+++ b/src/app.py
@@ -1 +1 @@
-x = 1
+x = 2
diff --git a/srcfoo/other.py b/srcfoo/other.py
new file mode 100644
--- /dev/null
+++ b/srcfoo/other.py
@@ -0,0 +1 @@
+y = 1
"""

PATCH = ProverArtifact("a-patch", "code_patch", "the fix", PATCH_IN_SRC)
PASSING_LOG = ProverArtifact("a-log", "log", "pytest output", "..... \n===== 5 passed in 0.12s =====\n")
FAILING_LOG = ProverArtifact("a-log", "log", "pytest output", "== 2 failed, 3 passed in 0.50s ==\n")
CRITERIA = ("x is 2", "tests pass")


def make_input(**changes: object) -> ProverInput:
    base = ProverInput(
        operation="code_change",
        success=True,
        target_path="src",
        time_budget_seconds=600,
        duration_seconds=120.0,
        acceptance_criteria=CRITERIA,
        claims=(
            CriterionClaim(0, "satisfied", ("a-patch",)),
            CriterionClaim(1, "satisfied", ("a-log",), "see log"),
        ),
        artifacts=(PATCH, PASSING_LOG),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def check(evidence: Evidence, name: str) -> Check:
    return next(c for c in evidence.checks if c.name == name)


# --- verdicts


def test_everything_in_order_passes() -> None:
    evidence = prove(make_input())
    assert evidence.verdict == "pass"
    assert evidence.verdict_reason == "pass: all checks passed and 2/2 criteria satisfied"
    assert [c.name for c in evidence.checks] == [
        "run_succeeded",
        "required_evidence",
        "criteria",
        "scope",
        "tests",
        "time_budget",
    ]
    assert all(c.passed for c in evidence.checks)
    assert evidence.evidence_missing == ()
    assert evidence.unexpected_files == ()
    assert evidence.evidence_collected == (
        {"artifact_id": "a-patch", "type": "code_patch", "title": "the fix"},
        {"artifact_id": "a-log", "type": "log", "title": "pytest output"},
    )
    assert [r.status for r in evidence.criteria_results] == ["satisfied", "satisfied"]
    assert evidence.criteria_results[1].note == "see log"


def test_pass_reason_names_skipped_checks() -> None:
    evidence = prove(
        make_input(
            target_path="",
            artifacts=(PATCH,),
            claims=(
                CriterionClaim(0, "satisfied", ("a-patch",)),
                CriterionClaim(1, "satisfied", ("a-patch",)),
            ),
        )
    )
    assert evidence.verdict == "pass"
    assert evidence.verdict_reason == "pass: all checks passed (scope, tests skipped) and 2/2 criteria satisfied"


def test_agent_reporting_failure_fails_run_succeeded() -> None:
    evidence = prove(make_input(success=False))
    assert check(evidence, "run_succeeded").passed is False
    assert evidence.verdict == "fail"
    assert evidence.verdict_reason.startswith("fail: run_succeeded")


def test_unsatisfied_criterion_fails() -> None:
    evidence = prove(
        make_input(
            claims=(
                CriterionClaim(0, "satisfied", ("a-patch",)),
                CriterionClaim(1, "unsatisfied", ("a-log",), "flaky"),
            )
        )
    )
    assert evidence.criteria_results[1].status == "unsatisfied"
    assert check(evidence, "criteria").passed is False
    assert evidence.verdict == "fail"
    assert "criteria (1 of 2 unsatisfied)" in evidence.verdict_reason


def test_fail_reason_names_every_deciding_check() -> None:
    patch = ProverArtifact("a-patch", "code_patch", "the fix", PATCH_OUTSIDE)
    evidence = prove(make_input(artifacts=(patch, FAILING_LOG)))
    assert evidence.verdict == "fail"
    assert evidence.verdict_reason == ("fail: scope (1 file outside src/: srcfoo/other.py), tests (2 failed, 3 passed)")


def test_failing_verdict_outranks_partial_problems() -> None:
    evidence = prove(make_input(success=False, duration_seconds=10_000.0, claims=()))
    assert evidence.verdict == "fail"
    assert "time_budget" not in evidence.verdict_reason


# --- required_evidence


@pytest.mark.parametrize(
    ("operation", "artifact_type", "missing"),
    [
        ("code_change", "doc", "a code_patch or commit artifact"),
        ("docs", "report", "a doc or code_patch artifact"),
        ("analysis", "log", "a report artifact"),
        ("ops", "doc", "a log or report artifact"),
    ],
)
def test_missing_required_evidence_per_operation_is_partial(operation: str, artifact_type: str, missing: str) -> None:
    only = ProverArtifact("a-only", artifact_type, "something", None)
    claims = (CriterionClaim(0, "satisfied", ("a-only",)), CriterionClaim(1, "satisfied", ("a-only",)))
    evidence = prove(make_input(operation=operation, artifacts=(only,), claims=claims))
    assert check(evidence, "required_evidence").passed is False
    assert evidence.evidence_missing == (missing,)
    assert evidence.verdict == "partial"
    assert evidence.verdict_reason == f"partial: required_evidence (missing {missing})"


@pytest.mark.parametrize(
    ("operation", "artifact_type"),
    [
        ("code_change", "commit"),
        ("docs", "doc"),
        ("docs", "code_patch"),
        ("analysis", "report"),
        ("ops", "log"),
        ("ops", "report"),
    ],
)
def test_required_evidence_accepts_each_allowed_type(operation: str, artifact_type: str) -> None:
    only = ProverArtifact("a-only", artifact_type, "something", None)
    evidence = prove(make_input(operation=operation, artifacts=(only,)))
    assert check(evidence, "required_evidence").passed is True


def test_unknown_operation_skips_required_evidence() -> None:
    evidence = prove(make_input(operation="mystery"))
    assert check(evidence, "required_evidence").passed is None
    assert evidence.verdict == "pass"


# --- criteria


def test_criterion_citing_no_artifact_of_this_run_is_unverified_and_partial() -> None:
    evidence = prove(
        make_input(
            claims=(
                CriterionClaim(0, "satisfied", ("a-patch",)),
                CriterionClaim(1, "satisfied", ("some-other-runs-artifact",)),
            )
        )
    )
    result = evidence.criteria_results[1]
    assert result.status == "unverified"
    assert result.evidence == ()
    assert check(evidence, "criteria").passed is None
    assert check(evidence, "criteria").detail == "1 of 2 unverified"
    assert evidence.evidence_missing == ("evidence for criterion 1: tests pass",)
    assert evidence.verdict == "partial"
    assert evidence.verdict_reason == "partial: criteria (1 of 2 unverified)"


def test_satisfied_claim_without_citation_is_unverified() -> None:
    evidence = prove(
        make_input(claims=(CriterionClaim(0, "satisfied", ()), CriterionClaim(1, "satisfied", ("a-log",))))
    )
    assert evidence.criteria_results[0].status == "unverified"
    assert evidence.verdict == "partial"


def test_criterion_without_claim_is_unverified() -> None:
    evidence = prove(make_input(claims=(CriterionClaim(0, "satisfied", ("a-patch",)),)))
    assert [r.status for r in evidence.criteria_results] == ["satisfied", "unverified"]
    assert evidence.verdict == "partial"


def test_criterion_evidence_keeps_only_this_runs_artifacts() -> None:
    evidence = prove(
        make_input(
            claims=(
                CriterionClaim(0, "satisfied", ("elsewhere", "a-patch", "a-patch")),
                CriterionClaim(1, "satisfied", ("a-log",)),
            )
        )
    )
    assert evidence.criteria_results[0].evidence == ("a-patch",)
    assert evidence.criteria_results[0].status == "satisfied"


def test_no_acceptance_criteria_passes_criteria_check() -> None:
    evidence = prove(make_input(acceptance_criteria=(), claims=()))
    assert check(evidence, "criteria") == Check("criteria", True, "no acceptance criteria to check")
    assert evidence.verdict == "pass"
    assert evidence.verdict_reason == "pass: all checks passed and there are no acceptance criteria"


# --- scope


def test_patch_touching_files_outside_target_path_fails_scope() -> None:
    patch = ProverArtifact("a-patch", "code_patch", "the fix", PATCH_OUTSIDE)
    evidence = prove(make_input(artifacts=(patch, PASSING_LOG)))
    assert check(evidence, "scope").passed is False
    assert evidence.unexpected_files == ("srcfoo/other.py",)
    assert "srcfoo/other.py" in check(evidence, "scope").detail
    assert evidence.verdict == "fail"


@pytest.mark.parametrize("target", ["src", "src/", "./src", "./src/", "/src"])
def test_target_path_forms_are_normalised(target: str) -> None:
    evidence = prove(make_input(target_path=target))
    assert check(evidence, "scope").passed is True


def test_patch_escaping_target_with_dotdot_fails_scope() -> None:
    patch = ProverArtifact("a-patch", "code_patch", "sneaky", "--- a/src/../etc/x\n+++ b/src/../etc/x\n@@ -1 +1 @@\n")
    evidence = prove(make_input(artifacts=(patch, PASSING_LOG)))
    assert evidence.unexpected_files == ("etc/x",)


def test_scope_is_skipped_without_target_path() -> None:
    evidence = prove(make_input(target_path=""))
    assert check(evidence, "scope").passed is None
    assert "no target_path" in check(evidence, "scope").detail


def test_scope_is_skipped_without_inline_diffs() -> None:
    commit = ProverArtifact("a-patch", "commit", "abc123", None)
    evidence = prove(make_input(artifacts=(commit, PASSING_LOG)))
    assert check(evidence, "scope").passed is None
    assert "no inline code_patch diffs" in check(evidence, "scope").detail


def test_diff_files_reads_git_and_plain_headers_without_dev_null() -> None:
    assert diff_files(PATCH_OUTSIDE) == ("src/app.py", "srcfoo/other.py")
    plain = "--- old/readme.txt\t2024-01-01 00:00:00\n+++ new/readme.txt\t2024-01-02 00:00:00\n@@ -1 +1 @@\n"
    assert diff_files(plain) == ("old/readme.txt", "new/readme.txt")


def test_diff_files_follows_renames_and_deletions() -> None:
    patch = (
        "diff --git a/old.py b/new.py\nsimilarity index 100%\nrename from old.py\nrename to new.py\n"
        "diff --git a/gone.py b/gone.py\ndeleted file mode 100644\n--- a/gone.py\n+++ /dev/null\n"
    )
    assert diff_files(patch) == ("old.py", "new.py", "gone.py")


def test_diff_files_ignores_removed_lines_that_look_like_headers() -> None:
    patch = "--- a/q.sql\n+++ b/q.sql\n@@ -1,2 +1 @@\n--- a comment\n select 1;\n"
    assert diff_files(patch) == ("q.sql",)


# --- tests


def test_test_log_with_failures_fails() -> None:
    evidence = prove(make_input(artifacts=(PATCH, FAILING_LOG)))
    assert check(evidence, "tests") == Check("tests", False, "2 failed, 3 passed")
    assert evidence.verdict == "fail"


def test_passing_test_log_passes_tests_check() -> None:
    evidence = prove(make_input())
    assert check(evidence, "tests") == Check("tests", True, "0 failed, 5 passed")


def test_counts_from_several_logs_are_summed() -> None:
    second = ProverArtifact("a-log2", "log", "more", "test result: ok. 4 passed; 0 failed; 0 ignored\n")
    evidence = prove(make_input(artifacts=(PATCH, PASSING_LOG, second)))
    assert check(evidence, "tests") == Check("tests", True, "0 failed, 9 passed")


def test_tests_check_is_skipped_without_summary() -> None:
    chatter = ProverArtifact("a-log", "log", "build", "compiling...\ndone, 2 failed attempts retried\n")
    evidence = prove(make_input(artifacts=(PATCH, chatter)))
    assert check(evidence, "tests").passed is None
    evidence = prove(make_input(artifacts=(PATCH,)))
    assert check(evidence, "tests").passed is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("=== 3 passed, 1 failed in 0.5s ===", (3, 1)),
        ("5 passed", (5, 0)),
        ("2 failed, 3 passed, 1 skipped", (3, 2)),
        ("==== 1 error in 0.10s ====", (0, 1)),
        ("4 passed, 2 errors, 3 warnings in 75.00s (0:01:15)", (4, 2)),
        ("\x1b[32m===== 7 passed in 0.01s =====\x1b[0m", (7, 0)),
        ("Test Suites: 1 failed, 1 passed, 2 total\nTests:       1 failed, 4 passed, 5 total\n", (4, 1)),
        ("ok  \texample.com/a\t0.1s\nok  \texample.com/b\t(cached)\n", (2, 0)),
        (
            "--- FAIL: TestX (0.00s)\n    x_test.go:9: boom\nFAIL\n"
            "FAIL\texample.com/a\t0.1s\nok  \texample.com/b\t0.2s\n",
            (1, 1),
        ),
        ("--- FAIL: TestX (0.00s)\n--- FAIL: TestY (0.00s)\nFAIL\texample.com/a\t0.1s\n", (0, 2)),
        ("FAIL\texample.com/a [build failed]\n", (0, 1)),
        ("test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out\n", (3, 1)),
        ("test result: ok. 2 passed; 0 failed; 0 ignored\ntest result: ok. 1 passed; 0 failed; 0 ignored\n", (3, 0)),
        ("10 passed, 0 failed", (10, 0)),
        ("=== 1 passed in 0.1s ===\nlater\n=== 2 passed, 1 failed in 0.2s ===\n", (3, 1)),
    ],
)
def test_parse_test_summary_recognises_runner_formats(text: str, expected: tuple[int, int]) -> None:
    assert parse_test_summary(text) == expected


@pytest.mark.parametrize("text", ["", "all good", "retried: 2 failed attempts", "3 warnings", "FAILED tests/a.py::t"])
def test_parse_test_summary_returns_none_without_summary(text: str) -> None:
    assert parse_test_summary(text) is None


# --- time_budget


def test_time_budget_exceeded_is_partial() -> None:
    evidence = prove(make_input(duration_seconds=601.0))
    assert check(evidence, "time_budget").passed is False
    assert evidence.verdict == "partial"
    assert evidence.verdict_reason == "partial: time_budget (took 601.0s, over the 600s budget)"


def test_run_exactly_on_budget_passes() -> None:
    assert check(prove(make_input(duration_seconds=600.0)), "time_budget").passed is True


# --- resolve_claims


def test_resolve_claims_by_exact_text() -> None:
    claims = resolve_claims(CRITERIA, [{"criterion": "tests pass", "status": "satisfied", "evidence": ["a"]}])
    assert claims == (CriterionClaim(1, "satisfied", ("a",), None),)


def test_resolve_claims_by_text_ignoring_case_and_whitespace() -> None:
    claims = resolve_claims(CRITERIA, [{"criterion": "  X IS 2 ", "status": "unsatisfied", "note": "nope"}])
    assert claims == (CriterionClaim(0, "unsatisfied", (), "nope"),)


def test_resolve_claims_by_index() -> None:
    claims = resolve_claims(
        CRITERIA,
        [
            {"criterion": 1, "status": "satisfied", "evidence": []},
            {"criterion": 0, "status": "satisfied", "evidence": ["p"]},
        ],
    )
    assert [c.index for c in claims] == [1, 0]


def test_resolve_claims_accepts_empty_list() -> None:
    assert resolve_claims(CRITERIA, []) == ()


@pytest.mark.parametrize(
    ("item", "fragment"),
    [
        ({"criterion": "no such thing", "status": "satisfied"}, "matches no acceptance criterion"),
        ({"criterion": 2, "status": "satisfied"}, "out of range"),
        ({"criterion": -1, "status": "satisfied"}, "out of range"),
        ({"criterion": True, "status": "satisfied"}, "text or its 0-based index"),
        ({"criterion": None, "status": "satisfied"}, "text or its 0-based index"),
        ({"criterion": 0, "status": "done"}, "status must be"),
        ({"criterion": 0}, "status must be"),
        ({"criterion": 0, "status": "satisfied", "evidence": "a-log"}, "evidence must be a list"),
        ({"criterion": 0, "status": "satisfied", "evidence": [1]}, "evidence must be a list"),
        ({"criterion": 0, "status": "satisfied", "note": 5}, "note must be a string"),
        ({"criterion": 0, "status": "satisfied", "evidance": ["a"]}, "unknown field(s): evidance"),
        ("tests pass", "must be an object"),
    ],
)
def test_resolve_claims_rejects_bad_items(item: object, fragment: str) -> None:
    with pytest.raises(JctError) as caught:
        resolve_claims(CRITERIA, [{"criterion": 0, "status": "satisfied"}, item])  # type: ignore[list-item]
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.message.startswith("criteria_results[1]")
    assert fragment in caught.value.message


def test_resolve_claims_suggestion_lists_valid_indices() -> None:
    with pytest.raises(JctError) as caught:
        resolve_claims(CRITERIA, [{"criterion": 5, "status": "satisfied"}])
    assert "0..1" in caught.value.suggestion
    assert "1: tests pass" in caught.value.suggestion


def test_resolve_claims_rejects_the_same_criterion_twice() -> None:
    with pytest.raises(JctError) as caught:
        resolve_claims(
            CRITERIA, [{"criterion": 0, "status": "satisfied"}, {"criterion": "X is 2", "status": "satisfied"}]
        )
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert "repeats criterion 0" in caught.value.message


def test_resolve_claims_rejects_more_than_100_items() -> None:
    with pytest.raises(JctError) as caught:
        resolve_claims(CRITERIA, [{"criterion": 0, "status": "satisfied"}] * 101)
    assert "at most 100" in caught.value.message


def test_resolve_claims_with_no_criteria_says_so() -> None:
    with pytest.raises(JctError) as caught:
        resolve_claims((), [{"criterion": 0, "status": "satisfied"}])
    assert "no acceptance criteria" in caught.value.suggestion


# --- verifiable tasks: the files JCT read, not the pasted diff ----------------------------


def test_a_verifiable_task_is_scoped_by_the_files_jct_read_not_by_the_pasted_diff() -> None:
    evidence = prove(make_input(verifiable=True, files_changed=("src/app.py", "deploy/secrets.env")))
    assert check(evidence, "scope").passed is False
    assert evidence.unexpected_files == ("deploy/secrets.env",)
    assert "read by JCT in the repository" in check(evidence, "scope").detail
    assert evidence.verdict == "fail"


def test_a_verifiable_task_with_nothing_read_leaves_scope_unchecked_whatever_was_pasted() -> None:
    evidence = prove(make_input(verifiable=True, change_note="nothing verified to read: no commit was reported"))
    assert check(evidence, "scope").passed is None
    assert check(evidence, "scope").detail == "nothing verified to read: no commit was reported"
    pasted = prove(make_input(verifiable=True, artifacts=(ProverArtifact("p", "code_patch", "x", PATCH_OUTSIDE),)))
    assert check(pasted, "scope").passed is None


def test_a_verified_commit_is_the_required_evidence_of_a_change() -> None:
    evidence = prove(make_input(artifacts=(PASSING_LOG,), verified_commits=("ab" * 20,), operation="docs"))
    assert check(evidence, "required_evidence").passed is True
    assert check(evidence, "required_evidence").detail == "verified commit abababababab"
    unverified = prove(make_input(artifacts=(PASSING_LOG,), operation="docs"))
    assert check(unverified, "required_evidence").passed is False


def test_the_review_policy_approves_a_successful_run_whose_verdict_it_names() -> None:
    assert auto_approves("pass", success=True, policy=True, verdicts=("pass",), requires_human=False, review="auto")


@pytest.mark.parametrize(
    ("verdict", "success", "policy", "requires_human", "review"),
    [
        ("partial", True, True, False, "auto"),
        ("pass", False, True, False, "auto"),
        ("pass", True, False, False, "auto"),
        ("pass", True, True, True, "auto"),
        ("pass", True, True, False, "agent"),
        ("pass", True, True, False, "human"),
    ],
)
def test_the_review_policy_leaves_the_decision_to_a_reviewer(
    verdict: str, success: bool, policy: bool, requires_human: bool, review: str
) -> None:
    assert not auto_approves(
        verdict, success=success, policy=policy, verdicts=("pass",), requires_human=requires_human, review=review
    )
