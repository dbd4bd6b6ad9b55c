"""A fleet of SDK agents works one mission on one repository whose tasks share files (DESIGN section 16).

One `jct serve` (streamable HTTP, its own JCT_HOME, SQLite by default) and a generated git repository: a local
working tree with `main` checked out (a few hundred files), integrable since JCT_AUTH=none. A 30-task mission in
two phases: five chains of four tasks and four lone tasks, then six tasks that wait for the whole first phase,
so its critical path is five tasks deep. Each task writes its own line into one to three files drawn from a pool
of ten shared ones, and a file of its own. In a shared file the line goes into the task's slot (slots are apart,
so two tasks filling theirs merge cleanly) or, for a third of the edits, at the end: two tasks that append to one
file at once conflict when the second is merged, and it goes back to the queue.

Ten agents, each a real `mcp.Client` over streamable HTTP (legacy and 2026-07-28 handshakes alternating), loop:
`jct_claim_next`; on a claim they work `--work-seconds`, write their lines in the claim's workspace, commit and
`jct_complete_task`; with nothing claimable they read `jct_get_mission` and stop once it is completed, else wait
a moment and claim again. A task sent back after a conflict is claimed again by whoever asks first, in a new
workspace on the current main, and redone there.

At the end: every task's integration is `merged`, main holds each task's lines exactly once (none lost, none
twice, nothing else changed), the user's checkout is clean at main and no run's branch is left; conflicts sent
back (the audit log's `task.requeued` for a conflict) and tasks redone; wall time (the mission's created_at to
completed_at) against the critical path, both nominal (depth x work seconds) and measured (the longest chain by
the time agents spent on its tasks, redone runs included). Writes bench/results/fleet.json and the fleet rows
and section of bench/RESULTS.md (bench/report.py keeps them when the suite rewrites that file).

`--touches` declares touches (the files a task edits) on every other task: the server then never runs two
declared tasks that share a file at once, nor one whose files wait in the merge queue.

    .venv/bin/python bench/fleet.py                         # 10 agents, 30 tasks, 0.5 s of work each, SQLite
    .venv/bin/python bench/fleet.py --dialect postgresql    # on a throwaway database (JCT_BENCH_POSTGRES_URL)
    .venv/bin/python bench/fleet.py --touches               # half the tasks declare what they edit
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DEFAULT_PG, free_port, fresh_database, start_server, stop_server, tool, wait_ready

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "fleet.json"
RESULTS_MD = ROOT / "bench" / "RESULTS.md"
SECTION = "## 7. Fleet: ten agents, one mission, one repository (bench/fleet.py)"
SUMMARY_PREFIX = "| fleet:"

SHARED_FILES = 10
REPO_FILES = 300  # besides the shared ones
APPEND_SHARE = 1 / 3  # of the edits to a shared file: appended at its end (the others fill the task's own slot)
CHAINS, CHAIN_DEPTH, LONE, LAST_PHASE = 5, 4, 4, 6  # 5 x 4 + 4 + 6 = 30 tasks, critical path 4 + 1 = 5 deep
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "fleet agent",
    "GIT_AUTHOR_EMAIL": "agent@fleet.invalid",
    "GIT_COMMITTER_NAME": "fleet agent",
    "GIT_COMMITTER_EMAIL": "agent@fleet.invalid",
}


# --- the repository and the mission -----------------------------------------------------------------------


def shared_path(n: int) -> str:
    return f"shared/notes_{n:02d}.txt"


def own_path(key: str) -> str:
    return f"tasks/{key}.txt"


def line_of(key: str, path: str) -> str:
    """The line task `key` writes into shared file `path`: main must hold it exactly once."""
    return f"{key} was here ({path})"


def placeholder(key: str) -> str:
    return f"{key}: (empty)"


def shared_text(n: int, keys: list[str]) -> list[str]:
    """A shared file as generated: a slot per task (a placeholder line between unchanged ones, so filling two
    slots merges cleanly), then the end, where appended lines go (two appended at once conflict)."""
    lines = [f"# Shared notes {n}: a task fills its slot or appends a line at the end."]
    for key in keys:
        lines += ["", f"## slot {key}", placeholder(key)]
    return [*lines, "", "## appended"]


def git(cwd: Path, *args: str) -> str:
    env = os.environ | GIT_IDENTITY
    done = subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def make_repository(path: Path, files: int, keys: list[str]) -> str:
    """A local working tree on `main`: `files` modules under src/, the shared files under shared/. Its head."""
    path.mkdir(parents=True)
    git(path, "init", "--quiet", "--initial-branch=main")
    for n in range(files):
        module = path / "src" / f"pkg_{n // 50:02d}" / f"module_{n:03d}.py"
        module.parent.mkdir(parents=True, exist_ok=True)
        module.write_text(f'"""Module {n}."""\n\n\ndef value() -> int:\n    return {n}\n')
    for n in range(SHARED_FILES):
        shared = path / shared_path(n)
        shared.parent.mkdir(parents=True, exist_ok=True)
        shared.write_text("\n".join(shared_text(n, keys)) + "\n")
    (path / "README.md").write_text("A repository a fleet of agents works on.\n")
    git(path, "add", "-A")
    git(path, "commit", "--quiet", "-m", "The repository the fleet starts from")
    return git(path, "rev-parse", "HEAD")


@dataclass
class Planned:
    key: str
    phase: int
    depends_on: list[str]
    shared: list[str]
    appends: list[str]  # of `shared`, the files it appends to (it fills its slot in the others)
    declares: bool  # declares its touches (with --touches)

    @property
    def files(self) -> list[str]:
        return [*self.shared, own_path(self.key)]


def plan(seed: int, touches: bool) -> list[Planned]:
    """The mission's 30 tasks: phase 0 holds five chains of four and four lone tasks, phase 1 six tasks that
    wait for the whole of phase 0. Each edits one to three shared files (a third of those edits append, the others
    fill the task's slot); every other task declares touches (with `touches`)."""
    rng = random.Random(seed)
    shape: list[tuple[str, int, list[str]]] = []
    for chain in range(CHAINS):
        for step in range(CHAIN_DEPTH):
            shape.append((f"c{chain}s{step}", 0, [f"c{chain}s{step - 1}"] if step else []))
    shape += [(f"lone{n}", 0, []) for n in range(LONE)]
    shape += [(f"last{n}", 1, []) for n in range(LAST_PHASE)]
    planned = []
    for index, (key, phase, depends) in enumerate(shape):
        shared = sorted(shared_path(n) for n in rng.sample(range(SHARED_FILES), rng.randint(1, 3)))
        appends = [path for path in shared if rng.random() < APPEND_SHARE]
        planned.append(Planned(key, phase, depends, shared, appends, touches and index % 2 == 0))
    return planned


def mission_phases(tasks: list[Planned], repo: Path) -> list[dict[str, Any]]:
    phases: list[dict[str, Any]] = []
    for task in tasks:
        while len(phases) <= task.phase:
            phases.append({"name": ["Build", "Finish"][len(phases)], "tasks": []})
        spec: dict[str, Any] = {
            "key": task.key,
            "objective": f"Write your line into {', '.join(task.shared)} and write {own_path(task.key)}",
            "operation": "code_change",
            "target_repo": str(repo),
            "target_ref": "main",
            "depends_on": task.depends_on,
        }
        if task.declares:
            spec["touches"] = task.files
        phases[task.phase]["tasks"].append(spec)
    return phases


def predecessors(tasks: list[Planned]) -> dict[str, list[str]]:
    """What each task waits for: its dependencies, and every task of the phases before its own."""
    return {
        task.key: sorted({*task.depends_on, *(other.key for other in tasks if other.phase < task.phase)})
        for task in tasks
    }


def longest_chain(tasks: list[Planned], weight: dict[str, float]) -> tuple[float, list[str]]:
    """The heaviest path through the mission's graph (dependencies and phase order), and its tasks in order."""
    waits = predecessors(tasks)
    best: dict[str, tuple[float, list[str]]] = {}

    def visit(key: str) -> tuple[float, list[str]]:
        if key not in best:
            before = max((visit(other) for other in waits[key]), default=(0.0, []), key=lambda found: found[0])
            best[key] = (before[0] + weight[key], [*before[1], key])
        return best[key]

    return max((visit(task.key) for task in tasks), key=lambda found: found[0])


# --- the agents -----------------------------------------------------------------------------------------


@dataclass
class Run:
    key: str
    agent: str
    run_id: str
    claimed: float  # epoch seconds, as the agent saw them
    completed: float = 0.0
    feedback: str | None = None  # the latest review feedback's decision in the claim's briefing, if any


@dataclass
class Fleet:
    plan: dict[str, Planned]  # key -> task
    keys: dict[str, str]  # task_id -> key
    mission_id: str
    work_seconds: float
    idle_seconds: float
    runs: list[Run] = field(default_factory=list)
    calls: dict[str, list[float]] = field(default_factory=dict)  # tool -> seconds per call
    idle_claims: int = 0
    stopped: anyio.Event = field(default_factory=anyio.Event)
    failure: str | None = None

    async def call(self, client: Client, name: str, args: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        result = await tool(client, name, args)
        self.calls.setdefault(name, []).append(time.perf_counter() - started)
        return result


def edit(workspace: Path, task: Planned) -> None:
    """The task's edit: its line in each of its shared files (at the end, or in its slot), and its own file."""
    for path in task.shared:
        shared = workspace / path
        lines = shared.read_text().splitlines()
        if path in task.appends:
            lines.append(line_of(task.key, path))
        else:
            lines[lines.index(placeholder(task.key))] = line_of(task.key, path)
        shared.write_text("\n".join(lines) + "\n")
    own = workspace / own_path(task.key)
    own.parent.mkdir(parents=True, exist_ok=True)
    own.write_text(f"{task.key}: done\n")


async def commit(workspace: Path, message: str) -> None:
    env = os.environ | GIT_IDENTITY
    await anyio.run_process(["git", "-C", str(workspace), "add", "-A"], env=env)
    await anyio.run_process(["git", "-C", str(workspace), "commit", "--quiet", "-m", message], env=env)


async def agent(name: str, url: str, mode: str, fleet: Fleet) -> None:
    """Claim, work in the workspace, commit, complete; when nothing is claimable, stop once the mission is done."""
    try:
        async with Client(url, mode=mode) as client:
            while not fleet.stopped.is_set():
                claim = await fleet.call(client, "jct_claim_next", {})
                if not claim["claimed"]:
                    fleet.idle_claims += 1
                    view = await fleet.call(client, "jct_get_mission", {"mission_id": fleet.mission_id})
                    if view["mission"]["status"] == "completed":
                        return
                    failed = [b for b in view["blockers"] if b["kind"] != "human"]
                    if failed:
                        raise RuntimeError(f"the mission is blocked: {failed}")
                    await anyio.sleep(fleet.idle_seconds)
                    continue
                task = fleet.plan[fleet.keys[claim["task_id"]]]
                feedback = ((claim.get("context_packet") or {}).get("review_feedback") or [{}])[-1].get("decision")
                run = Run(task.key, name, claim["run_id"], time.time(), feedback=feedback)
                fleet.runs.append(run)
                if not (claim.get("workspace") or {}).get("path"):
                    raise RuntimeError(f"the claim of {task.key} came without a workspace (the server logs why)")
                workspace = Path(claim["workspace"]["path"])
                await anyio.sleep(fleet.work_seconds)  # the agent's own work on the task
                await anyio.to_thread.run_sync(edit, workspace, task)
                await commit(workspace, f"{task.key}: its lines")
                done = await fleet.call(
                    client,
                    "jct_complete_task",
                    {"task_id": claim["task_id"], "run_id": run.run_id, "success": True, "summary": "Lines appended."},
                )
                if done["task_status"] != "completed":
                    raise RuntimeError(f"{task.key} completed as {done['task_status']}: {done}")
                run.completed = time.time()
    except BaseException as exc:
        if fleet.failure is None:
            fleet.failure = f"{name}: {exc!r}"[:2000]
        fleet.stopped.set()
        raise


# --- the run and its checks ------------------------------------------------------------------------------


def moment(value: str) -> datetime:
    """A time the server answered, UTC when it names no zone."""
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


async def conflicts_of(client: Client, task_id: str) -> int:
    """How many times the integrator sent this task back for a conflict (its audit trail)."""
    trail = await tool(client, "jct_get_audit_trail", {"entity_kind": "Task", "entity_id": task_id, "limit": 200})
    return sum(
        1
        for entry in trail["entries"]
        if entry["action"] == "task.requeued" and (entry["after"] or {}).get("reason") == "conflict"
    )


def check_main(repo: Path, tasks: list[Planned]) -> dict[str, Any]:
    """Each task's line in each of its shared files and its own file, counted on main: lost, doubled, and any
    other difference from the generated files (a slot filled that should not be, a line nobody wrote)."""
    keys = [task.key for task in tasks]
    lost: list[str] = []
    twice: list[str] = []
    other: list[str] = []
    for n in range(SHARED_FILES):
        path = shared_path(n)
        found = Counter(git(repo, "show", f"main:{path}").splitlines())
        expected = Counter(shared_text(n, keys))
        for task in tasks:
            line = line_of(task.key, path)
            if path in task.shared:
                expected[line] += 1
                if path not in task.appends:
                    expected[placeholder(task.key)] -= 1
                if found[line] == 0:
                    lost.append(f"{task.key} in {path}")
            if found[line] > expected[line]:
                twice.append(f"{task.key} in {path} ({found[line]}x)")
        found.subtract(expected)
        other += [f"{path}: {line!r} {count:+d}" for line, count in found.items() if count and "was here" not in line]
    owned = set(git(repo, "ls-tree", "--name-only", "main", "tasks/").splitlines())
    lost += [own_path(task.key) for task in tasks if own_path(task.key) not in owned]
    return {
        "lines_expected": sum(len(task.shared) for task in tasks),
        "appended_lines": sum(len(task.appends) for task in tasks),
        "lost": lost,
        "twice": twice,
        "other_differences": other,
        "checkout_clean": git(repo, "status", "--porcelain") == "",
        "checkout_at_main": git(repo, "rev-parse", "HEAD") == git(repo, "rev-parse", "main"),
        "commits_on_main": int(git(repo, "rev-list", "--count", "main")),
        # Every run's branch is deleted once its task's work merged (its own, or carried into the merged run's, or
        # sent back to be redone): none is left behind.
        "run_branches_left": len(git(repo, "branch", "--list", "--format=%(refname:short)", "jct/run-*").split()),
    }


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    tasks = plan(args.seed, args.touches)
    with tempfile.TemporaryDirectory(prefix="jct-fleet-") as tmp:
        work = Path(tmp)
        repo = work / "repo"
        make_repository(repo, args.files, [task.key for task in tasks])
        home = work / "home"
        async with fresh_database(args.dialect, home, args.postgres_url) as database_url:
            port = free_port()
            env = {"JCT_MAX_REVIEW_ROUNDS": str(args.max_rounds)}
            process = start_server(database_url, home, port, echo=False, env=env)
            try:
                await wait_ready(process, f"http://127.0.0.1:{port}")
                url = f"http://127.0.0.1:{port}/mcp"
                if args.touches and not await takes_touches(url):
                    raise SystemExit(
                        "--touches: this server's jct_create_mission takes no touches on a mission's tasks"
                    )
                return await drive(args, tasks, repo, url)
            except Exception:
                log = home / f"server-{port}.log"
                if log.exists():
                    print("".join(log.read_text(errors="replace").splitlines(keepends=True)[-40:]), file=sys.stderr)
                raise
            finally:
                stop_server(process)


async def drive(args: argparse.Namespace, tasks: list[Planned], repo: Path, url: str) -> dict[str, Any]:
    async with Client(url, mode="legacy") as observer:
        made = await tool(
            observer,
            "jct_create_mission",
            {
                "title": "Fleet benchmark",
                "goal": "Every task's lines on main, once",
                "phases": mission_phases(tasks, repo),
            },
        )
        keys = {item["task_id"]: item["key"] for item in made["tasks"]}
        planned = {task.key: task for task in tasks}
        fleet = Fleet(planned, keys, made["mission_id"], args.work_seconds, args.idle_seconds)
        with anyio.fail_after(args.deadline):
            async with anyio.create_task_group() as group:
                for n in range(args.agents):
                    mode = "legacy" if n % 2 == 0 else "2026-07-28"
                    group.start_soon(agent, f"agent{n + 1}", url, mode, fleet)
        agents_stopped = time.time()
        mission = (await tool(observer, "jct_get_mission", {"mission_id": fleet.mission_id}))["mission"]
        integrations: dict[str, dict[str, Any]] = {}
        conflicts: dict[str, int] = {}
        for task_id, key in keys.items():
            integrations[key] = (await tool(observer, "jct_get_task", {"task_id": task_id}))["integration"] or {}
            conflicts[key] = await conflicts_of(observer, task_id)
    return report(args, tasks, fleet, mission, integrations, conflicts, agents_stopped, repo)


async def takes_touches(url: str) -> bool:
    """Whether the server's jct_create_mission takes `touches` on a mission's tasks (its input schema says)."""
    async with Client(url, mode="legacy") as client:
        listed = await client.list_tools()
    schema = next(item.input_schema for item in listed.tools if item.name == "jct_create_mission")
    return "touches" in json.dumps(schema)


def epoch(value: str | None) -> float:
    return moment(value).timestamp() if value else float("nan")


def executed_chain(
    tasks: list[Planned], created: float, runs_of: dict[str, list[Run]], merged_at: dict[str, float]
) -> list[dict[str, Any]]:
    """The chain that set the wall time, from the last task merged back through whichever of its predecessors
    was merged last; each task's time split into waiting to be claimed (after its predecessors merged), claimed
    to its last completion (redone rounds included) and completion to merged. Its spans add up to the wall."""
    waits = predecessors(tasks)
    key: str | None = max(merged_at, key=lambda k: merged_at[k])
    chain: list[dict[str, Any]] = []
    while key is not None:
        before = max(waits[key], key=lambda k: merged_at[k], default=None)
        ready = merged_at[before] if before is not None else created
        claimed = min(run.claimed for run in runs_of[key])
        completed = max(run.completed for run in runs_of[key])
        chain.append(
            {
                "key": key,
                "runs": len(runs_of[key]),
                "to_claim": round(claimed - ready, 3),
                "claimed_to_completed": round(completed - claimed, 3),
                "completed_to_merged": round(merged_at[key] - completed, 3),
            }
        )
        key = before
    return chain[::-1]


def p50(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def report(
    args: argparse.Namespace,
    tasks: list[Planned],
    fleet: Fleet,
    mission: dict[str, Any],
    integrations: dict[str, dict[str, Any]],
    conflicts: dict[str, int],
    agents_stopped: float,
    repo: Path,
) -> dict[str, Any]:
    runs_of: dict[str, list[Run]] = {task.key: [] for task in tasks}
    for run in fleet.runs:
        runs_of[run.key].append(run)
    work = {key: sum(run.completed - run.claimed for run in runs) for key, runs in runs_of.items()}
    depth, chain = longest_chain(tasks, dict.fromkeys(work, 1.0))
    measured, measured_chain = longest_chain(tasks, work)
    created, completed = epoch(mission["created_at"]), epoch(mission["completed_at"])
    wall = completed - created
    merged = {key: item for key, item in integrations.items() if item.get("status") == "merged"}
    merged_at = {key: epoch(item["ended_at"]) for key, item in merged.items()}
    merge_waits = [(moment(item["ended_at"]) - moment(item["queued_at"])).total_seconds() for item in merged.values()]
    executed = executed_chain(tasks, created, runs_of, merged_at) if len(merged_at) == len(tasks) else []
    nominal = depth * args.work_seconds
    main = check_main(repo, tasks)
    statuses = Counter(item.get("status", "none") for item in integrations.values())
    sent_back = sum(conflicts.values())
    redone = {key: len(runs) - 1 for key, runs in runs_of.items() if len(runs) > 1}
    ok = (
        mission["status"] == "completed"
        and statuses["merged"] == len(tasks)
        and not main["lost"]
        and not main["twice"]
        and not main["other_differences"]
        and main["checkout_clean"]
        and main["checkout_at_main"]
        and main["run_branches_left"] == 0
        and sent_back == sum(redone.values())
    )
    return {
        "ok": ok,
        "dialect": args.dialect,
        "agents": args.agents,
        "tasks": len(tasks),
        "work_seconds": args.work_seconds,
        "idle_seconds": args.idle_seconds,
        "repo_files": args.files + SHARED_FILES + 1,
        "shared_files": SHARED_FILES,
        "touches": args.touches,
        "tasks_declaring_touches": sum(task.declares for task in tasks),
        "max_review_rounds": args.max_rounds,
        "seed": args.seed,
        "mission_status": mission["status"],
        "integration_statuses": dict(statuses),
        "runs": len(fleet.runs),
        "conflicts_sent_back": sent_back,
        "tasks_redone": len(redone),
        "redo_runs": sum(redone.values()),
        "most_conflicts_one_task": max(conflicts.values(), default=0),
        "conflicts_per_task": {key: count for key, count in conflicts.items() if count},
        "claims_with_conflict_feedback": sum(run.feedback == "conflict" for run in fleet.runs),
        "idle_claims": fleet.idle_claims,
        "main": main,
        "wall_seconds": round(wall, 3),
        "agents_stopped_after_seconds": round(agents_stopped - created, 3),
        "critical_path": {
            "depth": int(depth),
            "chain": chain,
            "nominal_seconds": nominal,
            "measured_seconds": round(measured, 3),
            "measured_chain": measured_chain,
        },
        "wall_over_nominal": round(wall / nominal, 2),
        "wall_over_measured": round(wall / measured, 2),
        "executed_chain": executed,
        "executed_chain_totals": {
            part: round(sum(step[part] for step in executed), 3)
            for part in ("to_claim", "claimed_to_completed", "completed_to_merged")
        },
        "total_work_seconds": round(sum(work.values()), 3),
        "merge_wait_seconds": {"p50": p50(merge_waits), "max": round(max(merge_waits), 3) if merge_waits else None},
        "call_p50_seconds": {name: p50(times) for name, times in sorted(fleet.calls.items())},
        "failure": fleet.failure,
        "python": sys.version.split()[0],
        "cores": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join(["python bench/fleet.py", *sys.argv[1:]]),
    }


# --- RESULTS.md -------------------------------------------------------------------------------------------


def summary_rows(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """The fleet's rows in RESULTS.md's summary of every target."""
    main = result["main"]
    merged = result["integration_statuses"].get("merged", 0)
    cp = result["critical_path"]
    kept = merged == result["tasks"] and not main["lost"] and not main["twice"]
    return [
        (
            f"fleet: {result['agents']} agents, {result['tasks']}-task mission on one repository "
            f"({result['dialect']}): tasks merged / lines lost / lines twice",
            f"{merged} / {len(main['lost'])} / {len(main['twice'])}",
            f"{result['tasks']} / 0 / 0",
            "met" if kept else "**missed**",
        ),
        (
            "fleet: wall time vs critical path (depth x work seconds)",
            f"{result['wall_over_nominal']:.1f}x ({result['wall_seconds']:.1f} s vs {cp['nominal_seconds']:.1f} s; "
            f"{result['conflicts_sent_back']} conflicts sent back and redone)",
            "(reported)",
            "reported",
        ),
    ]


def section(result: dict[str, Any]) -> list[str]:
    """RESULTS.md's fleet section, from bench/results/fleet.json."""
    cp = result["critical_path"]
    main = result["main"]
    merge = result["merge_wait_seconds"]
    executed, spans = result["executed_chain"], result["executed_chain_totals"]
    calls = ", ".join(f"`{name}` {seconds * 1000:.0f} ms" for name, seconds in result["call_p50_seconds"].items())
    touches = (
        f"{result['tasks_declaring_touches']} tasks declare touches (the files they edit)"
        if result["touches"]
        else "no task declares touches (`--touches` off)"
    )
    return [
        SECTION,
        "",
        f"`{result['command'].strip()}` on {result['measured_at']} ({result['cores']} cores, load average "
        f"{' '.join(str(x) for x in result['load_average'])} after; Python {result['python']}). One `jct serve` "
        f"on {result['dialect']}, {result['agents']} `mcp.Client` agents over streamable HTTP, one local working "
        f"tree of {result['repo_files']} files; {result['tasks']} tasks in two phases (five chains of four and "
        "four lone tasks, then six that wait for the first phase: "
        f"{cp['depth']} deep), each writing its line into 1-3 of {result['shared_files']} shared files (into "
        f"its own slot, which merges cleanly beside others, or appended at the end, {main['appended_lines']} of "
        f"the {main['lines_expected']}, which conflicts with another append merged meanwhile) and a file of its "
        f"own; {touches}. Every task's work is {result['work_seconds']} s of sleep, then a commit in its "
        "workspace. Raw numbers: [results/fleet.json](results/fleet.json).",
        "",
        "| | |",
        "|---|---|",
        f"| mission | {result['mission_status']}; integrations: "
        f"{', '.join(f'{count} {status}' for status, count in result['integration_statuses'].items())} |",
        f"| lines on main | {main['lines_expected'] - len(main['lost'])} of {main['lines_expected']}; "
        f"lost {len(main['lost'])}, twice {len(main['twice'])}; checkout clean at main: "
        f"{main['checkout_clean'] and main['checkout_at_main']}; "
        f"run branches left: {main.get('run_branches_left', '-')} |",
        f"| conflicts sent back and redone | {result['conflicts_sent_back']} ({result['tasks_redone']} tasks "
        f"redone, at most {result['most_conflicts_one_task']} times one task; {result['runs']} runs in all) |",
        f"| wall time (mission created to completed) | {result['wall_seconds']:.1f} s |",
        f"| critical path, nominal ({cp['depth']} x {result['work_seconds']} s) | {cp['nominal_seconds']:.1f} s: "
        f"wall is **{result['wall_over_nominal']:.1f}x** |",
        f"| critical path, measured (longest chain by its tasks' run time) | {cp['measured_seconds']:.1f} s "
        f"({' → '.join(cp['measured_chain'])}): wall is **{result['wall_over_measured']:.1f}x** |",
        f"| where the wall went, on the chain that set it ({' → '.join(step['key'] for step in executed)}) | "
        f"waiting to be claimed {spans['to_claim']:.1f} s, claimed to last completion (redone rounds included) "
        f"{spans['claimed_to_completed']:.1f} s, completion to merged {spans['completed_to_merged']:.1f} s |",
        f"| approval to merged (the merge queue's wait), p50 / max | {merge['p50']} s / {merge['max']} s |",
        f"| agents' calls, p50 | {calls} |",
        f"| agents' work, all runs | {result['total_work_seconds']:.1f} s; {result['idle_claims']} claims found "
        "nothing |",
        "",
    ]


def write_results_md(result: dict[str, Any], path: Path = RESULTS_MD) -> None:
    """Put the fleet's rows into RESULTS.md's summary and its section at the end, replacing earlier ones."""
    lines = path.read_text().splitlines() if path.exists() else ["# Benchmark results", ""]
    lines = [line for line in lines if not line.startswith(SUMMARY_PREFIX)]
    if SECTION in lines:
        start = lines.index(SECTION)
        end = next((n for n in range(start + 1, len(lines)) if lines[n].startswith("## ")), len(lines))
        del lines[start:end]
    header = next((n for n, line in enumerate(lines) if line.startswith("| target |")), None)
    if header is not None:
        end = next((n for n in range(header, len(lines)) if not lines[n].startswith("|")), len(lines))
        lines[end:end] = [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in summary_rows(result)]
    while lines and not lines[-1]:
        lines.pop()
    path.write_text("\n".join([*lines, "", *section(result)]).rstrip() + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--work-seconds", type=float, default=0.5, help="each task's simulated work (default 0.5)")
    parser.add_argument("--idle-seconds", type=float, default=0.25, help="wait before claiming again when idle")
    parser.add_argument("--files", type=int, default=REPO_FILES, help="modules in the generated repository")
    parser.add_argument("--dialect", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("JCT_BENCH_POSTGRES_URL", DEFAULT_PG),
        help="server to create the throwaway database on (env JCT_BENCH_POSTGRES_URL)",
    )
    parser.add_argument(
        "--touches",
        action="store_true",
        help="every other task declares touches (needs a server that takes touches on a mission's tasks)",
    )
    parser.add_argument(
        "--max-rounds", type=int, default=10, help="JCT_MAX_REVIEW_ROUNDS: conflicts a task may go through"
    )
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--deadline", type=float, default=600.0, help="give up after this many seconds")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--no-results-md", action="store_true", help="do not touch bench/RESULTS.md")
    args = parser.parse_args()
    result = anyio.run(measure, args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    if not args.no_results_md and args.output == RESULTS:
        write_results_md(result)
    print("\n".join(section(result)))
    if not result["ok"]:
        raise SystemExit(f"the fleet's checks failed: see {args.output}")


if __name__ == "__main__":
    main()
