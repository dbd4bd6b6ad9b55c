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


class GitLog(Ok):
    repo: str
    ref: str
    head: str = Field(description="The commit ref named when JCT read it.")
    commits: list[GitCommit]


class GitText(Ok):
    repo: str
    base: str | None = None
    head: str | None = None
    text: str = Field(description="Cut at max_chars with a '[... cut by JCT' marker when truncated.")
    truncated: bool
    total_chars: int
