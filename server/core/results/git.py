"""What the git reads return: a log, and a diff or a commit as text."""

from __future__ import annotations

from pydantic import Field

from server.core.results.shape import Ok, Shape


class GitCommit(Shape):
    commit: str
    parents: list[str]
    author: str
    date: str
    subject: str


class GitTag(Shape):
    name: str
    commit: str = Field(description="The commit it points at.")
    date: str
    subject: str


class GitLog(Ok):
    repo: str
    ref: str
    head: str = Field(description="The commit ref named when JCT read it.")
    commits: list[GitCommit]
    tags: list[GitTag] | None = Field(None, description="With tags: the repository's tags, newest first.")
    next_cursor: str | None = None


class GitFile(Shape):
    """One file of a diff: A added, M modified, D deleted, R renamed (old_path), C copied, T type changed."""

    path: str
    status: str
    added: int | None = Field(None, description="Lines; none for a binary file.")
    removed: int | None = None
    old_path: str | None = None


class GitText(Ok):
    repo: str
    base: str | None = None
    head: str | None = None
    files: list[GitFile] | None = Field(None, description="A diff's files, before its text.")
    text: str = Field(description="Cut at max_chars with a '[... cut by JCT' marker when truncated.")
    truncated: bool
    total_chars: int
