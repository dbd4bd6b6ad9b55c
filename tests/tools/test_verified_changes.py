"""Verified changes end to end: real git repositories made here, the real MCP client, both databases.

JCT reads the task's repository itself: the base commit at claim, a reported commit at report, the files
changed at completion, and the prover's scope check believes those, not a pasted diff.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from server.config import Settings
from tests.git.repo import Work, bare_clone, git
from tests.tools.conftest import ClientFactory, error, ok

pytestmark = pytest.mark.anyio


@pytest.fixture
def make_settings(make_settings: Callable[..., Settings]) -> Callable[..., Settings]:
    """Section 13's reading of a local working tree (its uncommitted changes count): integration off here
    (tests/integration/ covers the merge queue)."""
    return partial(make_settings, integrate_local=False)


PARTIAL_DIFF = """diff --git a/src/app.py b/src/app.py
--- a/src/app.py
+++ b/src/app.py
@@ -1 +1 @@
-print('hi')
+print('hello')
"""


async def enqueue(client: Client, repo: str, *, path: str = "src", operation: str = "code_change") -> str:
    made = await ok(
        client,
        "jct_enqueue_task",
        objective="Greet politely",
        operation=operation,
        target_repo=repo,
        target_ref="main",
        target_path=path,
    )
    return str(made["task_id"])


async def claim(client: Client, task_id: str) -> dict[str, Any]:
    return await ok(client, "jct_claim_task", task_id=task_id)


@asynccontextmanager
async def claimed_on(connect: ClientFactory, work: Work) -> AsyncIterator[tuple[Client, str]]:
    """A client that enqueued a task on the working tree and claimed it; (client, task_id)."""
    async with connect() as client:
        task_id = await enqueue(client, str(work.path))
        await claim(client, task_id)
        yield client, task_id


async def report(client: Client, task_id: str, content: str, kind: str = "commit") -> dict[str, Any]:
    return await ok(client, "jct_report_artifact", task_id=task_id, title="work", artifact_type=kind, content=content)


async def refuse(client: Client, task_id: str, content: str) -> str:
    """The error code of a refused commit report."""
    refused = await error(
        client, "jct_report_artifact", task_id=task_id, title="w", artifact_type="commit", content=content
    )
    return str(refused["code"])


async def complete(client: Client, task_id: str) -> dict[str, Any]:
    done = await ok(client, "jct_complete_task", task_id=task_id, success=True, summary="done")
    run = await ok(client, "jct_get_run", run_id=done["run_id"])
    evidence = await ok(client, "jct_get_evidence", run_id=done["run_id"])
    return {"done": done, "run": run["run"], "evidence": evidence["evidence_pack"]}


def scope_of(evidence: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in evidence["checks"] if c["name"] == "scope")


def paths(run: dict[str, Any]) -> list[str]:
    return [f["path"] for f in run["files_changed"]["files"]]


async def test_the_claim_records_and_returns_the_base_commit(connect: ClientFactory, tmp_path: Path) -> None:
    work = Work(tmp_path / "repo")
    async with connect() as client:
        task_id = await enqueue(client, str(work.path))
        claimed = await claim(client, task_id)
        assert claimed["base_commit"] == work.head()
        run = await ok(client, "jct_get_run", run_id=claimed["run_id"])
        assert run["run"]["base_commit"] == work.head()


async def test_a_lying_diff_does_not_hide_files_changed_outside_target_path(
    connect: ClientFactory, tmp_path: Path
) -> None:
    work = Work(tmp_path / "repo")
    async with claimed_on(connect, work) as (client, task_id):
        work.write("src/app.py", "print('hello')\n")
        work.write("deploy/secrets.env", "TOKEN=x\n")
        sha = work.commit("greet, and something else")
        work.write("ci/extra.yml", "uncommitted: yes\n")  # never committed: still part of the change
        await ok(
            client,
            "jct_report_artifact",
            task_id=task_id,
            title="diff",
            artifact_type="code_patch",
            content=PARTIAL_DIFF,
        )
        reported = await report(client, task_id, "main")
        assert reported["size_bytes"] == len(sha)
        result = await complete(client, task_id)
    assert paths(result["run"]) == ["ci/extra.yml", "deploy/secrets.env", "src/app.py"]
    assert result["run"]["files_changed"]["head"] == sha
    assert result["run"]["files_changed"]["working_tree"] is True
    assert result["evidence"]["verdict"] == "fail"
    scope = scope_of(result["evidence"])
    assert scope["passed"] is False
    assert "deploy/secrets.env" in scope["detail"]
    assert "read by JCT" in scope["detail"]
    assert result["evidence"]["unexpected_files"] == ["ci/extra.yml", "deploy/secrets.env"]
    assert paths({"files_changed": result["evidence"]["files_changed"]}) == paths(result["run"])


async def test_an_honest_change_passes_on_a_verified_commit_alone(connect: ClientFactory, tmp_path: Path) -> None:
    work = Work(tmp_path / "repo")
    async with claimed_on(connect, work) as (client, task_id):
        work.write("src/app.py", "print('hello')\nprint('again')\n")
        work.commit("greet")
        await report(client, task_id, "HEAD")
        result = await complete(client, task_id)
    assert result["run"]["files_changed"]["files"] == [{"path": "src/app.py", "status": "M", "added": 2, "removed": 1}]
    checks = {c["name"]: c for c in result["evidence"]["checks"]}
    assert checks["required_evidence"]["passed"] is True
    assert checks["required_evidence"]["detail"].startswith("verified commit ")
    assert checks["scope"]["passed"] is True
    assert result["evidence"]["verdict"] == "pass"


async def test_a_commit_that_is_not_there_or_not_built_on_the_base_is_refused(
    connect: ClientFactory, tmp_path: Path
) -> None:
    work = Work(tmp_path / "repo")
    first = work.head()
    work.write("src/app.py", "v2\n")
    work.commit("second")
    async with claimed_on(connect, work) as (client, task_id):
        assert await refuse(client, task_id, "f" * 40) == "COMMIT_NOT_FOUND"
        assert await refuse(client, task_id, first) == "NOT_A_DESCENDANT"
        assert await refuse(client, task_id, f"--output={tmp_path / 'x'}") == "INVALID_ARGUMENT"
        assert await refuse(client, task_id, "main..HEAD") == "INVALID_ARGUMENT"
        run = await ok(client, "jct_get_task", task_id=task_id)
        assert run["task"]["status"] == "running"
        work.path.rename(tmp_path / "gone")
        assert await refuse(client, task_id, "main") == "REPO_NOT_AVAILABLE"
    assert not (tmp_path / "x").exists()


async def test_a_force_pushed_main_is_no_base_for_work(connect: ClientFactory, tmp_path: Path) -> None:
    """Through a configured git URL: main is rewritten after the claim. Work built on the recorded base still
    counts; work built on the rewritten main does not descend from it."""
    upstream = Work(tmp_path / "upstream")
    remote = bare_clone(upstream.path, tmp_path / "remote" / "api.git")
    async with connect(repos=[f"myorg/=file://{tmp_path / 'remote'}"]) as client:
        task_id = await enqueue(client, "myorg/api.git")
        claimed = await claim(client, task_id)
        assert claimed["base_commit"] == upstream.head()
        agent = tmp_path / "agent"
        git(tmp_path, "clone", "--quiet", str(remote), str(agent))
        (agent / "src" / "app.py").write_text("print('hello')\n")
        git(agent, "commit", "--quiet", "-am", "greet")
        git(agent, "push", "--quiet", "origin", "HEAD:refs/heads/agent/greet")
        # Someone rewrites main and force-pushes it.
        upstream.git("commit", "--quiet", "--amend", "-m", "rewritten history")
        upstream.git("push", "--quiet", "--force", str(remote), "main")
        rebuilt = tmp_path / "rebuilt"
        git(tmp_path, "clone", "--quiet", str(remote), str(rebuilt))
        (rebuilt / "src" / "app.py").write_text("print('rebuilt')\n")
        git(rebuilt, "commit", "--quiet", "-am", "greet on the new main")
        git(rebuilt, "push", "--quiet", "origin", "HEAD:refs/heads/agent/rebuilt")
        assert await refuse(client, task_id, "agent/rebuilt") == "NOT_A_DESCENDANT"
        await report(client, task_id, "agent/greet")
        result = await complete(client, task_id)
    assert result["run"]["files_changed"]["working_tree"] is False
    assert paths(result["run"]) == ["src/app.py"]
    assert result["evidence"]["verdict"] == "pass"


async def test_a_merge_commit_counts_both_sides(connect: ClientFactory, tmp_path: Path) -> None:
    work = Work(tmp_path / "repo")
    async with claimed_on(connect, work) as (client, task_id):
        work.git("checkout", "--quiet", "-b", "side")
        work.write("src/side.py", "side = 1\n")
        work.commit("side")
        work.git("checkout", "--quiet", "main")
        work.write("src/app.py", "print('hello')\n")
        work.commit("main")
        work.git("merge", "--quiet", "--no-ff", "-m", "merge side", "side")
        assert len(work.git("rev-list", "--parents", "-n", "1", "HEAD").split()) == 3
        await report(client, task_id, "HEAD")
        result = await complete(client, task_id)
    assert paths(result["run"]) == ["src/app.py", "src/side.py"]
    assert scope_of(result["evidence"])["passed"] is True


async def test_a_rename_out_of_target_path_is_caught_and_a_binary_file_has_no_line_counts(
    connect: ClientFactory, tmp_path: Path
) -> None:
    work = Work(tmp_path / "repo")
    work.write("lib/util.py", "".join(f"line {n}\n" for n in range(50)))
    work.commit("util")
    async with claimed_on(connect, work) as (client, task_id):
        work.git("mv", "lib/util.py", "src/util.py")
        work.write("src/logo.png", b"\x89PNG\r\n\x1a\n\x00\x00" + bytes(range(256)) * 4)
        work.commit("move util in, add a logo")
        await report(client, task_id, "HEAD")
        result = await complete(client, task_id)
    files = {f["path"]: f for f in result["run"]["files_changed"]["files"]}
    assert files["src/util.py"]["status"] == "R"
    assert files["src/util.py"]["old_path"] == "lib/util.py"
    assert files["src/logo.png"] == {"path": "src/logo.png", "status": "A", "added": None, "removed": None}
    assert result["evidence"]["unexpected_files"] == ["lib/util.py"]


async def test_a_100_mb_file_is_listed_without_being_read_into_a_response(
    connect: ClientFactory, tmp_path: Path
) -> None:
    work = Work(tmp_path / "repo")
    async with claimed_on(connect, work) as (client, task_id):
        with (work.path / "src" / "huge.bin").open("wb") as out:
            out.write(b"\x00BIN")
            out.truncate(100 * 1024 * 1024)
        work.commit("huge")
        await report(client, task_id, "HEAD")
        result = await complete(client, task_id)
    assert result["run"]["files_changed"]["files"] == [
        {"path": "src/huge.bin", "status": "A", "added": None, "removed": None}
    ]


async def test_with_tokens_a_local_path_is_no_target_repo(connect: ClientFactory, tmp_path: Path) -> None:
    work = Work(tmp_path / "repo")
    async with connect("alice", auth="token") as client:
        refused = await error(
            client, "jct_enqueue_task", objective="x", operation="code_change", target_repo=str(work.path)
        )
    assert refused["code"] == "REPO_NOT_ALLOWED"


async def test_a_task_jct_cannot_read_keeps_the_pasted_diff_rule(connect: ClientFactory) -> None:
    async with connect() as client:
        task_id = await enqueue(client, "myorg/api")
        claimed = await claim(client, task_id)
        assert claimed.get("base_commit") is None
        await report(client, task_id, "anything")
        await ok(
            client, "jct_report_artifact", task_id=task_id, title="d", artifact_type="code_patch", content=PARTIAL_DIFF
        )
        result = await complete(client, task_id)
    assert "files_changed" not in result["run"]  # results leave out what is null
    assert scope_of(result["evidence"])["passed"] is True


async def test_a_finished_missions_outcome_lists_the_files_its_approved_work_changed_read_from_git(
    connect: ClientFactory, tmp_path: Path
) -> None:
    work = Work(tmp_path / "repo")
    planned = [
        {"key": key, "objective": f"Do {key}", "operation": "code_change", "target_repo": str(work.path)}
        for key in ("a", "b")
    ]
    async with connect() as client:
        made = await ok(client, "jct_create_mission", title="Greet", goal="g", phases=[{"name": "p", "tasks": planned}])
        ids = {t["key"]: t["task_id"] for t in made["tasks"]}
        await claim(client, ids["a"])
        work.write("src/app.py", "print('hello')\n")
        await report(client, ids["a"], work.commit("a"))
        assert (await complete(client, ids["a"]))["evidence"]["verdict"] == "pass"
        await claim(client, ids["b"])
        work.write("src/app.py", "print('hello')\nprint('again')\n")
        work.write("src/util.py", "X = 1\n")
        await report(client, ids["b"], work.commit("b"))
        assert (await complete(client, ids["b"]))["evidence"]["verdict"] == "pass"
        outcome = (await ok(client, "jct_get_mission", mission_id=made["mission_id"]))["outcome"]
    assert outcome["outcome"] == "completed"
    files = {f["path"]: f for f in outcome["files_changed"]}
    assert sorted(files) == ["src/app.py", "src/util.py"]
    assert files["src/app.py"]["tasks"] == [ids["a"], ids["b"]]
    assert files["src/app.py"]["added"] == 2
    assert files["src/app.py"]["removed"] == 1
    assert files["src/util.py"]["tasks"] == [ids["b"]]
    assert outcome["files_truncated"] is False
