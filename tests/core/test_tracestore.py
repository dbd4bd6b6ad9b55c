from __future__ import annotations

import hashlib
import os
import time
import uuid
from pathlib import Path

import pytest

from server.core.tracestore import TraceStore, sanitize_name
from server.errors import ErrorCode, JctError

RUN_ID = "0b6f4a52-3c1e-4f5e-9a7d-2f1c8e9b0a11"


@pytest.fixture
def store(tmp_path: Path) -> TraceStore:
    return TraceStore(tmp_path / "traces", max_bytes=1024)


def all_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_write_then_read_round_trips(store: TraceStore) -> None:
    stored = store.write(RUN_ID, "pytest output.log", "héllo\nworld\n".encode())
    assert stored.path.parent == store.run_dir(RUN_ID) / "artifacts"
    assert stored.uri == stored.path.as_uri()
    assert store.read_text(stored.uri) == ("héllo\nworld\n", 12, False)


def test_write_records_sha256_and_size(store: TraceStore) -> None:
    content = b"diff --git a/x b/x\n"
    stored = store.write(RUN_ID, "patch", content)
    assert stored.size_bytes == len(content)
    assert stored.sha256 == hashlib.sha256(content).hexdigest()
    assert stored.path.read_bytes() == content


def test_file_name_keeps_title_and_extension_with_hash_suffix(store: TraceStore) -> None:
    stored = store.write(RUN_ID, "report.md", b"# hi")
    assert stored.path.name == f"report-{hashlib.sha256(b'# hi').hexdigest()[:8]}.md"


def test_same_title_different_content_does_not_clobber(store: TraceStore) -> None:
    first = store.write(RUN_ID, "log", b"one")
    second = store.write(RUN_ID, "log", b"two")
    assert first.path != second.path
    assert first.path.read_bytes() == b"one"
    assert second.path.read_bytes() == b"two"


def test_same_title_same_content_reuses_the_file(store: TraceStore) -> None:
    first = store.write(RUN_ID, "log", b"same")
    second = store.write(RUN_ID, "log", b"same")
    assert first == second
    assert len(all_files(store.root)) == 1


def test_write_leaves_no_temp_files(store: TraceStore) -> None:
    for n in range(5):
        store.write(RUN_ID, "log", f"content {n}".encode())
    names = [p.name for p in all_files(store.root)]
    assert len(names) == 5
    assert not [n for n in names if n.startswith(".")]


@pytest.mark.parametrize(
    "title",
    [
        "..",
        ".",
        "../../etc/passwd",
        "/abs/path",
        "C:\\x\\y",
        "a\x00b",
        "tab\tand\nnewline",
        "\uff0e\uff0e\uff0fescape",
        "..\u2215..\u2215etc",
        ".hidden",
        "-rf",
        "",
    ],
)
def test_traversal_titles_stay_inside_root(store: TraceStore, title: str) -> None:
    stored = store.write(RUN_ID, title, b"x")
    assert stored.path.resolve().is_relative_to((store.run_dir(RUN_ID) / "artifacts").resolve())
    assert not stored.path.name.startswith((".", "-"))
    assert store.owns(stored.uri)


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("..", "artifact"),
        ("", "artifact"),
        ("../../etc/passwd", "etc-passwd"),
        ("/abs", "abs"),
        ("C:\\x", "C-x"),
        ("a\x00b", "a-b"),
        ("\uff0e\uff0e\uff0fsecret", "secret"),
        ("Test Report (final).md", "Test-Report-final-.md"),
        ("ok_name-1.txt", "ok_name-1.txt"),
    ],
)
def test_sanitize_name(title: str, expected: str) -> None:
    assert sanitize_name(title) == expected


def test_sanitize_name_caps_length() -> None:
    assert sanitize_name("a" * 500) == "a" * 80


def test_oversize_content_is_refused_and_nothing_written(store: TraceStore) -> None:
    with pytest.raises(JctError) as caught:
        store.write(RUN_ID, "big", b"x" * 1025)
    assert caught.value.code is ErrorCode.PAYLOAD_TOO_LARGE
    assert "1025" in caught.value.message
    assert "1024" in caught.value.message
    assert "URI" in caught.value.suggestion
    assert not store.root.exists() or all_files(store.root) == []


def test_content_exactly_at_limit_is_accepted(store: TraceStore) -> None:
    assert store.write(RUN_ID, "full", b"x" * 1024).size_bytes == 1024


@pytest.mark.parametrize(
    "run_id",
    ["", "not-a-uuid", "../" + RUN_ID, RUN_ID.upper(), RUN_ID.replace("-", ""), "{" + RUN_ID + "}"],
)
def test_bad_run_id_is_rejected(store: TraceStore, run_id: str) -> None:
    with pytest.raises(JctError) as caught:
        store.write(run_id, "log", b"x")
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    with pytest.raises(JctError):
        store.run_dir(run_id)


def test_run_dir_is_under_root(store: TraceStore) -> None:
    run_id = str(uuid.uuid4())
    assert store.run_dir(run_id) == store.root / "runs" / run_id


def test_read_text_slices_and_reports_truncation(store: TraceStore) -> None:
    stored = store.write(RUN_ID, "log", b"0123456789")
    assert store.read_text(stored.uri, 0, 4) == ("0123", 10, True)
    assert store.read_text(stored.uri, 4, 4) == ("4567", 10, True)
    assert store.read_text(stored.uri, 8, 4) == ("89", 10, False)
    assert store.read_text(stored.uri, 6, 4) == ("6789", 10, False)
    assert store.read_text(stored.uri, 50, 4) == ("", 10, False)


def test_read_text_counts_characters_not_bytes_and_replaces_bad_utf8(store: TraceStore) -> None:
    stored = store.write(RUN_ID, "log", "ééé".encode() + b"\xff")
    assert store.read_text(stored.uri, 1, 2) == ("éé", 4, True)
    assert store.read_text(stored.uri, 3) == ("\ufffd", 4, False)


@pytest.mark.parametrize(("offset", "max_chars"), [(-1, 10), (0, 0), (0, -5)])
def test_read_text_rejects_bad_window(store: TraceStore, offset: int, max_chars: int) -> None:
    stored = store.write(RUN_ID, "log", b"abc")
    with pytest.raises(JctError) as caught:
        store.read_text(stored.uri, offset, max_chars)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT


def test_foreign_uri_is_rejected(store: TraceStore, tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    sneaky = (store.root / "runs" / RUN_ID / ".." / ".." / ".." / "secret.txt").as_uri()
    for uri in [outside.as_uri(), sneaky, "https://example.com/x.log", "file://otherhost" + str(outside), "nonsense"]:
        assert not store.owns(uri)
        with pytest.raises(JctError) as caught:
            store.read_text(uri)
        assert caught.value.code is ErrorCode.ARTIFACT_NOT_FOUND


def test_symlink_out_of_root_is_not_owned(store: TraceStore, tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    link_dir = store.run_dir(RUN_ID) / "artifacts"
    link_dir.mkdir(parents=True)
    (link_dir / "link.txt").symlink_to(outside)
    assert not store.owns((link_dir / "link.txt").as_uri())


def test_missing_file_inside_root_is_not_found(store: TraceStore) -> None:
    uri = (store.run_dir(RUN_ID) / "artifacts" / "gone.log").as_uri()
    assert store.owns(uri)
    with pytest.raises(JctError) as caught:
        store.read_text(uri)
    assert caught.value.code is ErrorCode.ARTIFACT_NOT_FOUND


def test_owns_rejects_the_root_itself_and_null_bytes(store: TraceStore) -> None:
    assert not store.owns(store.root.as_uri())
    assert not store.owns(store.root.as_uri() + "/runs/%00x")


def test_staged_content_is_placed_once_and_discarding_it_then_keeps_it(store: TraceStore) -> None:
    staged = store.stage("log", b"one")
    assert all_files(store.root) == [staged.temp], "staged outside every run"
    placed = store.place(RUN_ID, staged)
    assert store.place(RUN_ID, staged) == placed, "a transaction tried again finds it placed"
    store.discard(staged)
    assert all_files(store.root) == [placed.path]
    assert placed.path.read_bytes() == b"one"


def test_staged_content_already_in_the_run_is_kept_once(store: TraceStore) -> None:
    first = store.write(RUN_ID, "log", b"same")
    second = store.place(RUN_ID, store.stage("log", b"same"))
    assert first == second
    assert all_files(store.root) == [first.path]


def test_discarded_content_leaves_nothing(store: TraceStore) -> None:
    staged = store.stage("log", b"refused")
    store.discard(staged)
    store.discard(staged)
    assert all_files(store.root) == []


def test_staging_is_refused_over_the_limit_and_writes_nothing(store: TraceStore) -> None:
    with pytest.raises(JctError) as caught:
        store.stage("big", b"x" * 2048)
    assert caught.value.code is ErrorCode.PAYLOAD_TOO_LARGE
    assert all_files(store.root) == []


def test_the_sweep_removes_only_staged_files_left_long_ago(store: TraceStore) -> None:
    old, new = store.stage("a", b"old"), store.stage("b", b"new")
    hour_ago = time.time() - 3600
    os.utime(old.temp, (hour_ago, hour_ago))
    placed = store.place(RUN_ID, store.stage("c", b"placed"))
    assert store.sweep_staging(older_than=600) == 1
    assert all_files(store.root) == sorted([new.temp, placed.path])
