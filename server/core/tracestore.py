"""The trace store: inline artifact content kept on disk, under `<root>/runs/<run_id>/artifacts/`.

All I/O here is synchronous and blocking; async callers run these methods in a worker thread.

A report's content is made durable in two steps, so the costly one runs outside the database's write lock:
`stage` writes and fsyncs it under `<root>/staging/` before the transaction; `place`, inside it, renames it to
its name in the run (a rename and a directory fsync); `discard` removes what was not placed. A row therefore
only ever names content already on the disk. A report refused before it placed its content (the fence, the
run's byte cap, a database that is away) leaves nothing behind; one whose commit fails after the rename
leaves the file in the run, where a retry finds it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
import unicodedata
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

from server.errors import ErrorCode, JctError, invalid

MAX_NAME_CHARS = 80
MANIFEST = "manifest.json"
STAGING = "staging"
# Longer hash suffixes to fall back on if two different contents ever share the short one.
_SUFFIX_LENGTHS = (8, 16, 64)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class StoredContent:
    uri: str
    path: Path
    size_bytes: int
    sha256: str


@dataclass(frozen=True)
class Staged:
    """Content written and fsynced under staging/, not yet in a run (`TraceStore.stage`)."""

    temp: Path
    name: str
    content: bytes
    sha256: str


def sanitize_name(title: str) -> str:
    """Turn any title into one safe file-name component that cannot escape its directory or hide."""
    # NFKC first, so look-alikes such as fullwidth dots and slashes become plain ASCII before filtering.
    name = _UNSAFE.sub("-", unicodedata.normalize("NFKC", title))
    name = name.lstrip(".-")[:MAX_NAME_CHARS].rstrip(".-")
    return name or "artifact"


def _file_name(name: str, digest: str, length: int) -> str:
    stem, dot, ext = sanitize_name(name).rpartition(".")
    if dot and stem:
        return f"{stem}-{digest[:length]}.{ext}"
    return f"{ext}-{digest[:length]}"


def _check_run_id(run_id: str) -> None:
    try:
        canonical = str(uuid.UUID(run_id)) == run_id
    except (TypeError, ValueError, AttributeError):
        canonical = False
    if not canonical:
        raise invalid(
            f"run_id {run_id!r} is not a canonical UUID.",
            "Pass the run_id exactly as it was returned when the task was claimed.",
        )


class TraceStore:
    """Artifact content files for runs: written atomically, named by title and content hash, never overwritten."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must not be negative")
        self.root = root.resolve()
        self.max_bytes = max_bytes

    def run_dir(self, run_id: str) -> Path:
        _check_run_id(run_id)
        return self.root / "runs" / run_id

    def write(self, run_id: str, name: str, content: bytes) -> StoredContent:
        """Store content for a run under a name derived from `name`; identical content is written once."""
        return self.place(run_id, self.stage(name, content))

    def stage(self, name: str, content: bytes) -> Staged:
        """Write `content` to a new file under staging/ and fsync it: the costly half of storing it."""
        if len(content) > self.max_bytes:
            raise JctError(
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"Artifact content is {len(content)} bytes; the limit is {self.max_bytes} bytes.",
                "Report a URI to content stored elsewhere instead, or split the content into smaller artifacts.",
            )
        directory = self.root / STAGING
        directory.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(content)
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
        return Staged(Path(temp), name, content, hashlib.sha256(content).hexdigest())

    def place(self, run_id: str, staged: Staged) -> StoredContent:
        """Move staged content to its name in the run (identical content is kept once) and make the rename durable.
        Placing the same `staged` twice (a transaction tried again) finds it placed."""
        directory = self.run_dir(run_id) / "artifacts"
        _make_dirs_durably(directory)
        for length in _SUFFIX_LENGTHS:
            path = self._inside_root(directory / _file_name(staged.name, staged.sha256, length))
            if not path.exists():
                os.replace(staged.temp, path)
                _fsync_dir(directory)
                break
            if path.read_bytes() == staged.content:
                self.discard(staged)
                _fsync_dir(directory)  # its rename may not be durable yet: a process killed before its fsync
                break
        else:  # pragma: no cover - needs a full sha256 collision
            raise JctError(ErrorCode.INTERNAL_ERROR, f"Could not find a free file name for {staged.name!r}.")
        return StoredContent(uri=path.as_uri(), path=path, size_bytes=len(staged.content), sha256=staged.sha256)

    def discard(self, staged: Staged) -> None:
        """Remove staged content that was not placed (the report was refused); placed content stays."""
        staged.temp.unlink(missing_ok=True)

    def sweep_staging(self, older_than: float) -> int:
        """Remove staged files older than `older_than` seconds: a process killed between stage and place left
        them. How many went."""
        try:
            entries = list((self.root / STAGING).iterdir())
        except FileNotFoundError:
            return 0
        cutoff = time.time() - older_than
        removed = 0
        for entry in entries:
            try:
                if entry.stat().st_mtime < cutoff:
                    entry.unlink()
                    removed += 1
            except FileNotFoundError:
                continue
        return removed

    def write_manifest(self, run_id: str, manifest: dict[str, Any]) -> None:
        """What a run left (review/manifest.py), written atomically as `runs/<run_id>/manifest.json`.

        Not fsynced: it is made from what the database holds, so a power loss that takes it (the file missing or
        not whole) costs a file the run's page or a retried completion writes again (`manifest.record`), never a
        record; the fsyncs of file and directory were most of a completion's own time on this path
        (bench/README.md)."""
        content = json.dumps(manifest, indent=2, sort_keys=True).encode()
        _write_atomically(self._inside_root(self.run_dir(run_id) / MANIFEST), content, durable=False)

    def read_manifest(self, run_id: str) -> dict[str, Any] | None:
        """The run's manifest, or None when none was written (the run has not completed)."""
        path = self.run_dir(run_id) / MANIFEST
        try:
            found = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except ValueError:  # not whole: a power loss took it before the disk had it (not fsynced), or a hand edit
            return None
        return found if isinstance(found, dict) else None

    def file_in_run(self, run_id: str, uri: str) -> str | None:
        """A stored artifact's file, relative to its run's directory (`artifacts/x-1a2b3c4d.diff`)."""
        path = self._path_of(uri)
        run_dir = self.run_dir(run_id).resolve()
        if path is None or not path.is_relative_to(run_dir):
            return None
        return path.relative_to(run_dir).as_posix()

    def read_text(self, uri: str, offset: int = 0, max_chars: int = 20000) -> tuple[str, int, bool]:
        """Return (text slice, total chars, whether more text follows the slice) for a stored file."""
        if offset < 0:
            raise invalid(f"offset must be 0 or more, got {offset}.")
        if max_chars < 1:
            raise invalid(f"max_chars must be 1 or more, got {max_chars}.")
        path = self._path_of(uri)
        if path is None or not path.is_file():
            raise JctError(
                ErrorCode.ARTIFACT_NOT_FOUND,
                f"No stored artifact content at {uri!r}.",
                "Only content stored by this server can be read; fetch other URIs directly.",
            )
        text = path.read_bytes().decode("utf-8", errors="replace")
        return text[offset : offset + max_chars], len(text), offset + max_chars < len(text)

    def owns(self, uri: str) -> bool:
        """True if `uri` is a file URI pointing inside this store's root."""
        return self._path_of(uri) is not None

    def _path_of(self, uri: str) -> Path | None:
        parsed = urlparse(uri)
        if parsed.scheme != "file" or parsed.netloc not in ("", "localhost") or parsed.query or parsed.fragment:
            return None
        try:
            # resolve() folds "..", and symlinks, so nothing outside the root can pass for inside.
            path = Path(url2pathname(parsed.path)).resolve()
        except (OSError, ValueError):
            return None
        return path if path != self.root and path.is_relative_to(self.root) else None

    def _inside_root(self, path: Path) -> Path:
        resolved = path.resolve()
        if not resolved.is_relative_to(self.root):
            raise JctError(ErrorCode.INTERNAL_ERROR, f"Refusing to write outside the trace store: {resolved}.")
        return resolved


def _write_atomically(path: Path, content: bytes, *, durable: bool = True) -> None:
    """Write via a temp file in the same directory, so readers only ever see a whole file or none; `durable`:
    on the disk (file and rename fsynced) before it returns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Temp names start with "." and sanitized names never do, so the two cannot collide.
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    if durable:
        _fsync_dir(path.parent)


def _make_dirs_durably(directory: Path) -> None:
    """mkdir -p, each directory it makes made durable in its parent (a run's first report makes two)."""
    if directory.is_dir():
        return
    _make_dirs_durably(directory.parent)
    try:
        directory.mkdir()
    except FileExistsError:
        return  # another report of the run made it
    _fsync_dir(directory.parent)


def _fsync_dir(directory: Path) -> None:
    # Makes the rename itself durable; some platforms cannot open directories, which is fine to skip.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
