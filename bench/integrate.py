"""Integrating a one-file change into a repository of 10,000 files (DESIGN section 16): JCT's replay and
compare-and-swap beside the bare git commands they need, run directly.

Generates a repository with `git fast-import`: one commit of 10,000 files in 100 directories, a branch `run` with
a one-file change off it, and `main` moved on by one commit to another file. Each round puts `main` back where it
was (untimed), then times one of

- JCT: `merges.replay(strategy="rebase")` then `merges.move_ref` (anyio subprocesses with timeouts and output
  caps, the neutral-configuration look-up, the parsing);
- bare: the same git commands with the same arguments and environment, each one `subprocess.run`, parsed just
  enough to feed the next (check command excluded, as in the goal);

alternating which goes first, after a warm-up of each. Before the timed rounds one JCT round is recorded (every
git command gitcli ran) and compared with the bare round's commands, commit ids aside: the two stay the same
commands if replay changes. Medians over the rounds and their ratio (goal: JCT at most 1.5x), and the median of
each round's ratio to the bare round beside it ("paired": the steadier figure on a busy machine). Two variants: a
bare repository (a shared server's location) and a working tree whose checkout is on another branch (a local
repository with `JCT_AUTH=none`).

    .venv/bin/python bench/integrate.py                       # 10,000 files, 150 rounds per variant (~1 minute)
    .venv/bin/python bench/integrate.py --rounds 10 --files 1000
    .venv/bin/python bench/integrate.py --json bench/results/integrate.json

`make bench` runs it too (bench/suite.py, workload `integrate`): the summary row and section 6 of RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from server.core.git import gitcli, merges

TARGET = 1.5
WITHIN = 60.0
GIT_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "LC_ALL": "C",
}
_HEX = re.compile(r"[0-9a-f]{40}")


# --- the repository ------------------------------------------------------------------------------------------


def generate(path: Path, files: int) -> tuple[str, str, str]:
    """A bare repository: `files` files in one commit (base), `run` one commit off it changing one file (head),
    `main` one commit off it changing another (onto). Returns (base, head, onto)."""
    subprocess.run(["git", "init", "--quiet", "--bare", "--initial-branch=main", str(path)], check=True, env=GIT_ENV)
    proc = subprocess.Popen(["git", "fast-import", "--quiet"], cwd=path, stdin=subprocess.PIPE, env=GIT_ENV)
    assert proc.stdin is not None
    out = proc.stdin
    stamp = 1_700_000_000

    def name(i: int) -> str:
        return f"pkg{i % 100:02d}/module_{i:05d}.py"

    def body(i: int, version: int) -> bytes:
        return "".join(f"value_{i}_{line} = {version * line}\n" for line in range(40)).encode()

    def commit(ref: str, mark: int, parent: int | None, message: str, edits: list[tuple[str, bytes]]) -> None:
        out.write(f"commit {ref}\nmark :{mark}\n".encode())
        out.write(f"author Bench <bench@example.com> {stamp + mark * 60} +0000\n".encode())
        out.write(f"committer Bench <bench@example.com> {stamp + mark * 60} +0000\n".encode())
        out.write(b"data %d\n%s\n" % (len(message), message.encode()))
        if parent is not None:
            out.write(f"from :{parent}\n".encode())
        for path_name, data in edits:
            out.write(f"M 100644 inline {path_name}\n".encode())
            out.write(b"data %d\n%s\n" % (len(data), data))

    commit("refs/heads/main", 1, None, "10,000 files", [(name(i), body(i, 0)) for i in range(files)])
    commit("refs/heads/run", 2, 1, "the run's one-file change", [(name(7), body(7, 1))])
    commit("refs/heads/main", 3, 1, "main moves on", [(name(4242 % files), body(4242, 1))])
    out.close()
    if proc.wait() != 0:
        raise SystemExit("git fast-import failed")
    subprocess.run(["git", "-C", str(path), "gc", "--quiet"], check=True, env=GIT_ENV)
    revs = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "main~1", "run", "main"], check=True, env=GIT_ENV, capture_output=True
    )
    base, head, onto = revs.stdout.decode().split()
    return base, head, onto


def working_tree(bare: Path, path: Path) -> None:
    """A clone with every branch, its checkout on `work` (not the integrated `main`)."""
    subprocess.run(["git", "clone", "--quiet", str(bare), str(path)], check=True, env=GIT_ENV)
    subprocess.run(["git", "-C", str(path), "fetch", "--quiet", "origin", "run:run"], check=True, env=GIT_ENV)
    subprocess.run(["git", "-C", str(path), "checkout", "--quiet", "-b", "work"], check=True, env=GIT_ENV)


# --- the two ways ------------------------------------------------------------------------------------------------


async def jct_round(repo: gitcli.Repo, base: str, head: str, onto: str) -> str:
    done = await merges.replay(repo, onto=onto, base=base, head=head, strategy="rebase", message="", within=WITHIN)
    assert done.commit is not None
    assert await merges.move_ref(repo, "main", done.commit, onto, within=WITHIN)
    return done.commit


def bare_round(repo: gitcli.Repo, base: str, head: str, onto: str, commands: list[list[str]]) -> str:
    """The git commands replay (rebase, one commit) and move_ref run, each a plain subprocess.run."""
    prefix = [*repo.base_args(), *gitcli._OFFLINE]
    cwd = repo.path if repo.worktree else None

    def git(args: Sequence[str], env: dict[str, str] | None = None, input: bytes | None = None) -> bytes:
        argv = [*prefix, *args]
        commands.append(argv)
        done = subprocess.run(
            argv,
            cwd=cwd,
            env=env if env is not None else gitcli.environment(),
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
        )
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(args)} failed: {done.stderr.decode()}")
        return done.stdout

    onto, base, head, onto_tree = (
        git(["rev-parse", f"{onto}^{{commit}}", f"{base}^{{commit}}", f"{head}^{{commit}}", f"{onto}^{{tree}}"])
        .decode()
        .split()[-4:]
    )
    log = git(
        [
            "log",
            "--first-parent",
            "--reverse",
            "--no-color",
            "--encoding=UTF-8",
            "--date=raw",
            "-z",
            "--format=%H%x00%P%x00%T%x00%an%x00%ae%x00%ad%x00%B",
            "--end-of-options",
            f"^{base}",
            f"^{onto}",
            head,
            "--",
        ]
    )
    *fields, message = log.removesuffix(b"\0").split(b"\0")
    sha, parent, _tree, name, email, date = (f.decode() for f in fields)
    git(["config", "--null", "--name-only", "--get-regexp", r"^(filter|merge)\."])
    stand_in = git(
        ["commit-tree", "--no-gpg-sign", "-p", parent, onto_tree], env=gitcli.write_env(), input=b"jct: replay base\n"
    )
    merged = git(
        [
            "merge-tree",
            "--write-tree",
            "--name-only",
            "--no-messages",
            "--allow-unrelated-histories",
            "-z",
            stand_in.decode().strip(),
            sha,
        ]
    )
    tree = merged.split(b"\0")[0].decode()
    new = git(
        ["commit-tree", "--no-gpg-sign", "-p", onto, tree],
        env=gitcli.write_env(author=(name, email, date)),
        input=message,
    )
    git(
        ["update-ref", "-m", "jct: integrate", "--end-of-options", "refs/heads/main", new.decode().strip(), onto],
        env=gitcli.write_env(),
    )
    return new.decode().strip()


def reset(repo: gitcli.Repo, onto: str) -> None:
    git_dir = repo.path / ".git" if repo.worktree else repo.path
    subprocess.run(["git", f"--git-dir={git_dir}", "update-ref", "refs/heads/main", onto], check=True, env=GIT_ENV)


def masked(commands: list[list[str]]) -> list[list[str]]:
    return [[_HEX.sub("<sha>", arg) for arg in argv] for argv in commands]


async def recorded_jct_round(repo: gitcli.Repo, base: str, head: str, onto: str) -> list[list[str]]:
    """Every git command one JCT round runs (gitcli.Batch.run starts every git process JCT runs)."""
    commands: list[list[str]] = []
    original = gitcli.Batch.run

    def recording(self: gitcli.Batch, args: Sequence[str], **kwargs: Any) -> gitcli.Output:
        commands.append(list(args))
        return original(self, args, **kwargs)

    gitcli.Batch.run = recording  # type: ignore[method-assign]
    try:
        await jct_round(repo, base, head, onto)
    finally:
        gitcli.Batch.run = original  # type: ignore[method-assign]
    return commands


async def measure_variant(repo: gitcli.Repo, base: str, head: str, onto: str, rounds: int) -> dict[str, Any]:
    jct_commands = await recorded_jct_round(repo, base, head, onto)
    reset(repo, onto)
    bare_commands: list[list[str]] = []
    bare_round(repo, base, head, onto, bare_commands)
    reset(repo, onto)
    if masked(jct_commands) != masked(bare_commands):
        raise SystemExit(
            "the bare round no longer runs JCT's commands:\n"
            + "\n".join(" ".join(c) for c in masked(jct_commands))
            + "\n--- bare ---\n"
            + "\n".join(" ".join(c) for c in masked(bare_commands))
        )
    jct: list[float] = []
    bare: list[float] = []
    for i in range(rounds + 2):  # the first two pairs warm up
        pair: dict[str, float] = {}
        for way in ("jct", "bare") if i % 2 == 0 else ("bare", "jct"):
            started = time.perf_counter()
            if way == "jct":
                await jct_round(repo, base, head, onto)
            else:
                bare_round(repo, base, head, onto, [])
            pair[way] = (time.perf_counter() - started) * 1000
            reset(repo, onto)
        if i >= 2:
            jct.append(pair["jct"])
            bare.append(pair["bare"])
    jct_ms, bare_ms = statistics.median(jct), statistics.median(bare)
    return {
        "commands": len(jct_commands),
        "jct_ms": jct_ms,
        "bare_ms": bare_ms,
        "ratio": jct_ms / bare_ms,
        # each JCT round against the bare one beside it (same moment, same load): steadier on a busy machine
        "paired_ratio": statistics.median(j / b for j, b in zip(jct, bare, strict=True)),
        "jct_samples_ms": jct,
        "bare_samples_ms": bare,
    }


async def measure(home: Path, files: int, rounds: int, log: Any = print) -> dict[str, Any]:
    """Both variants; what bench/suite.py stores under results["integrate"]."""
    started = time.perf_counter()
    home.mkdir(parents=True, exist_ok=True)
    bare_path = home / "integrate.git"
    base, head, onto = generate(bare_path, files)
    tree_path = home / "integrate-tree"
    working_tree(bare_path, tree_path)
    log(f"  integrate: {files:,} files generated and checked out in {time.perf_counter() - started:.1f}s")
    variants: dict[str, Any] = {}
    for variant, repo in (
        ("bare repository", gitcli.Repo(bare_path)),
        ("working tree", gitcli.Repo(tree_path, worktree=True)),
    ):
        variants[variant] = result = await measure_variant(repo, base, head, onto, rounds)
        log(
            f"  integrate, {variant}: JCT {result['jct_ms']:.1f} ms, bare git {result['bare_ms']:.1f} ms "
            f"({result['commands']} git commands): {result['ratio']:.2f}x"
        )
    return {
        "files": files,
        "rounds": rounds,
        "target": TARGET,
        "git": _git_version(),
        "date": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "cores": os.cpu_count(),
        "load_after": os.getloadavg(),
        "variants": variants,
    }


def _git_version() -> str:
    return subprocess.run(["git", "--version"], check=True, capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--json", type=Path, help="also write the results (and every sample) here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="jct-bench-integrate-") as tmp:
        results = anyio.run(measure, Path(tmp), args.files, args.rounds)
    print(f"\n{results['git']}, {args.files:,} files, median of {args.rounds} rounds each, alternating:\n")
    print("| repository | git commands | JCT ms | bare git ms | JCT / bare | paired | goal |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for variant, r in results["variants"].items():
        verdict = "met" if r["ratio"] <= TARGET else "missed"
        print(
            f"| {variant} | {r['commands']} | {r['jct_ms']:.1f} | {r['bare_ms']:.1f} | {r['ratio']:.2f}x | "
            f"{r['paired_ratio']:.2f}x | ≤ {TARGET}x: {verdict} |"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
