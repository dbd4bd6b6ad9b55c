#!/usr/bin/env node
// JCT's Claude Code hooks (plain Node, no dependencies): what the session holds, read from its transcript.
//
//   node jct-hook.js stop           a Stop hook: a session that holds a claim may not end its turn before it
//                                   completes or releases it; one that has just completed a task is told to
//                                   claim the next (once: it may stop when it was told and made no JCT call)
//   node jct-hook.js subagent-stop  the same for a subagent (the jct-worker), from its own transcript
//   node jct-hook.js session-start  a SessionStart hook: after a resume or a compaction, the claim the session
//                                   holds goes back into its context
//
// The session's claims are the results of its jct_claim_next and jct_claim_task calls in the transcript
// (`transcript_path` in the hook's input); a claim is held until a jct_complete_task or jct_release_task on it
// succeeds, or a call on it answers LEASE_EXPIRED, NOT_CLAIMANT or TASK_NOT_CLAIMED. JCT_HOOKS=off turns both off.
"use strict";

const fs = require("fs");

const WAIT_SECONDS = 120;
const MAX_BLOCKS = 3; // Stop blocks in a row without a JCT call in between, before the hook lets the session stop
const MARK = "[jct hook]";
const FEEDBACK = "Stop hook feedback"; // how Claude Code records a Stop hook's block in the transcript
const GONE = new Set(["LEASE_EXPIRED", "NOT_CLAIMANT", "TASK_NOT_CLAIMED"]);
// Claude Code writes its transcript in batches: at a Stop the last lines (a claim's tool result among them)
// may not be on disk yet. The hook waits, at most this long, until the message it stops on is there.
const CATCH_UP_MS = 3000;

function readStdin() {
  try {
    return JSON.parse(fs.readFileSync(0, "utf8") || "{}");
  } catch {
    return {};
  }
}

function entries(path) {
  let text;
  try {
    text = fs.readFileSync(path, "utf8");
  } catch {
    return [];
  }
  const found = [];
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    try {
      found.push(JSON.parse(line));
    } catch {
      // a line being written as we read: skip it
    }
  }
  return found;
}

function sleep(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

// Whether `text` (the Stop input's last_assistant_message) is the last assistant text in the transcript.
function endsWith(found, text) {
  for (let i = found.length - 1; i >= 0; i -= 1) {
    const entry = found[i];
    if (!entry || entry.type !== "assistant" || !entry.message) continue;
    const said = textOf(entry.message.content).trim();
    if (said) return said === text;
  }
  return false;
}

// The transcript's entries once it holds the message the session stops on (`last`), or as they are when
// there is none to wait for or CATCH_UP_MS has passed.
function caughtUp(path, last) {
  const text = typeof last === "string" ? last.trim() : "";
  const deadline = Date.now() + CATCH_UP_MS;
  let found = entries(path);
  while (text && !endsWith(found, text) && Date.now() < deadline) {
    sleep(50);
    found = entries(path);
  }
  return found;
}

function textOf(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((part) => (part && part.text) || "").join("");
  return "";
}

function parsed(text) {
  try {
    const value = JSON.parse(text);
    return value && typeof value === "object" ? value : null;
  } catch {
    return null;
  }
}

// "mcp__jct__jct_claim_next", "mcp__plugin_jct_jct__jct_claim_next", ... -> "claim_next"
function jctTool(name) {
  const last = String(name || "").split("__").pop();
  return last.startsWith("jct_") ? last.slice(4) : null;
}

// The session's JCT state: the claim it holds (or null); what happened last to its claims (`last`: claimed,
// completed, released, empty: a jct_claim_next that found nothing); how many times a Stop hook blocked
// since its last JCT call.
function state(found) {
  const calls = new Map(); // tool_use id -> {tool, input}
  const result = { held: null, last: null, blocks: 0 };
  for (const entry of found) {
    // The conversation only: a transcript also keeps copies of API requests, hook records and attachments.
    if (!entry || (entry.type !== "user" && entry.type !== "assistant")) continue;
    const content = entry.message && entry.message.content;
    if (typeof content === "string") {
      if (content.startsWith(FEEDBACK) && content.includes(MARK)) result.blocks += 1;
      continue;
    }
    for (const block of Array.isArray(content) ? content : []) {
      if (!block || typeof block !== "object") continue;
      if (block.type === "tool_use") {
        const tool = jctTool(block.name);
        if (tool) calls.set(block.id, { tool, input: block.input || {} });
      } else if (block.type === "tool_result" && calls.has(block.tool_use_id)) {
        const { tool, input } = calls.get(block.tool_use_id);
        calls.delete(block.tool_use_id);
        result.blocks = 0;
        apply(result, tool, input, parsed(textOf(block.content)), Boolean(block.is_error));
      }
    }
  }
  return result;
}

function apply(result, tool, input, body, isError) {
  const held = result.held;
  if (tool === "claim_next" || tool === "claim_task") {
    if (isError || !body || body.success === false) return;
    if (tool === "claim_next" && body.claimed === false) {
      result.last = "empty";
      return;
    }
    result.last = "claimed";
    result.held = {
      task_id: body.task_id,
      run_id: body.run_id,
      objective: body.objective,
      workspace: body.workspace || null,
    };
    return;
  }
  if (!held || (input.task_id && input.task_id !== held.task_id) || (input.run_id && input.run_id !== held.run_id)) {
    return;
  }
  const code = body && body.error && body.error.code;
  if (code && GONE.has(code)) {
    result.held = null;
    result.last = "released";
  } else if ((tool === "complete_task" || tool === "release_task") && !isError && body && body.success !== false) {
    result.held = null;
    result.last = tool === "complete_task" ? "completed" : "released";
  }
}

function describe(held) {
  let text = `JCT task ${held.task_id} (run_id ${held.run_id})`;
  if (held.objective) text += `: ${held.objective}`;
  const space = held.workspace;
  if (space && space.path) text += `\nWorkspace: ${space.path} (branch ${space.branch}); work and commit there.`;
  else if (space && space.branch) text += `\nWorkspace: branch ${space.branch}; commit on it and push it.`;
  return text;
}

function finishIt(held) {
  return (
    `Pass run_id ${held.run_id} to every call on it: commit your work, report artifacts, then jct_complete_task ` +
    `(success false with error_message if it failed); if you cannot go on, jct_release_task with a reason.`
  );
}

function onStop(input, transcript) {
  const now = state(caughtUp(transcript, input.last_assistant_message));
  if (now.held) {
    if (now.blocks >= MAX_BLOCKS) return null; // it was told MAX_BLOCKS times and made no JCT call since
    return {
      decision: "block",
      reason: `${MARK} You still hold ${describe(now.held)}\nDo not stop before you complete or release it. ${finishIt(now.held)}`,
    };
  }
  // Once per JCT call: a session that was told and made no JCT call since (stop_hook_active) may stop.
  if (now.last === "completed" && !(input.stop_hook_active && now.blocks > 0)) {
    return {
      decision: "block",
      reason:
        `${MARK} You completed your JCT task; more work may be claimable: call jct_claim_next with ` +
        `wait_seconds ${WAIT_SECONDS} and work the next task. Stop when it answers claimed: false, or when the ` +
        `budget you were given is reached (then say so).`,
    };
  }
  return null;
}

function onSessionStart(input) {
  if (input.source !== "resume" && input.source !== "compact") return null;
  const now = state(entries(input.transcript_path));
  if (!now.held) return null;
  return {
    hookSpecificOutput: {
      hookEventName: "SessionStart",
      additionalContext:
        `${MARK} This session holds ${describe(now.held)}\nContinue it (jct_get_context re-reads the briefing). ` +
        finishIt(now.held),
    },
  };
}

function main() {
  if (/^(off|0|false|no)$/i.test(process.env.JCT_HOOKS || "")) return;
  const input = readStdin();
  const event = process.argv[2];
  let answer = null;
  if (event === "stop") answer = onStop(input, input.transcript_path);
  else if (event === "subagent-stop" && input.agent_transcript_path) answer = onStop(input, input.agent_transcript_path);
  else if (event === "session-start") answer = onSessionStart(input);
  if (answer) process.stdout.write(JSON.stringify(answer));
}

main();
