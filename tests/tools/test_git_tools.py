"""jct_git_log, jct_git_diff, jct_git_show and jct://runs/{run_id}/diff on real repositories made here."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from mcp import Client

from server.config import Settings
from tests.git.repo import Work
from tests.tools.conftest import ClientFactory, error, ok
from tests.tools.test_verified_changes import PARTIAL_DIFF, claim, complete, enqueue, report

pytestmark = pytest.mark.anyio


@pytest.fixture
def make_settings(make_settings: Callable[..., Settings]) -> Callable[..., Settings]:
    """Section 13's reading of a local working tree (its uncommitted changes count): integration off here
    (tests/integration/ covers the merge queue)."""
    return partial(make_settings, integrate_local=False)


async def page(client: Client, uri: str) -> str:
    contents = (await client.read_resource(uri)).contents
    return "".join(getattr(part, "text", "") for part in contents)


def history(tmp_path: Path) -> Work:
    work = Work(tmp_path / "repo")
    for n in range(3):
        work.write(f"src/mod{n}.py", f"value = {n}\n")
        work.commit(f"module {n}")
    work.write("docs/guide.md", "# Guide\n")
    work.commit("guide")
    return work


async def test_the_log_lists_commits_newest_first_and_filters_by_path(connect: ClientFactory, tmp_path: Path) -> None:
    work = history(tmp_path)
    async with connect() as client:
        log = await ok(client, "jct_git_log", repo=str(work.path))
        assert [c["subject"] for c in log["commits"]] == ["guide", "module 2", "module 1", "module 0", "first"]
        assert log["head"] == work.head()
        assert log["commits"][0]["parents"] == [work.head("HEAD~1")]
        two = await ok(client, "jct_git_log", repo=str(work.path), ref="HEAD~1", path="src", limit=2)
        assert [c["subject"] for c in two["commits"]] == ["module 2", "module 1"]


@pytest.mark.parametrize("ref", ["--output=x", "-n1", "HEAD..main", "main@{0}"])
async def test_option_and_range_refs_are_refused(connect: ClientFactory, tmp_path: Path, ref: str) -> None:
    work = history(tmp_path)
    async with connect() as client:
        refused = await error(client, "jct_git_log", repo=str(work.path), ref=ref)
        assert refused["code"] == "INVALID_ARGUMENT"
        shown = await error(client, "jct_git_show", repo=str(work.path), ref=ref, path="README.md")
        assert shown["code"] == "INVALID_ARGUMENT"
        diffed = await error(client, "jct_git_diff", repo=str(work.path), base=ref, head="main")
        assert diffed["code"] == "INVALID_ARGUMENT"
    assert not (work.path / "x").exists()


@pytest.mark.parametrize("path", ["../outside.txt", "src/../../outside.txt", "/etc/passwd"])
async def test_paths_that_leave_the_repository_are_refused(connect: ClientFactory, tmp_path: Path, path: str) -> None:
    work = history(tmp_path)
    (tmp_path / "outside.txt").write_text("secret")
    async with connect() as client:
        refused = await error(client, "jct_git_show", repo=str(work.path), ref="main", path=path)
        assert refused["code"] == "INVALID_ARGUMENT"
        logged = await error(client, "jct_git_log", repo=str(work.path), path=path)
        assert logged["code"] == "INVALID_ARGUMENT"


async def test_show_reads_a_file_a_directory_and_names_a_binary_file(connect: ClientFactory, tmp_path: Path) -> None:
    work = history(tmp_path)
    work.write("assets/logo.png", b"\x89PNG\x00\x00" + bytes(range(256)))
    work.commit("logo")
    async with connect() as client:
        shown = await ok(client, "jct_git_show", repo=str(work.path), ref="HEAD~1", path="src/mod1.py")
        assert shown["text"] == "value = 1\n"
        assert shown["truncated"] is False
        listing = await ok(client, "jct_git_show", repo=str(work.path), ref="main", path="src")
        assert "mod0.py" in listing["text"]
        binary = await ok(client, "jct_git_show", repo=str(work.path), ref="main", path="assets/logo.png")
        assert binary["text"].startswith("[binary file, 262 bytes")
        missing = await error(client, "jct_git_show", repo=str(work.path), ref="main", path="nope.txt")
        assert missing["code"] == "INVALID_ARGUMENT"
        no_commit = await error(client, "jct_git_show", repo=str(work.path), ref="nope", path="README.md")
        assert no_commit["code"] == "COMMIT_NOT_FOUND"


async def test_a_long_text_is_cut_with_a_marker(connect: ClientFactory, tmp_path: Path) -> None:
    work = history(tmp_path)
    work.write("big.txt", "x" * 5_000)
    work.commit("big")
    async with connect() as client:
        shown = await ok(client, "jct_git_show", repo=str(work.path), ref="main", path="big.txt", max_chars=100)
        diff = await ok(client, "jct_git_diff", repo=str(work.path), base="HEAD~1", head="HEAD", max_chars=300)
    assert shown["truncated"] is True
    assert shown["text"].startswith("x" * 100 + "\n[... cut by JCT at 100 characters")
    assert diff["truncated"] is True
    assert "[... cut by JCT at 300 characters" in diff["text"]


async def test_a_repository_jct_does_not_read_is_refused(connect: ClientFactory, tmp_path: Path) -> None:
    async with connect() as client:
        refused = await error(client, "jct_git_log", repo="myorg/api")
        assert refused["code"] == "REPO_NOT_AVAILABLE"
        missing = await error(client, "jct_git_log", repo=str(tmp_path / "nothing"))
        assert missing["code"] == "REPO_NOT_AVAILABLE"
    work = history(tmp_path)
    async with connect(auth="token") as client:
        refused = await error(client, "jct_git_log", repo=str(work.path))
        assert refused["code"] == "REPO_NOT_AVAILABLE"


async def test_a_runs_diff_is_what_jct_read_not_what_was_pasted(connect: ClientFactory, tmp_path: Path) -> None:
    work = history(tmp_path)
    async with connect() as client:
        task_id = await enqueue(client, str(work.path))
        claimed = await claim(client, task_id)
        run_id = claimed["run_id"]
        assert "Base commit" in await page(client, f"jct://runs/{run_id}")
        work.write("src/app.py", "print('hello')\n")
        work.write("Makefile", "all:\n\ttrue\n")
        work.commit("greet")
        await report(client, task_id, PARTIAL_DIFF, "code_patch")
        await report(client, task_id, "HEAD")
        result = await complete(client, task_id)
        diff = await ok(client, "jct_git_diff", run_id=run_id)
        only_src = await ok(client, "jct_git_diff", run_id=run_id, path="src")
        resource = await page(client, f"jct://runs/{run_id}/diff")
        run_page = await page(client, f"jct://runs/{run_id}")
        evidence_page = await page(client, f"jct://evidence/{result['done']['evidence_pack']['id']}")
        both = await error(client, "jct_git_diff", run_id=run_id, repo=str(work.path))
    assert diff["base"] == claimed["base_commit"]
    assert diff["head"] == work.head()
    assert "diff --git a/Makefile b/Makefile" in diff["text"]
    assert "Makefile" not in only_src["text"]
    assert "diff --git a/Makefile b/Makefile" in resource
    assert "Change read by JCT" in run_page
    assert "Makefile (A, +2 -0)" in run_page
    assert "Files outside target_path" in evidence_page
    assert both["code"] == "INVALID_ARGUMENT"


async def test_the_diff_resource_of_an_unverifiable_run_says_why(connect: ClientFactory) -> None:
    async with connect() as client:
        task_id = await enqueue(client, "myorg/api")
        claimed = await claim(client, task_id)
        text = await page(client, f"jct://runs/{claimed['run_id']}/diff")
    assert text.startswith("# JCT has no diff of this run")
