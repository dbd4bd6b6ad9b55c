#!/usr/bin/env node
// The plugin's headersHelper (plain Node, no dependencies): prints {"X-JCT-Agent": "<32 hex digits>"}, the same
// for every connection one Claude Code process makes and another for each other process, so that a JCT server
// without tokens lists each Claude Code session as its own agent (over HTTP Claude Code speaks the stateless
// protocol: no MCP session tells its requests apart).
//
//   node agent-header.js "$PPID"
//
// Claude Code runs the command through a shell once per connection to the server (again after a reconnect),
// and not per request; the shell's $PPID is Claude Code's process id. The value is a hash of the host name, that
// id and the process's start time (so a process that later gets the same id is another agent): it names
// nothing and proves nothing. JCT authenticates nobody by it, and with tokens it ignores it.
"use strict";

const crypto = require("crypto");
const fs = require("fs");
const os = require("os");
const { execFileSync } = require("child_process");

function startOf(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19] || ""; // field 22: start time since boot
  } catch {
    // no /proc: ask ps
  }
  try {
    return execFileSync("ps", ["-o", "lstart=", "-p", String(pid)], { encoding: "utf8", timeout: 5000 }).trim();
  } catch {
    return "";
  }
}

const given = process.argv[2] || "";
const pid = /^[1-9][0-9]*$/.test(given) ? Number(given) : process.ppid;
const agent = crypto.createHash("sha256").update(`${os.hostname()}\n${pid}\n${startOf(pid)}`).digest("hex");
process.stdout.write(JSON.stringify({ "X-JCT-Agent": agent.slice(0, 32) }) + "\n");
