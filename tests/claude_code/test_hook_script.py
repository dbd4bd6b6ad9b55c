"""The plugins' hook script (deploy/claude-code/plugin*/hooks/jct-hook.js) on transcripts in the form Claude Code
writes them (one JSON entry a line; tool calls and results in `assistant` and `user` entries; a Stop hook's block
as a `user` entry "Stop hook feedback: ..."; copies of API requests beside them), run with Node as Claude Code runs
it. tests/claude_code/test_unattended.py runs it inside Claude Code itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.claude_code.harness import ROOT

HOOKS = ROOT / "deploy" / "claude-code"
SCRIPT = HOOKS / "plugin" / "hooks" / "jct-hook.js"
TOOL = "mcp__plugin_jct_jct__jct_"
TASK, RUN = "7d1c6a52-0000-4000-8000-000000000001", "4b9e2f10-0000-4000-8000-000000000002"
CLAIM = {
    "success": True,
    "claimed": True,
    "task_id": TASK,
    "run_id": RUN,
    "objective": "Write notes/a.txt",
    "workspace": {"path": "/tmp/jct/worktrees/a", "branch": "jct/run-4b9e2f10", "base_commit": "abc123"},
}


class Transcript:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[dict[str, Any]] = []

    def call(self, tool: str, args: dict[str, Any], result: dict[str, Any], is_error: bool = False) -> None:
        use_id = f"toolu_{len(self.entries)}"
        use = {"type": "tool_use", "id": use_id, "name": f"{TOOL}{tool}", "input": args}
        self.entries.append({"type": "assistant", "message": {"role": "assistant", "content": [use]}})
        block = {"type": "tool_result", "tool_use_id": use_id, "content": json.dumps(result), "is_error": is_error}
        self.entries.append({"type": "user", "message": {"role": "user", "content": [block]}})
        # Claude Code also keeps a copy of each request it sends: never read as the conversation.
        self.entries.append({"type": "api-request-blob", "message": {"role": "user", "content": [block]}})

    def blocked(self, reason: str) -> None:
        self.entries.append({"type": "user", "message": {"role": "user", "content": f"Stop hook feedback:\n{reason}"}})
        copy = [{"type": "text", "text": f"Stop hook blocking error from command: {reason}"}]
        self.entries.append({"type": "api-request-blob", "message": {"role": "system", "content": copy}})

    def write(self) -> None:
        self.path.write_text("".join(json.dumps(entry) + "\n" for entry in self.entries))


def hook(event: str, transcript: Transcript, script: Path = SCRIPT, **fields: Any) -> dict[str, Any] | None:
    """Run the script as Claude Code does (the event's JSON on stdin); its JSON answer, or None for no output."""
    transcript.write()
    node = shutil.which("node")
    assert node is not None, "node is needed: Claude Code's hooks run with it"
    env = {key: value for key, value in os.environ.items() if key != "JCT_HOOKS"} | fields.pop("env", {})
    hook_input = {"session_id": "s1", "transcript_path": str(transcript.path), "cwd": "/tmp"} | fields
    done = subprocess.run(
        [node, str(script), event], input=json.dumps(hook_input), capture_output=True, text=True, env=env, check=True
    )
    assert done.stderr == ""
    return json.loads(done.stdout) if done.stdout else None


def stop(transcript: Transcript, active: bool = False, **fields: Any) -> dict[str, Any] | None:
    return hook("stop", transcript, hook_event_name="Stop", stop_hook_active=active, **fields)


def test_both_plugins_ship_the_same_hooks() -> None:
    for name in ("jct-hook.js", "hooks.json"):
        assert (HOOKS / "plugin" / "hooks" / name).read_text() == (HOOKS / "plugin-local" / "hooks" / name).read_text()
    config = json.loads((HOOKS / "plugin" / "hooks" / "hooks.json").read_text())
    assert set(config["hooks"]) == {"Stop", "SubagentStop", "SessionStart"}
    [start] = config["hooks"]["SessionStart"]
    assert set(start["matcher"].split("|")) == {"resume", "compact"}
    for groups in config["hooks"].values():
        for group in groups:
            for command in group["hooks"]:
                assert command["command"].startswith('node "${CLAUDE_PLUGIN_ROOT}/hooks/jct-hook.js" ')


def test_a_held_claim_blocks_the_stop_until_it_is_completed_then_the_next_claim_is_asked_for(tmp_path: Path) -> None:
    transcript = Transcript(tmp_path / "t.jsonl")
    assert stop(transcript) is None  # no claim: nothing to say
    transcript.call("claim_next", {"wait_seconds": 120}, CLAIM)
    blocked = stop(transcript)
    assert blocked is not None
    assert blocked["decision"] == "block"
    for part in (TASK, RUN, "Write notes/a.txt", "/tmp/jct/worktrees/a", "jct_complete_task", "jct_release_task"):
        assert part in blocked["reason"]
    transcript.blocked(blocked["reason"])
    # stop_hook_active does not let a held claim go: the session is told again, up to three times in a row.
    for _ in range(2):
        again = stop(transcript, active=True)
        assert again is not None
        transcript.blocked(again["reason"])
    assert stop(transcript, active=True) is None

    transcript.call("report_progress", {"task_id": TASK, "run_id": RUN, "message": "half way"}, {"success": True})
    assert stop(transcript, active=True) is not None  # a JCT call since: it holds the claim, told again
    done = {"success": True, "task_id": TASK, "run_id": RUN, "task_status": "completed"}
    transcript.call("complete_task", {"task_id": TASK, "run_id": RUN, "success": True, "summary": "ok"}, done)
    push = stop(transcript, active=True)
    assert push is not None
    assert "jct_claim_next" in push["reason"]
    assert "claimed: false" in push["reason"]
    transcript.blocked(push["reason"])
    assert stop(transcript, active=True) is None  # told once, no JCT call since: it may stop
    transcript.call("claim_next", {"wait_seconds": 120}, {"success": True, "claimed": False})
    assert stop(transcript) is None


def test_a_release_an_expired_lease_or_another_tasks_completion(tmp_path: Path) -> None:
    transcript = Transcript(tmp_path / "t.jsonl")
    transcript.call("claim_task", {"task_id": TASK}, {k: v for k, v in CLAIM.items() if k != "claimed"})
    other = {"task_id": "another", "success": True, "summary": "x"}
    transcript.call("complete_task", other, {"success": True, "task_id": "another", "task_status": "completed"})
    assert stop(transcript) is not None  # completing another task does not end this claim
    failed = {"success": False, "error": {"code": "UNAVAILABLE", "message": "later", "suggestion": "retry"}}
    transcript.call("complete_task", {"task_id": TASK, "success": True, "summary": "x"}, failed, is_error=True)
    assert stop(transcript) is not None  # a completion that failed leaves it held
    expired = {"success": False, "error": {"code": "LEASE_EXPIRED", "message": "gone", "suggestion": "stop"}}
    transcript.call("report_progress", {"task_id": TASK, "run_id": RUN, "message": "x"}, expired, is_error=True)
    assert stop(transcript) is None  # no longer its claim, and nothing completed: no push either

    transcript.call("claim_next", {}, CLAIM)
    released = {"success": True, "task_id": TASK, "run_id": RUN, "task_status": "queued"}
    transcript.call("release_task", {"task_id": TASK, "run_id": RUN, "reason": "cannot"}, released)
    assert stop(transcript) is None


def test_session_start_after_a_resume_or_compaction_names_the_held_claim(tmp_path: Path) -> None:
    transcript = Transcript(tmp_path / "t.jsonl")
    transcript.call("claim_next", {"wait_seconds": 120}, CLAIM)
    for source in ("resume", "compact"):
        answer = hook("session-start", transcript, hook_event_name="SessionStart", source=source)
        assert answer is not None
        output = answer["hookSpecificOutput"]
        assert output["hookEventName"] == "SessionStart"
        for part in (TASK, RUN, "/tmp/jct/worktrees/a", "jct_complete_task"):
            assert part in output["additionalContext"]
    assert hook("session-start", transcript, hook_event_name="SessionStart", source="startup") is None


def test_jct_hooks_off_turns_them_off_and_a_subagent_is_judged_by_its_own_transcript(tmp_path: Path) -> None:
    transcript = Transcript(tmp_path / "t.jsonl")
    transcript.call("claim_next", {}, CLAIM)
    assert stop(transcript, env={"JCT_HOOKS": "off"}) is None
    assert hook("session-start", transcript, source="resume", env={"JCT_HOOKS": "off"}) is None

    main = Transcript(tmp_path / "main.jsonl")
    main.write()
    assert hook("subagent-stop", main, agent_transcript_path=str(transcript.path)) is not None
    assert hook("subagent-stop", transcript, agent_transcript_path=str(main.path)) is None
    assert hook("subagent-stop", transcript) is None  # no transcript of its own: nothing said


def test_a_stop_waits_for_the_transcript_to_hold_the_message_it_stops_on(tmp_path: Path) -> None:
    """Claude Code writes its transcript in batches: at a Stop the claim's result may not be on disk yet. The
    hook reads again until the message the session stops on (`last_assistant_message`) is there."""
    behind = Transcript(tmp_path / "t.jsonl")
    behind.write()  # nothing on disk yet: the claim and the last message are still in Claude Code's buffer
    whole = Transcript(tmp_path / "whole.jsonl")
    whole.call("claim_next", {}, CLAIM)
    said = {"type": "text", "text": "Stopping, as you asked."}
    whole.entries.append({"type": "assistant", "message": {"role": "assistant", "content": [said]}})
    whole.write()
    node = shutil.which("node")
    assert node is not None
    hook_input = {
        "session_id": "s1",
        "transcript_path": str(behind.path),
        "hook_event_name": "Stop",
        "stop_hook_active": False,
        "last_assistant_message": "Stopping, as you asked.",
    }
    env = {key: value for key, value in os.environ.items() if key != "JCT_HOOKS"}
    running = subprocess.Popen(
        [node, str(SCRIPT), "stop"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert running.stdin is not None
    running.stdin.write(json.dumps(hook_input))
    running.stdin.close()
    time.sleep(0.5)  # the batch lands while the hook waits
    assert running.poll() is None, "the hook answered before the transcript held the message it stops on"
    shutil.copyfile(whole.path, behind.path)
    assert running.stdout is not None
    answer = json.loads(running.stdout.read())
    assert running.wait(timeout=30) == 0
    assert answer["decision"] == "block"
    assert f"JCT task {TASK} (run_id {RUN})" in answer["reason"]
