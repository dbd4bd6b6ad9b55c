"""End-to-end check of a deployment: JCT replicas behind nginx, driven with the real MCP SDK client.

deploy/podman-test.sh (`make deploy-test`) starts two JCT containers (JCT_REPLICA=jct1, jct2) on one
PostgreSQL database and a shared trace volume, and nginx with deploy/nginx.conf in front, then runs this
with the repository's virtualenv:

    .venv/bin/python deploy/e2e.py --url http://127.0.0.1:PORT --database-url postgresql://... \
        --replica jct1=127.0.0.1:P1 --replica jct2=127.0.0.1:P2 --access-log nginx-access.log \
        --stop-replica-command "podman stop --time 25 NAME-jct2"

Everything goes through nginx except token minting and the final bookkeeping, which read the database.
Checks, each printed as PASS/FAIL: routing of legacy sessions by their replica prefix; the agent lifecycle
(enqueue, claim, progress, artifacts, complete, review) in both protocol eras; artifacts written by one
replica read through the other (shared trace volume); the Host allow-list behind the proxy; the legacy
HTTP+SSE transport; a remote agent's change merged into main by the integrator (--remote); a change on jct2
notifying a subscriber on jct1; 40 agents draining 400 tasks with
no task claimed twice; and jct2 stopped with SIGTERM mid-run: no call hangs or is silently lost, agents
carry on through jct1, jct2's claims expire and are claimed again, and every task completes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.subscriptions import ResourceUpdated
from mcp_types import ResourceUpdatedNotification
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from server.config import Settings, async_database_url
from server.core import tokens
from server.core.service import Core

CALL_LIMIT = 60.0  # one tool call; longer counts as a call that hung (silently lost)
PHASE_LIMIT = 300.0  # one phase of work
NOTIFIED = 20.0
AGENTS = 40
TASKS = 400
DRAIN_TASKS = 200
STOP_AFTER = 50  # completions in the SIGTERM phase before jct2 is stopped
PINNED = 10  # agents of the SIGTERM phase whose first session is on jct2
CRITERION = "Email validated against RFC 5322"
PATCH = """diff --git a/src/routes/users.py b/src/routes/users.py
--- a/src/routes/users.py
+++ b/src/routes/users.py
@@ -1 +1,2 @@
 def register(email):
+    validate_email(email)
"""
PASSING_TESTS = "tests/test_users.py ....\n============ 12 passed in 0.52s ============\n"
MODES = ("legacy", "modern")
RUN_ENDS = ("run.done", "run.failed", "run.lease_expired", "run.released", "run.cancelled")


class CheckFailed(Exception):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


# --- clients ----------------------------------------------------------------------------------


@dataclass
class Seen:
    """What the HTTP layer saw on one client: the session id the server gave and the statuses."""

    session_id: str | None = None
    statuses: Counter[int] = field(default_factory=Counter)

    def forget_session(self) -> None:
        self.session_id = None

    async def response(self, response: httpx2.Response) -> None:
        self.statuses[response.status_code] += 1
        session = response.headers.get("mcp-session-id")
        if session:
            self.session_id = session


@dataclass
class Deployment:
    url: str
    secrets: dict[str, str] = field(default_factory=dict)

    @asynccontextmanager
    async def client(
        self, who: str, mode: str, *, message_handler: Any = None, seen: Seen | None = None
    ) -> AsyncIterator[Client]:
        """An SDK client through nginx presenting `who`'s token; mode legacy, modern or sse."""
        headers = {"Authorization": f"Bearer {self.secrets[who]}"}
        seen = seen if seen is not None else Seen()
        if mode == "sse":
            client = Client(
                sse_client(f"{self.url}/sse", headers=headers), mode="legacy", message_handler=message_handler
            )
            async with client:
                yield client
            return
        http = httpx2.AsyncClient(
            headers=headers,
            timeout=httpx2.Timeout(30.0, read=300.0),
            event_hooks={"response": [seen.response]},
        )
        async with http:
            transport = streamable_http_client(f"{self.url}/mcp", http_client=http)
            client = Client(transport, mode="legacy" if mode == "legacy" else "auto", message_handler=message_handler)
            async with client:
                yield client

    @asynccontextmanager
    async def pinned(self, who: str, replica: str, *, seen: Seen | None = None, **kwargs: Any) -> AsyncIterator[Client]:
        """A legacy session that landed on `replica` (nginx spreads initialize requests round robin)."""
        seen = seen if seen is not None else Seen()
        for _ in range(12):
            seen.forget_session()
            async with self.client(who, "legacy", seen=seen, **kwargs) as client:
                if seen.session_id and seen.session_id.startswith(f"{replica}."):
                    yield client
                    return
        raise CheckFailed(f"no legacy session landed on {replica} in 12 tries (is it serving?)")


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    with anyio.fail_after(CALL_LIMIT):
        result = await client.call_tool(tool, args)
    if result.is_error:
        detail = result.content[0].text if result.content and hasattr(result.content[0], "text") else result
        raise ToolError(tool, str(detail))
    check(result.structured_content is not None, f"{tool} returned no structuredContent")
    assert result.structured_content is not None
    return dict(result.structured_content)


def hung(exc: BaseException) -> bool:
    """Our own CALL_LIMIT ran out (anyio's fail_after), possibly inside the client's task groups."""
    if isinstance(exc, BaseExceptionGroup):
        return any(hung(inner) for inner in exc.exceptions)
    return isinstance(exc, TimeoutError) and not isinstance(exc, httpx2.TimeoutException)


def describe(exc: BaseException) -> str:
    """A short name for what a client saw: a JCT error code, or the exception and its first words."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, ToolError):
        return exc.code
    words = " ".join(str(exc).split()[:4])
    return f"{type(exc).__name__}({words})" if words else type(exc).__name__


class ToolError(Exception):
    def __init__(self, tool: str, detail: str) -> None:
        super().__init__(f"{tool}: {detail}")
        try:
            self.code = str(json.loads(detail)["error"]["code"])
        except (ValueError, KeyError, TypeError):
            self.code = "?"


# --- the database (tokens and bookkeeping only) ----------------------------------------------


async def mint_tokens(database_url: str, deployment: Deployment, run_tag: str) -> None:
    with TemporaryDirectory() as home:
        core = Core.build(Settings(database_url=database_url, home=Path(home)))
        try:
            wanted = {"admin": ["admin"], "reviewer": ["reviewer"]} | {
                f"agent-{n:02d}": ["worker"] for n in range(AGENTS)
            }
            for who, roles in wanted.items():
                secret, _ = await tokens.create_token(core, f"{run_tag}-{who}", roles)
                deployment.secrets[who] = secret
        finally:
            await core.db.dispose()


async def scalar_rows(engine: AsyncEngine, sql: str, **params: Any) -> list[Any]:
    async with engine.connect() as conn:
        return list((await conn.execute(text(sql), params)).all())


async def open_tasks(engine: AsyncEngine, repo: str) -> int:
    rows = await scalar_rows(
        engine,
        "SELECT count(*) FROM tasks WHERE target_repo = :repo AND status NOT IN ('completed', 'failed', 'cancelled')",
        repo=repo,
    )
    return int(rows[0][0])


# --- checks -----------------------------------------------------------------------------------


async def enqueue(client: Client, repo: str, objective: str, key: str | None = None) -> str:
    result = await call(
        client,
        "jct_enqueue_task",
        objective=objective,
        operation="code_change",
        target_repo=repo,
        acceptance_criteria=[CRITERION],
        context_summary="Files of interest: src/routes/users.py",
        **({"idempotency_key": key} if key else {}),
    )
    return str(result["task_id"])


async def lifecycle(dep: Deployment, mode: str, engine: AsyncEngine) -> str:
    """Enqueue, claim, context, progress, artifacts, complete (auto-approved); a second task left for a
    reviewer (verdict partial) and approved by another principal. Artifacts are read back through fresh
    sessions until one lands on the other replica."""
    repo = f"e2e/lifecycle-{mode}"
    async with dep.client("admin", mode) as admin, dep.client("agent-00", mode) as agent:
        want = MODERN_PROTOCOL_VERSIONS if mode == "modern" else HANDSHAKE_PROTOCOL_VERSIONS
        check(agent.protocol_version in want, f"{mode}: negotiated {agent.protocol_version}")
        first = await enqueue(admin, repo, f"Add input validation ({mode})")
        second = await enqueue(admin, repo, f"Add input validation, part two ({mode})")

        claim = await call(agent, "jct_claim_next", repo_prefix=repo)
        check(claim["claimed"] and claim["task_id"] == first, f"{mode}: claim_next gave {claim}")
        context = await call(agent, "jct_get_context", task_id=first)
        check(context["issue"]["acceptance_criteria"] == [CRITERION], f"{mode}: briefing {context}")
        await call(agent, "jct_report_progress", task_id=first, run_id=claim["run_id"], message="halfway", progress=50)
        patch = await call(
            agent,
            "jct_report_artifact",
            task_id=first,
            run_id=claim["run_id"],
            title="Code changes",
            artifact_type="code_patch",
            content=PATCH,
        )
        await call(
            agent,
            "jct_report_artifact",
            task_id=first,
            run_id=claim["run_id"],
            title="Tests",
            artifact_type="log",
            content=PASSING_TESTS,
        )
        done = await call(
            agent,
            "jct_complete_task",
            task_id=first,
            run_id=claim["run_id"],
            success=True,
            summary="Validated emails.",
            criteria_results=[{"criterion": 0, "status": "satisfied", "evidence": [patch["artifact_id"]]}],
        )
        check(
            (done["task_status"], done["evidence_pack"]["verdict"], done["review"]["status"])
            == ("completed", "pass", "auto_approved"),
            f"{mode}: completion {done}",
        )

        claim2 = await call(agent, "jct_claim_next", repo_prefix=repo)
        check(claim2["claimed"] and claim2["task_id"] == second, f"{mode}: second claim {claim2}")
        await call(
            agent,
            "jct_report_artifact",
            task_id=second,
            run_id=claim2["run_id"],
            title="Code changes",
            artifact_type="code_patch",
            content=PATCH,
        )
        partial = await call(
            agent,
            "jct_complete_task",
            task_id=second,
            run_id=claim2["run_id"],
            success=True,
            summary="Cites no evidence.",
        )
        check(partial["review"]["status"] == "awaiting_manual_review", f"{mode}: second completion {partial}")
        pack_id = partial["evidence_pack"]["id"]

    async with dep.client("reviewer", mode) as reviewer:
        pending = await call(reviewer, "jct_list_pending_reviews", limit=100)
        check(pack_id in {r["evidence_pack_id"] for r in pending["reviews"]}, f"{mode}: {pack_id} not pending")
        evidence = await call(reviewer, "jct_get_evidence", run_id=claim2["run_id"])
        check(evidence["evidence_pack"]["verdict"] == "partial", f"{mode}: evidence {evidence}")
        decided = await call(
            reviewer, "jct_submit_review", evidence_pack_id=pack_id, decision="approved", reason="Looks right."
        )
        check(decided["decision"] == "approved", f"{mode}: review {decided}")
        task = await call(reviewer, "jct_get_task", task_id=second)
        check(task["task"]["status"] == "completed", f"{mode}: task after review {task['task']['status']}")

    # The artifact is in the trace store of the shared volume: read it through sessions on both replicas.
    read_on: set[str] = set()
    for replica in ("jct1", "jct2"):
        async with dep.pinned("reviewer", replica) as reader:
            content = await call(reader, "jct_get_artifact", artifact_id=patch["artifact_id"])
            check(content["content"] == PATCH, f"{mode}: artifact read on {replica} differs")
            read_on.add(replica)
    actions = await scalar_rows(
        engine,
        "SELECT action FROM audit_log WHERE entity_kind = 'Task' AND entity_id = :t ORDER BY id",
        t=second,
    )
    check("task.claimed" in [a for (a,) in actions], f"{mode}: no task.claimed in the audit log")
    return f"{mode}: 2 tasks, auto-approved and reviewer-approved; artifact read on {sorted(read_on)}"


def host_git(cwd: Path, *args: str) -> str:
    """git on the test's side, as a remote agent runs it (the remote belongs to the containers' user)."""
    # safe.directory from a config file under HOME: git drops `-c` settings for the upload-pack and receive-pack
    # it runs on a local repository, so they would not reach the check there.
    with TemporaryDirectory() as home:
        Path(home, ".gitconfig").write_text(
            "[safe]\n\tdirectory = *\n[user]\n\tname = E2E Agent\n\temail = e2e@example.com\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | {"HOME": home}
        done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise CheckFailed(f"git {' '.join(args)}: {done.stderr.strip()[-400:]}")
    return done.stdout.strip()


async def integration(dep: Deployment, remote: Path) -> str:
    """A remote agent's change reaches main (DESIGN 16): the claim names the run's branch on the remote (a URL
    location, JCT_REPOS_WRITABLE), the agent fetches it, commits and pushes; once auto-approved, the integrator
    (in either replica) pushes main, never forced."""
    repo = remote / "app.git"
    before = host_git(remote, "--git-dir", str(repo), "rev-parse", "main")
    async with dep.client("admin", "legacy") as admin, dep.client("agent-01", "legacy") as agent:
        made = await call(
            admin,
            "jct_enqueue_task",
            objective="Greet in the app",
            operation="code_change",
            target_repo="deploy/app",
            target_ref="main",
            target_path="src",
            acceptance_criteria=[],
        )
        claim = await call(agent, "jct_claim_task", task_id=made["task_id"])
        workspace = claim.get("workspace") or {}
        check(workspace.get("branch") is not None and workspace.get("path") is None, f"workspace {workspace}")
        with TemporaryDirectory() as scratch:
            clone = Path(scratch) / "app"
            host_git(Path(scratch), "clone", "--quiet", "--branch", workspace["branch"], str(repo), str(clone))
            (clone / "src").mkdir(exist_ok=True)
            (clone / "src" / "hello.py").write_text("print('hello from e2e')\n")
            host_git(clone, "add", "-A")
            host_git(clone, "commit", "--quiet", "-m", "Greet")
            host_git(clone, "push", "--quiet", "origin", workspace["branch"])
        done = await call(
            agent, "jct_complete_task", task_id=made["task_id"], run_id=claim["run_id"], success=True, summary="Greets."
        )
        check(done["review"]["status"] == "auto_approved", f"completion {done}")
        status = None
        with anyio.fail_after(PHASE_LIMIT):
            while status != "merged":
                task = await call(admin, "jct_get_task", task_id=made["task_id"])
                status = (task.get("integration") or {}).get("status")
                check(status in ("queued", "merging", "merged"), f"integration {task.get('integration')}")
                if status != "merged":
                    await anyio.sleep(0.5)
    after = host_git(remote, "--git-dir", str(repo), "rev-parse", "main")
    check(after == task["integration"]["commit"] != before, f"main {before} -> {after}: {task['integration']}")
    shown = host_git(remote, "--git-dir", str(repo), "show", "main:src/hello.py")
    check(shown == "print('hello from e2e')", f"main's src/hello.py is {shown!r}")
    return f"deploy/app: the agent's branch merged into main as {after[:12]}"


async def routing(dep: Deployment, args: argparse.Namespace) -> str:
    """Legacy sessions land on both replicas, and every request that carried a session id went to the
    replica its prefix names (nginx access log)."""
    prefixes: Counter[str] = Counter()
    for _ in range(6):
        seen = Seen()
        async with dep.client("admin", "legacy", seen=seen) as client:
            await call(client, "jct_queue_stats")
            await client.list_tools()
        check(seen.session_id is not None, "a legacy session got no Mcp-Session-Id")
        assert seen.session_id is not None
        prefix, dot, _ = seen.session_id.partition(".")
        check(bool(dot) and prefix in args.replicas, f"session id {seen.session_id!r} names no replica")
        prefixes[prefix] += 1
    check(set(prefixes) == set(args.replicas), f"legacy sessions landed only on {dict(prefixes)}")
    return f"6 sessions: {dict(prefixes)}"


def access_log_routing(args: argparse.Namespace) -> str:
    by_address = {address: name for name, address in args.replicas.items()}
    pattern = re.compile(r'upstream=(?P<up>\S+) session="(?P<session>[^"]*)"')
    checked = wrong = 0
    examples: list[str] = []
    for line in Path(args.access_log).read_text().splitlines():
        match = pattern.search(line)
        if not match or not match["session"] or match["session"] == "-":
            continue
        prefix = match["session"].partition(".")[0]
        tried = [by_address.get(address.strip(), address) for address in match["up"].split(",")]
        checked += 1
        if tried[-1] != prefix:
            wrong += 1
            examples.append(line)
    failures = Counter(
        f"{m['status']} via {by_address.get(m['up'].split(',')[-1].strip(), m['up'])}"
        for m in re.finditer(r'" (?P<status>5\d\d) \d+ \S+ upstream=(?P<up>[^ ]+)', Path(args.access_log).read_text())
    )
    check(not failures, f"5xx answers from nginx with both replicas up: {dict(failures)}")
    check(checked > 0, "the access log has no request with a session id")
    check(wrong == 0, f"{wrong} of {checked} session requests reached another replica, e.g. {examples[:3]}")
    return f"{checked} requests with a session id, each on the replica its prefix names"


async def host_check(dep: Deployment) -> str:
    """JCT's Host allow-list still works behind nginx: a foreign Host is refused, loopback passes."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    headers = {
        "Authorization": f"Bearer {dep.secrets['admin']}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    async with httpx2.AsyncClient(timeout=10.0) as http:
        foreign = await http.post(f"{dep.url}/mcp", json=body, headers=headers | {"Host": "evil.example"})
        health = await http.get(f"{dep.url}/healthz")
        metrics = await http.get(f"{dep.url}/metrics")
    check(foreign.status_code == 421, f"a foreign Host got {foreign.status_code}, want 421")
    check(health.status_code == 200, f"/healthz through nginx: {health.status_code}")
    check(metrics.status_code == 404, f"/metrics through nginx: {metrics.status_code}, want 404 (replicas only)")
    return "foreign Host 421, /healthz 200, /metrics 404 at the proxy"


async def sse_transport(dep: Deployment) -> str:
    async with dep.client("admin", "sse") as client:
        stats = await call(client, "jct_queue_stats")
        tools = await client.list_tools()
    check("counts" in stats and len(tools.tools) > 10, "the HTTP+SSE transport answered oddly")
    return f"/sse + /messages/: {len(tools.tools)} tools, queue_stats answered"


def updated(uri: str) -> Callable[[Any], bool]:
    return lambda m: isinstance(m, ResourceUpdatedNotification) and m.params.uri == uri


class Inbox:
    def __init__(self) -> None:
        self.messages: list[Any] = []
        self._arrived = anyio.Event()

    async def __call__(self, message: Any) -> None:
        self.messages.append(message)
        self._arrived.set()
        self._arrived = anyio.Event()

    async def wait_for(self, predicate: Callable[[Any], bool]) -> Any:
        with anyio.fail_after(NOTIFIED):
            while True:
                arrived = self._arrived
                for message in self.messages:
                    if predicate(message):
                        return message
                await arrived.wait()


async def notification_across_replicas(dep: Deployment) -> str:
    """A legacy subscriber on jct1 and a 2026-07-28 listener (any replica) hear of a completion made
    through a session on jct2."""
    inbox = Inbox()
    repo = "e2e/notify"
    async with (
        dep.pinned("admin", "jct1", message_handler=inbox) as watcher,
        dep.pinned("agent-01", "jct2") as agent,
        dep.client("reviewer", "modern") as listener,
    ):
        task_id = await enqueue(agent, repo, "Notify across replicas")
        claim = await call(agent, "jct_claim_task", task_id=task_id)
        task_uri, run_uri = f"jct://tasks/{task_id}", f"jct://runs/{claim['run_id']}"
        await watcher.subscribe_resource(task_uri)
        await watcher.subscribe_resource(run_uri)
        async with listener.listen(resource_subscriptions=[run_uri]) as events:
            started = time.monotonic()
            await call(agent, "jct_complete_task", task_id=task_id, success=False, summary="x", error_message="y")
            for uri in (task_uri, run_uri):
                await inbox.wait_for(updated(uri))
            legacy_after = time.monotonic() - started
            with anyio.fail_after(NOTIFIED):
                event = await events.__anext__()
            check(isinstance(event, ResourceUpdated) and event.uri == run_uri, f"listener heard {event}")
    return f"change via jct2 -> legacy subscriber on jct1 in {legacy_after:.2f}s, and a 2026-07-28 listener"


# --- many agents ------------------------------------------------------------------------------


@dataclass
class Ledger:
    """Everything the agents saw, for the bookkeeping after a phase."""

    claims: list[tuple[str, str, str]] = field(default_factory=list)  # (agent, task, run)
    completed: dict[str, str] = field(default_factory=dict)  # run -> task, acknowledged completions
    artifacts: set[str] = field(default_factory=set)  # acknowledged artifact ids
    errors: Counter[str] = field(default_factory=Counter)
    hung: list[str] = field(default_factory=list)
    failed_calls: list[tuple[str, str | None, int]] = field(default_factory=list)  # (tool, run, artifacts seen)
    calls_ok: int = 0
    calls_ok_after_stop: int = 0
    reconnects: int = 0
    holding: dict[str, str] = field(default_factory=dict)  # agent -> run it holds now, for pinned agents
    stopped_at: float | None = None
    stop_seconds: float | None = None
    stop_output: str = ""

    def ok(self) -> None:
        self.calls_ok += 1
        if self.stopped_at is not None:
            self.calls_ok_after_stop += 1


async def agent(
    dep: Deployment,
    who: str,
    mode: str,
    repo: str,
    ledger: Ledger,
    finished: anyio.Event,
    pace: float,
    pinned: str | None = None,
) -> None:
    """claim_next -> progress -> artifact -> complete, until the phase's tasks are all done. Any error
    (a tool error, a 502 from nginx, a dropped stream) drops the session and the task in hand: the agent
    reconnects through nginx and claims again; an abandoned claim's lease runs out and it is requeued."""
    while not finished.is_set():
        step, run_id, reported = "connect", None, 0
        seen = Seen()
        try:
            async with dep.pinned(who, pinned, seen=seen) if pinned else dep.client(who, mode, seen=seen) as client:
                while not finished.is_set():
                    step, run_id = "jct_claim_next", None
                    claim = await call(client, step, repo_prefix=repo)
                    ledger.ok()
                    if not claim["claimed"]:
                        with anyio.move_on_after(0.3):
                            await finished.wait()
                        continue
                    task_id, run_id, reported = str(claim["task_id"]), str(claim["run_id"]), 0
                    ledger.claims.append((who, task_id, run_id))
                    if pinned:
                        ledger.holding[who] = run_id
                    step = "jct_report_progress"
                    await call(client, step, task_id=task_id, run_id=run_id, message="working", progress=50)
                    ledger.ok()
                    await anyio.sleep(pace)
                    step = "jct_report_artifact"
                    artifact = await call(
                        client,
                        step,
                        task_id=task_id,
                        run_id=run_id,
                        title="Code changes",
                        artifact_type="code_patch",
                        content=PATCH,
                    )
                    ledger.ok()
                    ledger.artifacts.add(str(artifact["artifact_id"]))
                    reported += 1
                    await anyio.sleep(pace)
                    step = "jct_complete_task"
                    done = await call(
                        client,
                        step,
                        task_id=task_id,
                        run_id=run_id,
                        success=True,
                        summary="done",
                        criteria_results=[
                            {"criterion": 0, "status": "satisfied", "evidence": [str(artifact["artifact_id"])]}
                        ],
                    )
                    ledger.ok()
                    ledger.holding.pop(who, None)
                    if done["task_status"] == "completed":
                        ledger.completed[run_id] = task_id
        except Exception as exc:  # transport failures: 502 from nginx, a stream cut by the stopped replica
            if hung(exc):
                ledger.hung.append(f"{who} {step}")
                return
            http = sorted(code for code in seen.statuses if code >= 400)
            ledger.errors[f"{step}: {describe(exc)}" + (f" http {http}" if http else "")] += 1
            ledger.failed_calls.append((step, run_id, reported))
        ledger.holding.pop(who, None)
        pinned = None  # the pinned replica may be gone: reconnect through nginx like everyone else
        if not finished.is_set():
            ledger.reconnects += 1
            await anyio.sleep(0.2)


async def drain_queue(
    dep: Deployment,
    engine: AsyncEngine,
    repo: str,
    count: int,
    ledger: Ledger,
    *,
    pace: float,
    stop: list[str] | None = None,
) -> float:
    """Enqueue `count` tasks, run AGENTS agents (half legacy, half 2026-07-28) until every task is done;
    with `stop`, run that command (SIGTERM a replica) after STOP_AFTER completions. Returns seconds."""
    async with dep.client("admin", "modern") as admin:
        with anyio.fail_after(PHASE_LIMIT):
            limiter = anyio.Semaphore(8)

            async def one(n: int) -> None:
                async with limiter:
                    await enqueue(admin, repo, f"Task {n} of {repo}", key=f"{repo}#{n}")

            async with anyio.create_task_group() as tg:
                for n in range(count):
                    tg.start_soon(one, n)
    finished = anyio.Event()
    started = time.monotonic()

    async def watch() -> None:
        stopping = stop is not None
        while True:
            if stopping and len(ledger.completed) >= STOP_AFTER and ledger.holding:
                stopping = False
                assert stop is not None
                ledger.stopped_at = time.monotonic()
                result = await anyio.run_process(stop, check=False)
                ledger.stop_seconds = time.monotonic() - ledger.stopped_at
                ledger.stop_output = (result.stdout + result.stderr).decode(errors="replace").strip()
            if await open_tasks(engine, repo) == 0:
                finished.set()
                return
            await anyio.sleep(0.5)

    with anyio.fail_after(PHASE_LIMIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            for n in range(AGENTS):
                # With a stop: the first PINNED agents start on legacy sessions held by jct2, the replica
                # that is stopped, so some claims are in hand when it goes.
                pinned = "jct2" if stop is not None and n < PINNED else None
                tg.start_soon(agent, dep, f"agent-{n:02d}", MODES[n % 2], repo, ledger, finished, pace, pinned)
    return time.monotonic() - started


async def bookkeeping(engine: AsyncEngine, repo: str, count: int, ledger: Ledger) -> dict[str, int]:
    """From the database: every task completed once; no task claimed while an earlier claim of it was
    live; every acknowledged completion and artifact is recorded (nothing acknowledged was lost)."""
    tasks = await scalar_rows(engine, "SELECT id, status FROM tasks WHERE target_repo = :r", r=repo)
    check(len(tasks) == count, f"{repo}: {len(tasks)} tasks in the database, want {count}")
    statuses = Counter(status for _, status in tasks)
    check(statuses == Counter({"completed": count}), f"{repo}: task statuses {dict(statuses)}")
    runs = await scalar_rows(
        engine,
        "SELECT r.id, r.task_id, r.status, r.started_at, r.ended_at FROM runs r JOIN tasks t ON t.id = r.task_id "
        "WHERE t.target_repo = :r ORDER BY r.task_id, r.started_at",
        r=repo,
    )
    by_task: dict[str, list[Any]] = defaultdict(list)
    for row in runs:
        by_task[str(row.task_id)].append(row)
    for task_runs in by_task.values():
        done = [r for r in task_runs if r.status == "done"]
        check(len(done) == 1, f"task {task_runs[0].task_id} has {len(done)} done runs")
    # The audit log in id order (ids are drawn inside each transaction, so a claim that could only find
    # the task queued once another transaction had committed has the larger id): a task is claimed, its
    # run ends (done, failed, expired, released, cancelled), and only then may it be claimed again.
    events = await scalar_rows(
        engine,
        "SELECT a.id, a.action, r.task_id FROM audit_log a "
        "JOIN runs r ON (a.entity_kind = 'Run' AND r.id = a.entity_id) "
        "JOIN tasks t ON t.id = r.task_id WHERE t.target_repo = :r AND a.action = ANY(:ends) "
        "UNION ALL SELECT a.id, a.action, a.entity_id FROM audit_log a "
        "JOIN tasks t ON (a.entity_kind = 'Task' AND t.id = a.entity_id) "
        "WHERE t.target_repo = :r AND a.action = 'task.claimed' ORDER BY 1",
        r=repo,
        ends=list(RUN_ENDS),
    )
    live: dict[str, bool] = defaultdict(bool)
    double: list[str] = []
    claims_in_log = 0
    for _, action, task in events:
        if action == "task.claimed":
            claims_in_log += 1
            if live[str(task)]:
                double.append(str(task))
            live[str(task)] = True
        else:
            live[str(task)] = False
    check(not double, f"{len(double)} claims of a task while an earlier claim of it was live: {double[:3]}")
    check(claims_in_log == len(runs), f"audit log has {claims_in_log} task.claimed rows for {len(runs)} runs")
    expired = await scalar_rows(
        engine,
        "SELECT count(*) FROM audit_log a JOIN runs r ON r.id = a.entity_id JOIN tasks t ON t.id = r.task_id "
        "WHERE a.action = 'run.lease_expired' AND t.target_repo = :r",
        r=repo,
    )
    run_status = {str(r.id): (str(r.task_id), r.status) for r in runs}
    lost = [run for run, task in ledger.completed.items() if run_status.get(run) != (task, "done")]
    check(not lost, f"acknowledged completions not recorded as done: {lost[:5]}")
    artifact_rows = await scalar_rows(
        engine,
        "SELECT a.id FROM artifacts a JOIN runs r ON r.id = a.run_id JOIN tasks t ON t.id = r.task_id "
        "WHERE t.target_repo = :r",
        r=repo,
    )
    recorded = {str(a) for (a,) in artifact_rows}
    missing = ledger.artifacts - recorded
    check(not missing, f"acknowledged artifacts missing from the database: {sorted(missing)[:5]}")
    client_claims = Counter(task for _, task, _ in ledger.claims)
    return {
        "runs": len(runs),
        "reclaims": len(runs) - count,
        "lease_expired": int(expired[0][0]),
        "max_claims_per_task_seen_by_clients": max(client_claims.values(), default=0),
    }


async def failed_call_effects(engine: AsyncEngine, repo: str, ledger: Ledger) -> str:
    """Of the calls that answered with an error, which had nevertheless taken effect (the replica did the
    work, the answer was lost on the way): harmless for a retry-safe call, and the reason an agent must
    treat an error as "unknown", not "not done". Claims whose answer was lost are runs no client saw."""
    runs = await scalar_rows(
        engine,
        "SELECT r.id, r.status, (SELECT count(*) FROM artifacts a WHERE a.run_id = r.id), "
        "(SELECT count(*) FROM audit_log l WHERE l.entity_kind = 'Run' AND l.entity_id = r.id "
        "AND l.action = 'run.progress') FROM runs r JOIN tasks t ON t.id = r.task_id WHERE t.target_repo = :r",
        r=repo,
    )
    by_run = {str(run): (status, int(artifacts), int(progress)) for run, status, artifacts, progress in runs}
    applied: Counter[str] = Counter()
    for tool, run, reported in ledger.failed_calls:
        if run is None or run not in by_run:
            continue
        status, artifacts, progress = by_run[run]
        took = {
            "jct_complete_task": status == "done",
            "jct_report_artifact": artifacts > reported,
            "jct_report_progress": progress > 0,
        }.get(tool, False)
        applied[tool] += took
    seen = {run for _, _, run in ledger.claims}
    unseen_claims = sum(1 for run in by_run if run not in seen)
    failed = Counter(tool for tool, _, _ in ledger.failed_calls)
    parts = [f"{tool} {applied[tool]}/{n}" for tool, n in sorted(failed.items()) if tool != "jct_claim_next"]
    parts.append(f"claims made whose answer was lost {unseen_claims} (of {failed['jct_claim_next']} failed claim_next)")
    return "failed calls that had taken effect: " + ", ".join(parts)


async def many_agents(dep: Deployment, engine: AsyncEngine) -> str:
    repo = "e2e/drain-400"
    ledger = Ledger()
    seconds = await drain_queue(dep, engine, repo, TASKS, ledger, pace=0.0)
    check(not ledger.hung, f"calls that never answered: {ledger.hung[:5]}")
    facts = await bookkeeping(engine, repo, TASKS, ledger)
    # A claim may lapse only if an agent went JCT_LEASE_SECONDS without a call (a starved machine); the
    # task is then claimed again, after the expiry, never beside a live claim (checked above).
    check(facts["reclaims"] == facts["lease_expired"], f"re-claims not explained by expired leases: {facts}")
    check(len(ledger.claims) == facts["runs"], f"clients saw {len(ledger.claims)} claims, the database {facts}")
    unexplained = {k: v for k, v in ledger.errors.items() if not k.endswith("LEASE_EXPIRED")}
    check(not unexplained, f"errors with both replicas up: {dict(ledger.errors)}")
    rate = f"{TASKS} tasks in {seconds:.1f}s ({TASKS / seconds:.0f} tasks/s, {ledger.calls_ok} calls)"
    if facts["reclaims"] == 0:
        return f"{AGENTS} agents, {rate}; each task claimed exactly once"
    return (
        f"{AGENTS} agents, {rate}; no task claimed beside a live claim; {facts['lease_expired']} leases "
        "lapsed under load (an agent went JCT_LEASE_SECONDS without a call) and were claimed again after expiry"
    )


async def stop_a_replica(dep: Deployment, engine: AsyncEngine, stop: list[str]) -> str:
    repo = "e2e/drain-sigterm"
    ledger = Ledger()
    seconds = await drain_queue(dep, engine, repo, DRAIN_TASKS, ledger, pace=0.05, stop=stop)
    seen = (
        f"errors seen by clients {dict(ledger.errors)}; {ledger.reconnects} reconnects; "
        f"{ledger.calls_ok_after_stop} calls answered after the stop"
    )
    check(ledger.stopped_at is not None, f"the replica was never stopped; {seen}")
    stopped = f"jct2 stopped after {STOP_AFTER} completions (stop took {ledger.stop_seconds:.1f}s)"
    check(not ledger.hung, f"calls that never answered (silently lost): {ledger.hung[:5]}; {seen}")
    facts = await bookkeeping(engine, repo, DRAIN_TASKS, ledger)
    effects = await failed_call_effects(engine, repo, ledger)
    detail = f"{stopped}; {seen}; {facts}; {effects}"
    check(ledger.calls_ok_after_stop > 0, f"no call succeeded after the replica stopped; {detail}")
    check(facts["lease_expired"] > 0, f"no claim of the stopped replica's agents expired; {detail}")
    check(facts["reclaims"] > 0, f"no task was claimed again after its lease expired; {detail}")
    return (
        f"{DRAIN_TASKS} tasks in {seconds:.1f}s; {stopped}; {seen}; {facts['lease_expired']} leases expired, "
        f"{facts['reclaims']} re-claims; every task completed once; {effects}"
    )


# --- main -------------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> int:
    dep = Deployment(args.url.rstrip("/"))
    engine = create_async_engine(async_database_url(args.database_url))
    results: list[tuple[str, bool, str]] = []

    async def run(name: str, body: Callable[[], Any]) -> bool:
        started = time.monotonic()
        try:
            outcome = body()
            if hasattr(outcome, "__await__"):
                outcome = await outcome
            detail, passed = str(outcome), True
        except Exception as exc:
            # A check that failed inside a client's context arrives wrapped in its task group's exception group.
            while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
                exc = exc.exceptions[0]
            detail = str(exc) if isinstance(exc, CheckFailed) else f"{type(exc).__name__}: {exc}"
            passed = False
        took = time.monotonic() - started
        results.append((name, passed, detail))
        print(f"{'PASS' if passed else 'FAIL'} {name} ({took:.1f}s): {detail}", flush=True)
        return passed

    try:
        await mint_tokens(args.database_url, dep, args.run_tag)
        await run("routing: legacy sessions pinned by replica prefix", lambda: routing(dep, args))
        await run("proxy: Host allow-list, health", lambda: host_check(dep))
        await run("lifecycle (legacy)", lambda: lifecycle(dep, "legacy", engine))
        await run("lifecycle (2026-07-28)", lambda: lifecycle(dep, "modern", engine))
        await run("legacy HTTP+SSE transport", lambda: sse_transport(dep))
        if args.remote:
            await run("integration: a remote agent's change merged into main", lambda: integration(dep, args.remote))
        await run("notification across replicas", lambda: notification_across_replicas(dep))
        await run(f"{AGENTS} agents drain {TASKS} tasks", lambda: many_agents(dep, engine))
        await run("access log: session requests stay on their replica", lambda: access_log_routing(args))
        if args.stop_replica_command:
            stop = shlex.split(args.stop_replica_command)
            await run("SIGTERM jct2 mid-run", lambda: stop_a_replica(dep, engine, stop))
    finally:
        await engine.dispose()
    failed = [name for name, passed, _ in results if not passed]
    print(f"e2e: {len(results) - len(failed)} passed, {len(failed)} failed", flush=True)
    return 1 if failed else 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="nginx, e.g. http://127.0.0.1:8080")
    parser.add_argument("--database-url", required=True, help="the replicas' PostgreSQL database")
    parser.add_argument(
        "--replica", action="append", required=True, help="NAME=HOST:PORT as nginx's $upstream_addr shows it"
    )
    parser.add_argument("--access-log", required=True, help="nginx's access log (log_format jct)")
    parser.add_argument("--stop-replica-command", default="", help="stops jct2 with SIGTERM; empty: skip")
    parser.add_argument("--run-tag", default="e2e", help="prefix of the token names minted for this run")
    parser.add_argument(
        "--remote", type=Path, default=None, help="the directory of bare repositories the replicas may write (app.git)"
    )
    args = parser.parse_args()
    args.replicas = dict(item.split("=", 1) for item in args.replica)
    return args


if __name__ == "__main__":
    sys.exit(anyio.run(main, parse_args()))
