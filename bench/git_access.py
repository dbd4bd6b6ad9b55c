"""How JCT should read git (DESIGN section 13): the git CLI in a subprocess, dulwich, or pygit2.

Generates a repository of 10,000 files and 5,000 commits with `git fast-import` (a few seconds), then times,
for each way, the reads JCT makes:

- log: the newest 20 commits of main (hash, parents, author, date, subject);
- log of a path: the newest 20 commits that touched one file;
- diff of a run: files changed with lines added/removed between HEAD~20 and HEAD (what `files_changed` is);
- diff of a large range: the same from the first commit to HEAD (thousands of files);
- show: one file's content at HEAD.

and what each costs to install on a fresh machine: `pip install` time and size into an empty virtualenv
(the libraries), `apt-cache show git` (the CLI). The libraries go into their own virtualenv under
`.cache/bench-git/` so the project's stays as `make` builds it; the timings run there, in one process per
way, each call repeated and its median taken. Results: bench/results/git_access.md (and .json).

    .venv/bin/python bench/git_access.py            # ~3 minutes on a quiet 2-core machine
    .venv/bin/python bench/git_access.py --quick    # 1,000 files, 500 commits: checks the harness
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "bench-git"
RESULTS = ROOT / "bench" / "results"
LIBRARIES = ("dulwich", "pygit2")
REPEAT = 7
GIT_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "LC_ALL": "C",
}


# --- the repository ------------------------------------------------------------------------


def generate(path: Path, files: int, commits: int) -> None:
    """One commit adding `files` files across 100 directories, then commits editing 3 files each."""
    subprocess.run(["git", "init", "--quiet", "--bare", str(path)], check=True, env=GIT_ENV)
    proc = subprocess.Popen(["git", "fast-import", "--quiet"], cwd=path, stdin=subprocess.PIPE, env=GIT_ENV)
    assert proc.stdin is not None
    out = proc.stdin
    stamp = 1_700_000_000

    def commit(n: int, edits: list[tuple[str, bytes]]) -> None:
        message = f"commit {n}".encode()
        out.write(b"commit refs/heads/main\n")
        out.write(f"mark :{n + 1}\n".encode())
        out.write(f"committer Bench <bench@example.com> {stamp + n * 60} +0000\n".encode())
        out.write(b"data %d\n%s\n" % (len(message), message))
        if n:
            out.write(f"from :{n}\n".encode())
        for name, data in edits:
            out.write(f"M 100644 inline {name}\n".encode())
            out.write(b"data %d\n%s\n" % (len(data), data))

    def name(i: int) -> str:
        return f"pkg{i % 100:02d}/module_{i:05d}.py"

    def body(i: int, version: int) -> bytes:
        return "".join(f"value_{i}_{line} = {version * line}\n" for line in range(40)).encode()

    commit(0, [(name(i), body(i, 0)) for i in range(files)])
    for n in range(1, commits):
        commit(n, [(name((n * 7 + k * 131) % files), body(n, n + k)) for k in range(3)])
    out.close()
    if proc.wait() != 0:
        raise SystemExit("git fast-import failed")
    subprocess.run(["git", "-C", str(path), "gc", "--quiet"], check=True, env=GIT_ENV)


# --- install cost --------------------------------------------------------------------------


def library_env(fresh: bool) -> tuple[Path, dict[str, Any]]:
    """A virtualenv with dulwich and pygit2; the time and size each install took into it."""
    venv = CACHE / "venv"
    python = venv / "bin" / "python"
    record = CACHE / "install.json"
    if fresh or not python.exists() or not record.exists():
        shutil.rmtree(venv, ignore_errors=True)
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        site = Path(
            subprocess.run(
                [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
        )
        costs: dict[str, Any] = {}
        for library in LIBRARIES:
            before = _tree_bytes(site)
            start = time.perf_counter()
            subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-cache-dir", library], check=True)
            took = time.perf_counter() - start
            version = subprocess.run(
                [str(python), "-c", f"import importlib.metadata as m; print(m.version('{library}'))"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            costs[library] = {"seconds": round(took, 1), "bytes": _tree_bytes(site) - before, "version": version}
        record.write_text(json.dumps(costs))
    return python, json.loads(record.read_text())


def git_install_cost() -> dict[str, Any]:
    version = subprocess.run(["git", "--version"], check=True, capture_output=True, text=True).stdout.strip()
    shown = subprocess.run(["apt-cache", "show", "git"], capture_output=True, text=True).stdout
    size = next((line.split(":", 1)[1].strip() for line in shown.splitlines() if line.startswith("Installed-Size")), "")
    return {"version": version, "installed_size_kib": int(size) if size.isdigit() else None}


def _tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


# --- the timings (run in the library virtualenv: stdlib, dulwich, pygit2 only) -----------------


def worker(repo: str, way: str) -> dict[str, float]:
    """Median milliseconds of each read, done `way`; every result is checked against the CLI's."""
    reads = _reads(way, repo)
    expected = _reads("cli", repo)
    timings: dict[str, float] = {}
    for name, read in reads.items():
        start = time.perf_counter()
        got = read()
        first = time.perf_counter() - start
        want = expected[name]()
        if got != want:
            raise SystemExit(f"{way} {name} differs from the git CLI: {str(got)[:200]} != {str(want)[:200]}")
        samples = [first * 1000]
        # A read that takes seconds is timed three times, not REPEAT: the order of magnitude is the finding.
        for _ in range(REPEAT - 1 if first < 1.0 else 2):
            start = time.perf_counter()
            read()
            samples.append((time.perf_counter() - start) * 1000)
        timings[name] = round(statistics.median(samples), 2)
    return timings


def _reads(way: str, repo: str) -> dict[str, Any]:
    target = "pkg07/module_00007.py"
    if way == "cli":
        return _cli_reads(repo, target)
    if way == "dulwich":
        return _dulwich_reads(repo, target)
    return _pygit2_reads(repo, target)


def _git(repo: str, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={repo}", *args], check=True, capture_output=True, text=True, env=GIT_ENV
    ).stdout


def _cli_reads(repo: str, target: str) -> dict[str, Any]:
    def log(path: str | None = None) -> list[str]:
        out = _git(repo, "log", "--format=%H", "-n", "20", "main", "--", *([path] if path else []))
        return out.split()

    def numstat(base: str) -> list[tuple[str, int, int]]:
        out = _git(repo, "diff", "--no-renames", "--numstat", "-z", base, "main")
        rows = [f.split("\t") for f in out.split("\0") if f]
        return sorted((r[2], int(r[0]), int(r[1])) for r in rows)

    return {
        "log 20": log,
        "log 20 of one path": lambda: log(target),
        "files changed, last 20 commits": lambda: numstat("main~20"),
        "files changed, whole history": lambda: numstat("main~" + str(_count(repo) - 1)),
        "show one file": lambda: _git(repo, "cat-file", "blob", f"main:{target}"),
    }


def _count(repo: str) -> int:
    return int(_git(repo, "rev-list", "--count", "main").strip())


def _dulwich_reads(repo: str, target: str) -> dict[str, Any]:
    from dulwich.diff_tree import tree_changes
    from dulwich.object_store import tree_lookup_path
    from dulwich.repo import Repo

    r = Repo(repo)

    def head() -> bytes:
        sha: bytes = r.refs[b"refs/heads/main"]
        return sha

    def log(path: str | None = None) -> list[str]:
        walker = r.get_walker(include=[head()], max_entries=20, paths=[path.encode()] if path else None)
        return [entry.commit.id.decode() for entry in walker]

    def ancestor(n: int) -> bytes:
        sha = head()
        for _ in range(n):
            sha = r[sha].parents[0]
        return sha

    def numstat(n: int) -> list[tuple[str, int, int]]:
        rows = []
        for change in tree_changes(r.object_store, r[ancestor(n)].tree, r[head()].tree):
            old = r[change.old.sha].data.splitlines() if change.old.sha else []
            new = r[change.new.sha].data.splitlines() if change.new.sha else []
            added, removed = _line_counts(old, new)
            rows.append(((change.new.path or change.old.path).decode(), added, removed))
        return sorted(rows)

    def show() -> str:
        _mode, sha = tree_lookup_path(r.__getitem__, r[head()].tree, target.encode())
        text: str = r[sha].data.decode()
        return text

    total = _count(repo)
    return {
        "log 20": log,
        "log 20 of one path": lambda: log(target),
        "files changed, last 20 commits": lambda: numstat(20),
        "files changed, whole history": lambda: numstat(total - 1),
        "show one file": show,
    }


def _line_counts(old: list[bytes], new: list[bytes]) -> tuple[int, int]:
    """Lines added and removed as a line diff counts them (dulwich has no numstat)."""
    import difflib

    added = removed = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            removed += i2 - i1
        if tag in ("replace", "insert"):
            added += j2 - j1
    return added, removed


def _pygit2_reads(repo: str, target: str) -> dict[str, Any]:
    import pygit2

    r = pygit2.Repository(repo)

    def head() -> Any:
        return r.revparse_single("main")

    def log(path: str | None = None) -> list[str]:
        out: list[str] = []
        for commit in r.walk(head().id, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.TIME):
            if path is not None and not _touches(commit, path):
                continue
            out.append(str(commit.id))
            if len(out) == 20:
                break
        return out

    def _entry(commit: Any, path: str) -> Any:
        try:
            return commit.tree[path].id
        except KeyError:
            return None

    def _touches(commit: Any, path: str) -> bool:
        mine = _entry(commit, path)
        if not commit.parents:
            return mine is not None
        return any(_entry(parent, path) != mine for parent in commit.parents)

    def numstat(base: str) -> list[tuple[str, int, int]]:
        diff = r.diff(r.revparse_single(base), head())
        rows = []
        for patch in diff:
            _context, added, removed = patch.line_stats
            rows.append((patch.delta.new_file.path, added, removed))
        return sorted(rows)

    def show() -> str:
        text: str = head().tree[target].data.decode()
        return text

    total = _count(repo)
    return {
        "log 20": log,
        "log 20 of one path": lambda: log(target),
        "files changed, last 20 commits": lambda: numstat("main~20"),
        "files changed, whole history": lambda: numstat(f"main~{total - 1}"),
        "show one file": show,
    }


# --- the run -------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1,000 files and 500 commits")
    parser.add_argument("--fresh", action="store_true", help="install the libraries again (measures install)")
    parser.add_argument("--from-json", type=Path, help="only write the markdown again from a results .json")
    parser.add_argument("--worker", nargs=2, metavar=("REPO", "WAY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return
    if args.from_json:
        args.from_json.with_suffix(".md").write_text(markdown(json.loads(args.from_json.read_text())))
        return
    files, commits = (1_000, 500) if args.quick else (10_000, 5_000)
    python, installs = library_env(args.fresh)
    with tempfile.TemporaryDirectory(prefix="jct-bench-git-") as tmp:
        repo = Path(tmp) / "repo.git"
        start = time.perf_counter()
        generate(repo, files, commits)
        generated = time.perf_counter() - start
        timings = {}
        for way in ("cli", *LIBRARIES):
            done = subprocess.run(
                [str(python), __file__, "--worker", str(repo), way], check=True, capture_output=True, text=True
            )
            timings[way] = json.loads(done.stdout)
            print(way, timings[way], flush=True)
    report = {
        "files": files,
        "commits": commits,
        "generate_seconds": round(generated, 1),
        "timings_ms": timings,
        "install": {"git": git_install_cost(), **installs},
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load": os.getloadavg()},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    suffix = "-quick" if args.quick else ""
    (RESULTS / f"git_access{suffix}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"git_access{suffix}.md").write_text(markdown(report))
    print(f"wrote {RESULTS / f'git_access{suffix}.md'}")


def _ms(value: float) -> str:
    return f"{value:,.2f}" if value < 10 else f"{value:,.0f}"


def markdown(report: dict[str, Any]) -> str:
    timings = report["timings_ms"]
    reads = list(timings["cli"])
    lines = [
        "# Reading git: the CLI, dulwich, pygit2",
        "",
        f"A bare repository of {report['files']:,} files and {report['commits']:,} commits, generated with "
        f"`git fast-import` in {report['generate_seconds']} s (`bench/git_access.py`). Median of {REPEAT} calls "
        "(3 for a read over a second), "
        "milliseconds, one process per way; each result was first checked equal to the CLI's. The CLI figure "
        "includes starting `git` (JCT pays it on every read).",
        "",
        "| read | git CLI | dulwich | pygit2 |",
        "|---|---|---|---|",
    ]
    for read in reads:
        cells = [_ms(timings[way][read]) for way in ("cli", *LIBRARIES)]
        lines.append(f"| {read} | " + " | ".join(cells) + " |")
    install = report["install"]
    git = install["git"]
    lines += [
        "",
        "Install on a fresh machine:",
        "",
        f"- git CLI: {git['version']}; Debian package `git`, installed size "
        f"{git['installed_size_kib'] or '?'} KiB; already on every machine that holds the repositories.",
    ]
    for library in LIBRARIES:
        cost = install[library]
        lines.append(
            f"- {library} {cost['version']}: `pip install` {cost['seconds']} s into an empty virtualenv, "
            f"{cost['bytes'] / 1e6:.1f} MB"
            + (" (a wheel with libgit2 and cffi inside)" if library == "pygit2" else " (a wheel with C speedups)")
        )
    machine = report["machine"]
    lines += [
        "",
        f"Machine: Python {machine['python']}, {machine['cpus']} CPUs, load average "
        + ", ".join(f"{x:.2f}" for x in machine["load"])
        + " (a shared machine: compare the columns, not the absolute figures).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
