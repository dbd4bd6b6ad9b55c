"""The plugins keep Claude Code sessions working (DESIGN section 17), driven through Claude Code itself with the
scripted stand-in model: three sessions with the HTTP plugin installed drain a mission on one git repository,
every change merged into its target branch and nobody acting, each session its own agent; the Stop hook holds
back a session that would stop while it holds a claim, and SubagentStop the jct-worker subagent; the SessionStart
hook gives a resumed or compacted session its claim back."""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from server.config import Settings
from server.core.operators import observe
from server.core.service import Core
from tests.claude_code.harness import ROOT, ClaudeCode, Run
from tests.claude_code.model import Answer, Reply, ScriptedModel, Step, ToolResult, ToolUse, ok, scripted_model
from tests.core.helpers import enqueue
from tests.git.repo import ENV as GIT_ENV
from tests.git.repo import Work, git
from tests.transports.conftest import call

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LIMIT = 300.0
SESSIONS = 3
WAIT_SECONDS = 10  # a claim's wait: long enough for a dependency to be merged, short for the drained end
# The mission: each task writes notes/<key>.txt; b and c wait for a, d for b, e for c, f for d and e.
MISSION = {"a": [], "b": ["a"], "c": ["a"], "d": ["b"], "e": ["c"], "f": ["d", "e"]}
PLUGIN_LOCAL = ROOT / "deploy" / "claude-code" / "plugin-local"
# What the hook says, as the model reads it.
HELD = "[jct hook] You still hold JCT task"
NEXT = "[jct hook] You completed your JCT task"
HOLDS = "[jct hook] This session holds JCT task"
ADDED = "hook_additional_context"  # how a transcript records what a SessionStart hook added
# Print mode waits for the plugin's MCP server before the first model request.
WAIT_FOR_SERVERS = {"MCP_CONNECTION_NONBLOCKING": "false"}
GIT_IDENTITY = {key: value for key, value in GIT_ENV.items() if key.startswith("GIT_")}


def request_text(body: dict[str, Any]) -> str:
    """Every text of a request's messages, tool results included: what the model is shown."""
    return json.dumps(body.get("messages") or [])


def tool_named(model: ScriptedModel, suffix: str) -> str:
    """The full name Claude Code gives the JCT tool `suffix` (a plugin's server is mcp__plugin_<plugin>_<server>__)."""
    names = [str(tool.get("name")) for tool in model.body.get("tools") or []]
    [name] = [name for name in names if name.startswith("mcp__") and name.endswith(f"__{suffix}")]
    return name


@dataclass
class Worker:
    """One session's model: what a real one does under /jct:work. Claim (waiting), edit and commit in the
    claim's workspace with Bash, report the diff, complete citing it, end the turn; the plugin's Stop hook
    tells it to claim the next; a claim that answers claimed: false ends the session."""

    name: str
    keys: dict[str, str]  # task_id -> key
    model: ScriptedModel | None = None
    asked: str = ""
    claim: dict[str, Any] = field(default_factory=dict)
    done: list[str] = field(default_factory=list)
    pushed: int = 0
    log: list[str] = field(default_factory=list)

    def steps(self) -> list[Step]:
        return [self.step] * 200

    def tool(self, suffix: str, args: dict[str, Any]) -> ToolUse:
        assert self.model is not None
        return ToolUse(tool_named(self.model, suffix), args)

    def step(self, previous: ToolResult | None) -> Answer:
        answer = self._step(previous)
        self.log.append(f"{self.asked}: {answer}")
        return answer

    def _step(self, previous: ToolResult | None) -> Answer:
        assert self.model is not None
        seen = request_text(self.model.body)
        if self.asked == "":
            assert "Work the JCT queue" in seen, "the /jct:work command's text reaches the model"
            return self.ask("claim", self.tool("jct_claim_next", {"wait_seconds": WAIT_SECONDS}))
        if self.asked == "claim":
            self.claim = ok(previous)
            if not self.claim["claimed"]:
                return self.ask("end", Reply(f"{self.name}: nothing is claimable for me; stopping."))
            key = self.keys[self.claim["task_id"]]
            path = self.claim["workspace"]["path"]
            script = (
                f"cd {shlex.quote(path)} && mkdir -p notes && printf '%s done\\n' {key} > notes/{key}.txt"
                f" && git add -A && git commit -q -m 'notes/{key}.txt' && git show --format= HEAD"
            )
            return self.ask("edit", ToolUse("Bash", {"command": script, "description": f"Write notes/{key}.txt"}))
        if self.asked == "edit":
            assert previous is not None
            assert not previous.is_error, previous
            assert "diff --git" in previous.text, previous.text
            return self.ask(
                "report",
                self.tool(
                    "jct_report_artifact",
                    {
                        "task_id": self.claim["task_id"],
                        "run_id": self.claim["run_id"],
                        "title": "The diff",
                        "artifact_type": "code_patch",
                        "content": previous.text,
                    },
                ),
            )
        if self.asked == "report":
            artifact = ok(previous)["artifact_id"]
            results = [{"criterion": 0, "status": "satisfied", "evidence": [artifact]}]
            args = {"task_id": self.claim["task_id"], "run_id": self.claim["run_id"], "success": True}
            args |= {"summary": "Wrote the note.", "criteria_results": results}
            return self.ask("complete", self.tool("jct_complete_task", args))
        if self.asked == "complete":
            completion = ok(previous)
            assert completion["task_status"] == "completed", completion
            assert completion["review"]["status"] == "auto_approved", completion
            self.done.append(self.keys[self.claim["task_id"]])
            return self.ask("told", Reply(f"{self.name}: completed {self.done[-1]}."))
        if self.asked == "told":  # it ended its turn; the Stop hook sent it back to work
            assert NEXT in seen, f"{self.name} was continued without the Stop hook's word"
            self.pushed += 1
            return self.ask("claim", self.tool("jct_claim_next", {"wait_seconds": WAIT_SECONDS}))
        raise AssertionError(f"{self.name} was asked again after {self.asked!r}")

    def ask(self, what: str, answer: Answer) -> Answer:
        self.asked = what
        return answer


async def install_plugin(session: ClaudeCode, model_url: str, jct: str) -> None:
    added = await session.run(["plugin", "marketplace", "add", str(ROOT)], model_url)
    assert added.returncode == 0, added.explain()
    installed = await session.run(["plugin", "install", "jct@jct", "--config", f"url={jct}/mcp"], model_url)
    assert installed.returncode == 0, installed.explain()


async def work_queue(session: ClaudeCode, model_url: str) -> Run:
    """`claude -p /jct:work` with the JCT tools and Bash allowed."""
    args = ["-p", "/jct:work", "--allowedTools", "Bash", "mcp__plugin_jct_jct__*", "--output-format", "json"]
    return await session.run(args, model_url, limit=LIMIT, extra=WAIT_FOR_SERVERS | GIT_IDENTITY)


async def test_three_sessions_drain_a_mission_into_main(
    claude: Path, claude_code: ClaudeCode, jct: str, tmp_path: Path
) -> None:
    repo = Work(tmp_path / "repo")
    first = repo.head()
    phases = [
        {
            "name": "Notes",
            "tasks": [
                {
                    "key": key,
                    "objective": f"Write notes/{key}.txt",
                    "operation": "code_change",
                    "target_repo": str(repo.path),
                    "target_ref": "main",
                    "depends_on": depends,
                    "acceptance_criteria": [f"notes/{key}.txt says {key} done"],
                }
                for key, depends in MISSION.items()
            ],
        }
    ]
    async with Client(f"{jct}/mcp", mode="legacy") as observer:
        made = await call(observer, "jct_create_mission", title="Notes", goal="Every note on main", phases=phases)
    keys = {item["task_id"]: item["key"] for item in made["tasks"]}

    sessions = []
    for n in range(SESSIONS):  # each its own HOME, working directory and output files (beside the directory)
        (tmp_path / f"session-{n}" / "work").mkdir(parents=True)
        home, work = tmp_path / f"session-{n}" / "claude-home", tmp_path / f"session-{n}" / "work"
        sessions.append(ClaudeCode(claude, home, work, claude_code.egress, claude_code.egress_url))
    workers = [Worker(f"session {n}", keys) for n in range(SESSIONS)]
    runs: dict[int, Run] = {}
    models: list[ScriptedModel] = []

    async def session(n: int) -> None:
        async with scripted_model(workers[n].steps()) as (model, model_url):
            workers[n].model = model
            models.append(model)
            await install_plugin(sessions[n], model_url, jct)
            runs[n] = await work_queue(sessions[n], model_url)

    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as group:
            for n in range(SESSIONS):
                group.start_soon(session, n)
        async with Client(f"{jct}/mcp", mode="legacy") as observer:
            while (await call(observer, "jct_get_mission", mission_id=made["mission_id"]))["mission"][
                "status"
            ] != "completed":
                await anyio.sleep(0.2)
            tasks = [await call(observer, "jct_get_task", task_id=task_id) for task_id in keys]

    context = "\n\n".join(
        f"{worker.name}:\n" + "\n".join(worker.log) + f"\n{runs[n].explain() if n in runs else '(no run)'}"
        for n, worker in enumerate(workers)
    )
    for model in models:
        assert model.errors == [], "\n".join(model.errors) + "\n" + context
    for n in range(SESSIONS):
        assert runs[n].returncode == 0, context
        assert "nothing is claimable for me" in runs[n].json()["result"], context
    assert sorted(key for worker in workers for key in worker.done) == sorted(MISSION), context
    # Every completion but the last of each session ended a turn that the Stop hook sent back to work.
    assert sum(worker.pushed for worker in workers) == len(MISSION), context
    for task in tasks:
        assert task["task"]["status"] == "completed", task
        assert task["integration"]["status"] == "merged", task
    # Each session is its own agent (the plugin's X-JCT-Agent header), not the one stateless `local`.
    by_key = {keys[task["task"]["task_id"]]: task for task in tasks}
    agents = {
        worker.name: {
            run["executor"]["actor_id"] for key in worker.done for run in by_key[key]["runs"] if run["status"] == "done"
        }
        for worker in workers
        if worker.done
    }
    assert all(len(ids) == 1 for ids in agents.values()), agents
    assert len(set.union(*agents.values())) == len(agents), agents
    assert all(agent.startswith("local-") for ids in agents.values() for agent in ids), agents
    for key in MISSION:
        assert git(repo.path, "show", f"main:notes/{key}.txt") == f"{key} done"
    assert int(git(repo.path, "rev-list", "--count", f"{first}..main")) == len(MISSION)
    assert repo.status() == ""  # the user's checkout moved with main, clean
    assert claude_code.egress.attempts == []


def local_plugin_env(jct_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The stdio plugin's `jct` on the PATH (this checkout's, as `make install` links it), on the test's database."""
    bin_dir = tmp_path / "bin"
    if not bin_dir.exists():
        bin_dir.mkdir()
        (bin_dir / "jct").symlink_to(Path(sys.executable).with_name("jct"))
    return jct_env | WAIT_FOR_SERVERS | {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


async def local_session(
    claude_code: ClaudeCode,
    model_url: str,
    env: dict[str, str],
    prompt: str,
    *more: str,
    allow: tuple[str, ...] = (),
    **extra: str,
) -> Run:
    """`claude -p prompt *more` with the stdio plugin loaded from its directory, its tools (and `allow`) allowed."""
    allowed = ["mcp__plugin_jct-local_jct-local__*", *allow]
    args = ["-p", prompt, *more, "--plugin-dir", str(PLUGIN_LOCAL), "--allowedTools", *allowed]
    run = await claude_code.run([*args, "--output-format", "json"], model_url, limit=LIMIT, extra=env | extra)
    assert run.returncode == 0, f"{run.explain()}\n{claude_code.mcp_logs()}"
    return run


async def enqueued(make_settings: Callable[..., Settings]) -> str:
    core = Core.build(make_settings())
    try:
        return await enqueue(core, objective="Add input validation", acceptance_criteria=[])
    finally:
        await core.db.dispose()


async def task_status(make_settings: Callable[..., Settings], task_id: str) -> str:
    core = Core.build(make_settings())
    try:
        return (await observe.get_task(core, task_id)).task.status
    finally:
        await core.db.dispose()


@dataclass
class HeldBack:
    """A model that claims a task and ends its turn holding it (saying `stopping`); shown the `hook` hook's block,
    which names the task and run, it releases the claim (for `reason`), then says what became of the task."""

    hook: str
    stopping: str
    reason: str
    claim: dict[str, Any] = field(default_factory=dict)
    model: ScriptedModel | None = None

    def steps(self) -> list[Step]:
        return [self.claim_next, self.stop, self.release, self.released]

    def claim_next(self, previous: ToolResult | None) -> Answer:
        assert self.model is not None
        return ToolUse(tool_named(self.model, "jct_claim_next"), {})

    def stop(self, previous: ToolResult | None) -> Answer:
        self.claim.update(ok(previous))
        return Reply(self.stopping)

    def release(self, previous: ToolResult | None) -> Answer:
        assert self.model is not None
        seen = request_text(self.model.body)
        assert HELD in seen, f"the {self.hook} hook's block reaches the model"
        assert f"{self.claim['task_id']} (run_id {self.claim['run_id']})" in seen
        args = {"task_id": self.claim["task_id"], "run_id": self.claim["run_id"], "reason": self.reason}
        return ToolUse(tool_named(self.model, "jct_release_task"), args)

    def released(self, previous: ToolResult | None) -> Answer:
        return Reply(f"Released: {ok(previous)['task_status']}.")


async def test_a_session_told_to_stop_while_it_holds_a_claim_is_held_back(
    claude_code: ClaudeCode, jct_env: dict[str, str], make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    """Told to stop right after claiming, the session ends its turn; the Stop hook blocks it, naming the task and
    run, and the model, shown that, releases the claim; then it may stop."""
    task_id = await enqueued(make_settings)
    held = HeldBack("Stop", "Stopping, as you asked.", "Told to stop.")
    with anyio.fail_after(LIMIT):
        async with scripted_model(held.steps()) as (model, model_url):
            held.model = model
            run = await local_session(
                claude_code, model_url, local_plugin_env(jct_env, tmp_path), "Claim a JCT task, then stop."
            )
    assert model.errors == [], "\n".join(model.errors)
    assert [r.step for r in model.main_requests()] == [0, 1, 2, 3], run.explain()
    assert run.json()["result"] == "Released: queued.", run.explain()
    assert held.claim["task_id"] == task_id
    assert await task_status(make_settings, task_id) == "queued"
    assert claude_code.egress.attempts == []


@dataclass
class Resumed:
    """A resumed session's model: it reads what the session was told and answers, releasing the claim when asked."""

    release: bool
    claim: dict[str, Any]
    model: ScriptedModel | None = None
    seen: list[str] = field(default_factory=list)
    released: bool = False

    def step(self, previous: ToolResult | None) -> Answer:
        assert self.model is not None
        self.seen.append(request_text(self.model.body))
        if self.release and not self.released:
            self.released = True
            args = {"task_id": self.claim["task_id"], "run_id": self.claim["run_id"], "reason": "Done for today."}
            return ToolUse(tool_named(self.model, "jct_release_task"), args)
        return Reply("Summary: the session holds a JCT task." if not self.release else "Released it.")


async def test_a_resumed_or_compacted_session_gets_its_claim_back(
    claude_code: ClaudeCode, jct_env: dict[str, str], make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    """A session ends holding a claim (its hooks off: JCT_HOOKS=off); compacted (`/compact`), its SessionStart
    hook puts the claim into the compacted context; resumed, into the resumed one, and the model sees it."""
    task_id = await enqueued(make_settings)
    env = local_plugin_env(jct_env, tmp_path)
    claim: dict[str, Any] = {}
    model_ref: list[ScriptedModel] = []

    def pause(result: ToolResult | None) -> Answer:
        claim.update(ok(result))
        return Reply("Pausing here.")

    steps: list[Step] = [lambda result: ToolUse(tool_named(model_ref[0], "jct_claim_next"), {}), pause]
    with anyio.fail_after(LIMIT):
        async with scripted_model(steps) as (model, model_url):
            model_ref.append(model)
            first = await local_session(claude_code, model_url, env, "Claim a JCT task.", JCT_HOOKS="off")
        assert model.errors == [], "\n".join(model.errors)
        assert first.json()["result"] == "Pausing here.", first.explain()  # not held back: its hooks are off
        session_id = first.json()["session_id"]
        resume = ("--resume", session_id)

        compactor = Resumed(release=False, claim=claim)
        async with scripted_model([compactor.step] * 10) as (model, model_url):
            compactor.model = model
            await local_session(claude_code, model_url, env, "/compact", *resume)
        assert model.errors == [], "\n".join(model.errors)

        resumed = Resumed(release=True, claim=claim)
        async with scripted_model([resumed.step] * 10) as (model, model_url):
            resumed.model = model
            last = await local_session(claude_code, model_url, env, "Where was I?", *resume)
        assert model.errors == [], "\n".join(model.errors)

    named = f"{HOLDS} {claim['task_id']} (run_id {claim['run_id']})"
    transcript = next((claude_code.home / ".claude" / "projects").glob(f"*/{session_id}.jsonl"))
    entries = [entry for entry in map(json.loads, transcript.read_text().splitlines()) if entry.get("type")]
    # Claude Code records each hook's run (hook_success, named by its event and source), then its context.
    compacted = next(
        n for n, e in enumerate(entries) if e.get("attachment", {}).get("hookName") == "SessionStart:compact"
    )
    context = next(entry for entry in entries[compacted:] if entry.get("attachment", {}).get("type") == ADDED)
    assert any(named in text for text in context["attachment"]["content"]), context
    # The model sees both: what the hook added after the compaction, and again at the resume.
    assert resumed.seen[0].count(named) == 2, resumed.seen[0]
    assert last.json()["result"] == "Released it.", last.explain()
    assert await task_status(make_settings, task_id) == "queued"
    assert claude_code.egress.attempts == []


async def test_the_jct_worker_subagent_is_held_back_by_its_own_stop_hook(
    claude_code: ClaudeCode, jct_env: dict[str, str], make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    """The main session hands the queue to the plugin's jct-worker subagent; the subagent claims a task and would
    stop holding it: SubagentStop blocks it (from the subagent's own transcript), it releases the claim."""
    task_id = await enqueued(make_settings)
    held = HeldBack("SubagentStop", "Stopping here.", "Handing it back.")
    hand_over = {"subagent_type": "jct-local:jct-worker", "description": "Work the JCT queue"}

    def told_it_is_done(result: ToolResult | None) -> Answer:
        assert held.model is not None
        return Reply("The worker is done." if "Released: queued." in request_text(held.model.body) else "?")

    # The subagent runs in the background: the main turn ends, and Claude Code tells it when the subagent is done.
    steps: list[Step] = [
        ToolUse("Agent", hand_over | {"prompt": "Work the JCT queue."}),
        Reply("The worker is at it."),
        told_it_is_done,
    ]
    with anyio.fail_after(LIMIT):
        async with scripted_model(steps, {"You are a JCT worker": held.steps()}) as (model, model_url):
            held.model = model
            run = await local_session(
                claude_code,
                model_url,
                local_plugin_env(jct_env, tmp_path),
                "Work the JCT queue.",
                allow=("Agent",),
            )
    assert model.errors == [], "\n".join(model.errors)
    assert [r.step for r in model.requests if r.kind == "subagent"] == [0, 1, 2, 3], run.explain()
    assert run.json()["result"] == "The worker is done.", run.explain()
    assert held.claim["task_id"] == task_id
    assert await task_status(make_settings, task_id) == "queued"
