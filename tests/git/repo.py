"""Real git repositories made in a test: a tiny helper over the git CLI (no mocked git)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_AUTHOR_NAME": "Ada",
    "GIT_AUTHOR_EMAIL": "ada@example.com",
    "GIT_COMMITTER_NAME": "Ada",
    "GIT_COMMITTER_EMAIL": "ada@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env=ENV, capture_output=True, text=True, check=True)
    return done.stdout.strip()


class Work:
    """A working tree with a `main` branch and one first commit."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        git(path, "init", "--quiet", "--initial-branch=main")
        self.write("README.md", "hello\n")
        self.write("src/app.py", "print('hi')\n")
        self.commit("first")

    def write(self, name: str, text: str | bytes) -> Path:
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            target.write_bytes(text)
        else:
            target.write_text(text)
        return target

    def commit(self, message: str, *, author: str | None = None, date: str | None = None) -> str:
        """Commit everything; `author` as "Name <email>", `date` as git takes it (e.g. "1700000000 +0200")."""
        git(self.path, "add", "-A")
        extra = [f"--author={author}"] if author else []
        extra += [f"--date={date}"] if date else []
        git(self.path, "commit", "--quiet", "--allow-empty", *extra, "-m", message)
        return self.head()

    def checkout(self, *args: str) -> None:
        git(self.path, "checkout", "--quiet", *args)

    def diverge(self, run: tuple[str, str], main: tuple[str, str]) -> tuple[str, str]:
        """From main's tip, a branch `run` whose one commit writes `run` (name, text), and main moved on by one
        commit writing `main`; main is checked out again. (the run's head, main's new tip)."""
        self.checkout("-b", "run")
        self.write(*run)
        head = self.commit("the run's change")
        self.checkout("main")
        self.write(*main)
        return head, self.commit("main moves")

    def status(self) -> str:
        return git(self.path, "status", "--porcelain")

    def refs(self) -> str:
        """Every ref and what it points at: to show nothing moved."""
        return git(self.path, "for-each-ref", "--format=%(refname) %(objectname)")

    def head(self, ref: str = "HEAD") -> str:
        return git(self.path, "rev-parse", ref)

    def git(self, *args: str) -> str:
        return git(self.path, *args)


def bare_clone(source: Path, target: Path) -> Path:
    git(source.parent, "clone", "--quiet", "--bare", str(source), str(target))
    return target


def alive(pid: int) -> bool:
    """The process exists and is not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):  # gone, or being reaped as it is read
        return False
    return state != "Z"
