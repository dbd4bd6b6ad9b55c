"""jct_git_log, jct_git_diff, jct_git_show and jct://runs/{run_id}/diff on real repositories made here."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from mcp import Client

from server.config import Settings
from tests.git.repo import ENV, Work
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
        files = {(f["path"], f["status"], f.get("added")) for f in diff["files"]}
        evidence_page = await page(client, f"jct://evidence/{result['done']['evidence_pack']['id']}")
        both = await error(client, "jct_git_diff", run_id=run_id, repo=str(work.path))
    assert diff["base"] == claimed["base_commit"]
    assert diff["head"] == work.head()
    assert "diff --git a/Makefile b/Makefile" in diff["text"]
    assert "Makefile" not in only_src["text"]
    assert ("Makefile", "A", 2) in files, files
    assert "Makefile" not in {f["path"] for f in only_src["files"]}
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


async def test_the_log_stops_at_since_ref_and_pages_with_a_cursor(connect: ClientFactory, tmp_path: Path) -> None:
    work = history(tmp_path)
    async with connect() as client:
        since = await ok(client, "jct_git_log", repo=str(work.path), since_ref="HEAD~3")
        assert [c["subject"] for c in since["commits"]] == ["guide", "module 2", "module 1"]
        assert "next_cursor" not in since
        first = await ok(client, "jct_git_log", repo=str(work.path), limit=2)
        assert [c["subject"] for c in first["commits"]] == ["guide", "module 2"]
        work.write("late.txt", "late\n")
        work.commit("late")  # the branch moves on: the pages go on with the list as it was read
        subjects, cursor = [], first["next_cursor"]
        while cursor:
            page_ = await ok(client, "jct_git_log", repo=str(work.path), limit=2, cursor=cursor)
            subjects += [c["subject"] for c in page_["commits"]]
            cursor = page_.get("next_cursor")
        assert subjects == ["module 1", "module 0", "first"]
        bounded = await ok(client, "jct_git_log", repo=str(work.path), since_ref="HEAD~4", limit=2)
        rest = await ok(client, "jct_git_log", repo=str(work.path), limit=2, cursor=bounded["next_cursor"])
        assert [c["subject"] for c in bounded["commits"] + rest["commits"]] == ["late", "guide", "module 2", "module 1"]
        assert "next_cursor" not in rest
        forged = await error(client, "jct_git_log", repo=str(work.path), cursor="not-a-cursor")
        assert forged["code"] == "INVALID_ARGUMENT"
        unknown = await error(client, "jct_git_log", repo=str(work.path), since_ref="nope")
        assert unknown["code"] == "COMMIT_NOT_FOUND"


async def test_the_log_lists_tags_newest_first_with_their_commits(
    connect: ClientFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = Work(tmp_path / "repo")
    work.write("a.txt", "a\n")
    monkeypatch.setitem(ENV, "GIT_COMMITTER_DATE", "2020-01-02T00:00:00Z")
    old = work.commit("old", date="2020-01-02T00:00:00Z")
    monkeypatch.delitem(ENV, "GIT_COMMITTER_DATE")
    work.git("tag", "v9-old", old)  # a lightweight tag: its commit's date
    work.write("b.txt", "b\n")
    new = work.commit("new")
    work.git("tag", "-a", "v1-new", "-m", "Release two", new)  # an annotated tag: its own date, now
    async with connect() as client:
        listed = await ok(client, "jct_git_log", repo=str(work.path), tags=True)
        one = await ok(client, "jct_git_log", repo=str(work.path), tags=True, limit=1)
        more = await ok(client, "jct_git_log", repo=str(work.path), tags=True, limit=1, cursor=one["next_cursor"])
    assert listed["commits"] == []
    assert [(t["name"], t["commit"], t["subject"]) for t in listed["tags"]] == [
        ("v1-new", new, "Release two"),
        ("v9-old", old, "old"),
    ]
    assert listed["tags"][1]["date"].startswith("2020-01-02")
    assert [t["name"] for t in one["tags"] + more["tags"]] == ["v1-new", "v9-old"]
    assert "next_cursor" not in more


async def test_a_diff_lists_its_files_before_its_text(connect: ClientFactory, tmp_path: Path) -> None:
    work = history(tmp_path)
    work.write("src/mod0.py", "value = 0\nother = 1\nthird = 2\n")
    (work.path / "src" / "mod1.py").unlink()
    work.write("assets/logo.png", b"\x89PNG\x00\x00" + bytes(range(256)))
    work.commit("change")
    async with connect() as client:
        diff = await ok(client, "jct_git_diff", repo=str(work.path), base="HEAD~1", head="HEAD")
        only_src = await ok(client, "jct_git_diff", repo=str(work.path), base="HEAD~1", head="HEAD", path="src")
    assert sorted((f["path"], f["status"], f.get("added"), f.get("removed")) for f in diff["files"]) == [
        ("assets/logo.png", "A", None, None),
        ("src/mod0.py", "M", 2, 0),
        ("src/mod1.py", "D", 0, 1),
    ]
    assert list(diff).index("files") < list(diff).index("text")
    assert {f["path"] for f in only_src["files"]} == {"src/mod0.py", "src/mod1.py"}


async def test_a_directory_listing_gives_each_files_size(connect: ClientFactory, tmp_path: Path) -> None:
    work = history(tmp_path)
    async with connect() as client:
        listing = await ok(client, "jct_git_show", repo=str(work.path), ref="main", path="")
        src = await ok(client, "jct_git_show", repo=str(work.path), ref="main", path="src")
    assert re.search(r"^100644 blob [0-9a-f]+ +10\tmod0\.py$", src["text"], re.M), src["text"]
    assert re.search(r"^040000 tree [0-9a-f]+ +-\tsrc$", listing["text"], re.M), listing["text"]
