"""bench/RESULTS.md and its charts, from the suite's results (a dict, also saved as bench/results/results.json)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import claim_wait
import fleet
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

RATIO_TARGET = 1.5  # cost vs echo; p50 at 1M vs 1k
SCALE_OUT_TARGET = 0.10  # server CPU per 1,000 lifecycles may grow by at most 10% from one server to two
SESSION_TARGET_KIB = 200.0
TARGET_CALLS = ("jct_claim_next", "jct_report_artifact", "jct_complete_task")
SCALE_TARGET_CALLS = ("jct_list_tasks", "jct_claim_next", "jct_queue_stats", "resources/list", "jct_get_audit_trail")
# With missions loaded (results["scale_missions"], `bench/scale.py --json`): the claim is the target; the mission
# reads are reported beside it.
MISSION_TARGET_CALLS = ("jct_claim_next",)
MISSION_REPORTED_CALLS = ("jct_get_mission", "jct_list_missions")
PROFILE_MARK = "<!-- PROFILE: the lead adds what the profile blames for each missed target here -->"
# What the profiles blame for the missed targets, written by hand from the profiles and kept beside the
# code: RESULTS.md is regenerated on every run, this analysis is not.
ANALYSIS = Path(__file__).with_name("ANALYSIS.md")


def verdict_max(value: float, limit: float) -> str:
    """Met, or missed by how much, for a value that must not exceed `limit`."""
    if math.isnan(value):
        return "not measured"
    if value <= limit:
        return "met"
    return f"**missed** by {(value / limit - 1) * 100:.0f}% ({value / limit:.2f}x the target)"


def f1(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:,.1f}"


def f0(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:,.0f}"


# --- the summary -------------------------------------------------------------------------------------


def targets(results: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []
    for dialect, levels in results.get("protocol", {}).items():
        for level, calls in levels.items():
            echo = calls["echo"]["calls_per_s"]
            for name in TARGET_CALLS:
                rate = calls[name]["calls_per_s"]
                cost = echo / rate if rate else float("inf")
                label = f"`{name}`{' (1 KiB)' if name == 'jct_report_artifact' else ''} cost vs `echo`"
                rows.append(
                    (
                        f"{label}, {dialect}, {level} client(s)",
                        f"{cost:.2f}x",
                        f"≤ {RATIO_TARGET}x",
                        verdict_max(cost, 1.5),
                    )
                )
    scale = results.get("scale")
    if scale:
        small, large = str(min(scale["sizes"])), str(max(scale["sizes"]))
        for dialect, sizes in scale["dialects"].items():
            drift = ""
            if "echo" in sizes[large]["stats"]:
                echo_ratio = sizes[large]["stats"]["echo"]["p50_ms"] / sizes[small]["stats"]["echo"]["p50_ms"]
                drift = f"; `echo` itself {echo_ratio:.2f}x"
            for name in SCALE_TARGET_CALLS:
                ratio = sizes[large]["stats"][name]["p50_ms"] / sizes[small]["stats"][name]["p50_ms"]
                rows.append(
                    (
                        f"`{name}` p50 at {int(large):,} tasks vs {int(small):,}, {dialect}",
                        f"{ratio:.2f}x ({sizes[large]['stats'][name]['p50_ms']:.1f} vs "
                        f"{sizes[small]['stats'][name]['p50_ms']:.1f} ms{drift})",
                        f"≤ {RATIO_TARGET}x",
                        verdict_max(ratio, RATIO_TARGET),
                    )
                )
            for name in MISSION_REPORTED_CALLS:  # a load with missions (scale.load's default since they exist)
                if name in sizes[large]["stats"]:
                    ratio = sizes[large]["stats"][name]["p50_ms"] / sizes[small]["stats"][name]["p50_ms"]
                    rows.append(
                        (
                            f"`{name}` p50 at {int(large):,} tasks vs {int(small):,}, {dialect}",
                            f"{ratio:.2f}x ({sizes[large]['stats'][name]['p50_ms']:.1f} vs "
                            f"{sizes[small]['stats'][name]['p50_ms']:.1f} ms{drift})",
                            "(reported)",
                            _reported(ratio),
                        )
                    )
    rows += mission_targets(results.get("scale_missions"))
    cont = results.get("contention")
    if cont:
        growth = scale_out(cont["cells"])
        for agents, (one, two, change) in growth.items():
            rows.append(
                (
                    f"server CPU per 1,000 lifecycles, 2 servers vs 1 on PostgreSQL, {agents} agents",
                    f"{change * 100:+.0f}% ({two:.1f} vs {one:.1f} CPU s)",
                    f"≤ +{SCALE_OUT_TARGET * 100:.0f}%",
                    "met"
                    if change <= SCALE_OUT_TARGET
                    else f"**missed** by {(change - SCALE_OUT_TARGET) * 100:.0f} points "
                    f"(+{change * 100:.0f}% against +{SCALE_OUT_TARGET * 100:.0f}%)",
                )
            )
        doubles = sum(c["double_claims"] for c in cont["cells"])
        lost = sum(c["lost"] for c in cont["cells"])
        rows.append(
            (
                f"double claims / lost tasks, all {len(cont['cells'])} contention runs (from the audit log)",
                f"{doubles} / {lost}",
                "0 / 0",
                "met" if doubles == lost == 0 else "**missed**",
            )
        )
    sess = results.get("sessions")
    if sess:
        per = sess["idle_kib_per_session"]
        rows.append(
            (
                f"server memory per idle open session ({sess['sessions']} legacy sessions)",
                f"{per:.0f} KiB",
                f"< {SESSION_TARGET_KIB:.0f} KiB",
                "met" if per < SESSION_TARGET_KIB else verdict_max(per, SESSION_TARGET_KIB),
            )
        )
    integrate = results.get("integrate")
    if integrate:
        for variant, cell in integrate["variants"].items():
            rows.append(
                (
                    f"integrating a one-file change into {integrate['files']:,} files (replay + ref update), "
                    f"{variant}, vs the bare git commands",
                    f"{cell['ratio']:.2f}x ({cell['jct_ms']:.1f} vs {cell['bare_ms']:.1f} ms)",
                    f"≤ {integrate['target']}x",
                    verdict_max(cell["ratio"], integrate["target"]),
                )
            )
    return rows


def _reported(ratio: float) -> str:
    return f"within {RATIO_TARGET}x" if ratio <= RATIO_TARGET else f"**over {RATIO_TARGET}x** (see below)"


def mission_targets(scale: dict[str, Any] | None) -> list[tuple[str, str, str, str]]:
    """The summary's rows for the scale run with missions loaded."""
    if not scale:
        return []
    rows = []
    small, large = str(min(scale["sizes"])), str(max(scale["sizes"]))
    for dialect, sizes in scale["dialects"].items():
        stats = {n: sizes[n]["stats"] for n in (small, large)}
        echo_ratio = stats[large]["echo"]["p50_ms"] / stats[small]["echo"]["p50_ms"]
        shape = f"{sizes[large]['missions']:,} missions, {sizes[large]['blocked']:,} tasks blocked"
        for name in (*MISSION_TARGET_CALLS, *MISSION_REPORTED_CALLS):
            if name not in stats[large]:
                continue
            ratio = stats[large][name]["p50_ms"] / stats[small][name]["p50_ms"]
            target = name in MISSION_TARGET_CALLS
            rows.append(
                (
                    f"`{name}` p50 at {int(large):,} tasks vs {int(small):,}, with missions ({shape}), {dialect}",
                    f"{ratio:.2f}x ({stats[large][name]['p50_ms']:.1f} vs {stats[small][name]['p50_ms']:.1f} ms; "
                    f"`echo` itself {echo_ratio:.2f}x)",
                    f"≤ {RATIO_TARGET}x" if target else "(reported)",
                    verdict_max(ratio, RATIO_TARGET) if target else _reported(ratio),
                )
            )
    return rows


def scale_out(cells: list[dict[str, Any]]) -> dict[str, tuple[float, float, float]]:
    """Per agent count, and over all agent counts: (CPU s per 1,000 lifecycles with one server, with two, growth)."""
    one = {c["agents"]: c for c in cells if c["config"] == "postgresql"}
    two = {c["agents"]: c for c in cells if c["config"] == "postgresql-2"}
    out: dict[str, tuple[float, float, float]] = {}
    for agents in sorted(set(one) & set(two)):
        a, b = one[agents]["cpu_per_1000"], two[agents]["cpu_per_1000"]
        out[str(agents)] = (a, b, b / a - 1)
    if len(out) > 1:
        shared = sorted(set(one) & set(two))
        cpu_one = sum(sum(one[n]["server_cpu_s"]) for n in shared) / sum(one[n]["tasks"] for n in shared) * 1000
        cpu_two = sum(sum(two[n]["server_cpu_s"]) for n in shared) / sum(two[n]["tasks"] for n in shared) * 1000
        out["all"] = (cpu_one, cpu_two, cpu_two / cpu_one - 1)
    return out


# --- charts --------------------------------------------------------------------------------------------


def chart_throughput(cells: list[dict[str, Any]], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8.5, 4.2))
    configs = list(dict.fromkeys(c["config"] for c in cells))
    for n, config in enumerate(configs):
        mine = sorted((c for c in cells if c["config"] == config), key=lambda c: c["agents"])
        colour = f"C{n}"
        xs = [c["agents"] for c in mine]
        ax.plot(xs, [c["lifecycles_per_s"] for c in mine], "o-", color=colour, label=f"JCT lifecycle, {config}")
        ax.plot(
            xs, [c["echo_lifecycles_per_s"] for c in mine], "s--", color=colour, alpha=0.6, label=f"4x echo, {config}"
        )
    ax.set_xlabel("agents (concurrent MCP sessions)")
    ax.set_ylabel("lifecycles per second")
    ax.set_title("Throughput against number of agents")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def chart_latency(scale: dict[str, Any], path: Path) -> None:
    dialects = list(scale["dialects"])
    fig, axes = plt.subplots(1, len(dialects), figsize=(8.5 * len(dialects), 4.2), squeeze=False)
    for ax, dialect in zip(axes[0], dialects, strict=True):
        sizes = sorted(int(n) for n in scale["dialects"][dialect])
        names = list(scale["dialects"][dialect][str(sizes[0])]["stats"])
        for name in names:
            p50 = [scale["dialects"][dialect][str(s)]["stats"][name]["p50_ms"] for s in sizes]
            if name == "echo":
                ax.plot(sizes, p50, "--", color="k", label="echo (protocol floor)")
            else:
                ax.plot(sizes, p50, "o-", label=name)
        ax.set_xscale("log")
        ax.set_xlabel("tasks in the database")
        ax.set_ylabel("p50 latency, ms (one client)")
        ax.set_title(f"Latency against queue size, {dialect}")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def chart_memory(sess: dict[str, Any], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    xs = [point[0] for point in sess["curve"]]
    ys = [point[1] / 1024 for point in sess["curve"]]
    ax.plot(xs, ys, "o-", label="server RSS, idle sessions (no subscriptions)")
    ax.plot([sess["sessions"]], [sess["rss_subscribed_kib"] / 1024], "s", color="C3", label="all subscribed, notified")
    base = sess["rss_before_kib"] / 1024
    ax.plot(
        [0, sess["sessions"]],
        [base, base + SESSION_TARGET_KIB * sess["sessions"] / 1024],
        ":",
        color="grey",
        label=f"target slope: {SESSION_TARGET_KIB:.0f} KiB per session",
    )
    ax.set_xlabel("open sessions (legacy streamable HTTP)")
    ax.set_ylabel("server RSS, MiB")
    ax.set_title("Server memory against open sessions")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def chart_artifacts(rows: list[dict[str, Any]], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for n, dialect in enumerate(dict.fromkeys(r["dialect"] for r in rows)):
        mine = [r for r in rows if r["dialect"] == dialect]
        xs = [r["size"] / 1024 for r in mine]
        ax.plot(xs, [r["p50_ms"] for r in mine], "o-", color=f"C{n}", label=f"jct_report_artifact p50, {dialect}")
        ax.plot(xs, [r["sink_p50_ms"] for r in mine], "s--", color=f"C{n}", alpha=0.6, label=f"sink p50, {dialect}")
    ax.set_xscale("log")
    ax.set_xlabel("artifact size, KiB (10 agents at once)")
    ax.set_ylabel("p50 latency, ms")
    ax.set_title("Artifact latency against size")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


# --- the document --------------------------------------------------------------------------------------


def write(results: dict[str, Any], out: Path, results_dir: Path) -> None:
    results_dir.mkdir(parents=True, exist_ok=True)
    rel = results_dir.relative_to(out.parent) if results_dir.is_relative_to(out.parent) else results_dir
    m = results["machine"]
    t = results["timings"]
    lines = [
        "# Benchmark results",
        "",
        f"Written by `make bench` (`python bench/suite.py`) on {m['date']}; the suite took "
        f"**{t.get('total', 0) / 60:.1f} min** ({', '.join(f'{k} {v:.0f} s' for k, v in t.items() if k != 'total')}). "
        f"Raw numbers: [{rel}/results.json]({rel}/results.json).",
        "",
        "## Summary: every target",
        "",
        "Every ratio compares two figures measured in this run, on this machine.",
        "",
        "| target | measured | goal | verdict |",
        "|---|---|---|---|",
    ]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in targets(results)]
    # The fleet (bench/fleet.py) runs on its own; its last figures are kept through the suite's runs.
    fleet_json = results_dir / "fleet.json"
    fleet_result = json.loads(fleet_json.read_text()) if fleet_json.exists() else None
    if fleet_result is not None:
        lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in fleet.summary_rows(fleet_result)]
    # So do the waiting claims' (bench/claim_wait.py).
    waiting_json = results_dir / "claim_wait.json"
    if waiting_json.exists():
        lines += [
            f"| {a} | {b} | {c} | {d} |" for a, b, c, d in claim_wait.summary_rows(json.loads(waiting_json.read_text()))
        ]
    for name, error in results.get("errors", {}).items():
        lines.append(f"| workload `{name}` | **failed**: `{error}` | runs to completion | **missed** |")
    lines += load_lines(results)
    lines += [
        "",
        "### Where the time goes (missed targets)",
        "",
        *(ANALYSIS.read_text().rstrip().splitlines() if ANALYSIS.exists() else [PROFILE_MARK]),
        "",
        *(profile_lines(results.get("profile")) if results.get("profile") or not ANALYSIS.exists() else []),
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        f"| CPU cores | {m['cores']} ({m['cpu']}) |",
        f"| memory | {m['memory_gib']:.1f} GiB |",
        f"| Python | {m['python']} |",
        f"| SQLite | {m['sqlite']} |",
        f"| PostgreSQL | {m['postgresql']} (same machine) |",
        f"| mcp (SDK) | {m['mcp']} |",
        f"| platform | {m['platform']} |",
        f"| load average before / after | {' '.join(f'{x:.2f}' for x in m['load_before'])} / "
        f"{' '.join(f'{x:.2f}' for x in m.get('load_after', []))} |",
        "",
        "Servers, load generators and PostgreSQL share these cores: every server is its own process, the load "
        "generators are the suite's process (and, for sessions, separate client processes). Server CPU is read "
        "from `/proc/<pid>/stat` of each server process, so the load generators' CPU is not counted there; "
        "throughput figures, however, are for clients and servers competing for the same cores.",
        "",
    ]
    if "contention" in results:
        lines += contention_section(results["contention"], results_dir, rel)
    if "scale" in results:
        lines += scale_section(results["scale"], results_dir, rel)
    if "scale_missions" in results:
        lines += scale_section(results["scale_missions"], results_dir, rel, missions=True)
    if "sessions" in results:
        lines += sessions_section(results["sessions"], results_dir, rel)
    if "artifacts" in results:
        lines += artifacts_section(results["artifacts"]["rows"], results_dir, rel)
    if "protocol" in results:
        lines += protocol_section(results["protocol"])
    if "integrate" in results:
        lines += integrate_section(results["integrate"])
    if fleet_result is not None:
        lines += fleet.section(fleet_result)
    out.write_text("\n".join(lines) + "\n")


def load_lines(results: dict[str, Any]) -> list[str]:
    """The load average (1, 5, 15 min) before and after each workload: every figure above is read beside it."""
    load = results.get("load")
    if not load:
        return []
    rows = []
    for name, cell in load.items():
        before = " ".join(f"{x:.2f}" for x in cell["before"])
        after = " ".join(f"{x:.2f}" for x in cell.get("after", []))
        note = f" ({cell['note']})" if "note" in cell else ""
        rows.append(f"| {name} | {results['timings'].get(name, 0):.0f} s | {before} | {after}{note} |")
    return [
        "",
        "Load average (1, 5 and 15 min, from `/proc/loadavg`) around each workload, to read beside its figures: "
        "the suite's own servers, clients and PostgreSQL make most of it on 2 cores.",
        "",
        "| workload | took | load before | load after |",
        "|---|---|---|---|",
        *rows,
    ]


def profile_lines(prof: dict[str, Any] | None) -> list[str]:
    if not prof:
        return ["_To be filled in from a profile (`python bench/suite.py --profile` adds pyinstrument's top frames)._"]
    return [
        f"pyinstrument on one bench server ({prof['dialect']}) while {prof['agents']} agents drained "
        f"{prof['tasks']} tasks through the lifecycle (`bench/profiling.py`; the share of the wall-clock samples "
        "spent in each function's own code, start-up and idle polling included; a profiled run, not a measurement):",
        "",
        "```",
        *prof["top"],
        "```",
    ]


def contention_section(cont: dict[str, Any], results_dir: Path, rel: Path | str) -> list[str]:
    cells = cont["cells"]
    chart_throughput(cells, results_dir / "throughput.png")
    lines = [
        "## 1. Contention: throughput against number of agents",
        "",
        f"{cont['tasks']:,} queued tasks per run, drained by N agents (one legacy streamable HTTP session each) "
        "through claim-next, progress, artifact (1 KiB) and complete. Beside it, at the same concurrency on the "
        f'same server(s): {cont["echo_lifecycles"]} "echo lifecycles" of 4 `echo` calls (the protocol floor), '
        f"and the raw claim `UPDATE` draining another {cont['tasks']:,} tasks on the same database (the storage "
        "floor; one connection on SQLite, min(N, 20) on PostgreSQL). Double claims and lost tasks are counted "
        "in the database after each run (audit log `task.claimed`/`task.completed` per task, runs per task, "
        "task status). All agents run in the suite's one process (the load generator); its CPU column shows "
        "how close it came to a full core, that is, whether it rather than the server capped the throughput.",
        "",
        f"![throughput]({rel}/throughput.png)",
        "",
        "| config | agents | lifecycles/s | echo lifecycles/s | JCT vs echo | raw claims/s | server CPU s per 1,000 "
        "(per process) | load generator CPU s per 1,000 (share of one core) | claim p50/p99 ms | complete p50/p99 ms "
        "| double claims | lost |",
        "|---|---:|---:|---:|---:|---:|---|---|---|---|---:|---:|",
    ]
    for c in cells:
        per_process = " + ".join(f"{s / c['tasks'] * 1000:.1f}" for s in c["server_cpu_s"])
        slow = c["echo_lifecycles_per_s"] / c["lifecycles_per_s"] if c["lifecycles_per_s"] else float("nan")
        client = "n/a"
        if "client_cpu_s" in c and c["wall"]:
            client = f"{c['client_cpu_s'] / c['tasks'] * 1000:.1f} ({c['client_cpu_s'] / c['wall'] * 100:.0f}%)"
        lines.append(
            f"| {c['config']} | {c['agents']} | {f1(c['lifecycles_per_s'])} | {f1(c['echo_lifecycles_per_s'])} | "
            f"{slow:.2f}x | {f0(c['raw_claims_per_s'])} | {c['cpu_per_1000']:.1f} ({per_process}) | {client} | "
            f"{f0(c['p50_ms']['jct_claim_next'])} / {f0(c['p99_ms']['jct_claim_next'])} | "
            f"{f0(c['p50_ms']['jct_complete_task'])} / {f0(c['p99_ms']['jct_complete_task'])} | "
            f"{c['double_claims']} | {c['lost']} |"
        )
    growth = scale_out(cells)
    if growth:
        lines += [
            "",
            "Scale-out: server CPU seconds per 1,000 lifecycles, summed over the server processes "
            f"(target: at most +{SCALE_OUT_TARGET * 100:.0f}% from one server to two on the same PostgreSQL):",
            "",
            "| agents | 1 server | 2 servers | change |",
            "|---|---:|---:|---:|",
        ]
        lines += [f"| {k} | {a:.1f} | {b:.1f} | {g * 100:+.0f}% |" for k, (a, b, g) in growth.items()]
    lines += ["", "Audit checks per run:", ""]
    lines += [f"- {c['config']}, {c['agents']} agents: {c['checks']}" for c in cells]
    return [*lines, ""]


def scale_section(scale: dict[str, Any], results_dir: Path, rel: Path | str, *, missions: bool = False) -> list[str]:
    suffix = "-missions" if missions else ""
    chart_latency(scale, results_dir / f"latency{suffix}.png")
    sizes = sorted(scale["sizes"])
    if missions:
        when = f"Run {scale['date']}, load average {scale['load_average_during']}. " if "date" in scale else ""
        lines = [
            "## 2b. Scale with missions: latency against queue size",
            "",
            "The same load with missions among the tasks (`bench/scale.py --json`, run on its own; sizes measured "
            "side by side, calls interleaved between them): one mission per 100 tasks (10,000 at 1M), 10-100 "
            "tasks each in 2-4 phases, chains and diamonds of dependencies inside a phase; ended missions "
            "completed (or, one in ten, cancelled part way); missions reaching into the working set active, "
            "their tasks queued only when every dependency and earlier phase is approved, blocked otherwise. "
            f"One server per size, one client each, {scale['calls']} calls per cell after a warm-up. {when}"
            "`jct_claim_next` must skip the blocked tasks inside its one statement and bring the mission's "
            "decisions with the briefing; `jct_get_mission` reads an active mission's page (the active missions "
            "in turn), `jct_list_missions` the first page of active missions.",
            "",
            f"![latency with missions]({rel}/latency{suffix}.png)",
            "",
        ]
    else:
        lines = [
            "## 2. Scale: latency against queue size",
            "",
            f"Tasks bulk-loaded by `bench/scale.py` (`load`: mostly finished tasks with runs, evidence and audit "
            f"rows, a working set of queued and running ones), one server, one client, {scale['calls']} calls per "
            "cell after a warm-up (`scale.measure`). `echo` is the protocol floor on the same server.",
            "",
            f"![latency]({rel}/latency.png)",
            "",
        ]
    for dialect, by_size in scale["dialects"].items():
        head = " | ".join(f"{n:,} p50 | {n:,} p99" for n in sizes)
        loads = ", ".join(f"{n:,} in {by_size[str(n)]['load_seconds']:.0f} s" for n in sizes)
        if missions:
            loads += "; " + ", ".join(
                f"{n:,}: {by_size[str(n)]['missions']:,} missions ({by_size[str(n)]['active_missions']:,} active), "
                f"{by_size[str(n)]['blocked']:,} tasks blocked"
                for n in sizes
            )
        lines += [
            f"{dialect} (bulk-load: {loads}); ms:",
            "",
            f"| call | {head} | p50 {sizes[-1]:,} / {sizes[0]:,} | that ÷ echo's |",
            "|---|" + "---:|" * (2 * len(sizes) + 2),
        ]
        stats = {n: by_size[str(n)]["stats"] for n in sizes}
        echo_drift = (
            stats[sizes[-1]]["echo"]["p50_ms"] / stats[sizes[0]]["echo"]["p50_ms"] if "echo" in stats[sizes[0]] else 1.0
        )
        for name in by_size[str(sizes[0])]["stats"]:
            cells = " | ".join(
                f"{by_size[str(n)]['stats'][name]['p50_ms']:.1f} | {by_size[str(n)]['stats'][name]['p99_ms']:.1f}"
                for n in sizes
            )
            ratio = by_size[str(sizes[-1])]["stats"][name]["p50_ms"] / by_size[str(sizes[0])]["stats"][name]["p50_ms"]
            lines.append(f"| `{name}` | {cells} | {ratio:.2f}x | {ratio / echo_drift:.2f}x |")
        lines += [
            "",
            "The last column divides by `echo`'s own drift between the two sizes (the same server and client; "
            "no database): on a busy machine it separates what the database adds from noise. The target is on "
            "the plain ratio.",
            "",
        ]
        plans = by_size[str(sizes[-1])].get("plans")
        if by_size[str(sizes[-1])].get("plans_error"):
            lines += [f"Plans could not be captured: `{by_size[str(sizes[-1])]['plans_error']}`", ""]
        if plans:
            plan_file = results_dir / f"plans{suffix}-{dialect}.md"
            write_plans(plans, plan_file, dialect, sizes[-1])
            how = "EXPLAIN ANALYZE" if dialect == "postgresql" else "EXPLAIN QUERY PLAN"
            lines += [
                f"Plans at {sizes[-1]:,} tasks ({how} of the statements each call sends, captured by "
                f"`scale.explain`; full SQL and plans in [{rel}/{plan_file.name}]({rel}/{plan_file.name})):",
                "",
            ]
            for p in plans:
                flag = f"**full scan**: {', '.join(p['full_scans'])}" if p["full_scans"] else "indexed"
                lines.append(f"- {p['name']}: {flag}; {', '.join(dict.fromkeys(p['scans'])) or 'no table access'}")
            lines.append("")
    return lines


def write_plans(plans: list[dict[str, Any]], path: Path, dialect: str, size: int) -> None:
    lines = [f"# Query plans, {dialect}, {size:,} tasks", ""]
    for p in plans:
        lines += [f"## {p['name']}", "", "```sql", p["sql"].strip(), "```", "", "```", p["plan"], "```", ""]
    path.write_text("\n".join(lines))


def sessions_section(sess: dict[str, Any], results_dir: Path, rel: Path | str) -> list[str]:
    chart_memory(sess, results_dir / "memory.png")
    lines = [
        "## 3. Sessions: memory against open sessions, notification fan-out",
        "",
        f"One `jct serve` ({sess['dialect']}) in its own process; {sess['sessions']} legacy streamable HTTP "
        f"sessions opened from {sess['workers']} client processes (opening took {sess['open_seconds']:.0f} s). "
        "Server memory is VmRSS from `/proc/<pid>/status` with only the agent's session open, after each step "
        "of opening idle sessions (no subscriptions), and once every session has subscribed to one run's URI "
        "and received one notification. Fan-out: from the agent's `jct_complete_task` returning until each "
        "session's `notifications/resources/updated` arrives (the change feed polls every 0.25 s).",
        "",
        f"![memory]({rel}/memory.png)",
        "",
        "| | server RSS | per session |",
        "|---|---:|---:|",
        f"| only the agent's session | {sess['rss_before_kib'] / 1024:.1f} MiB | |",
        f"| {sess['sessions']} idle sessions | {sess['curve'][-1][1] / 1024:.1f} MiB | "
        f"{sess['idle_kib_per_session']:.0f} KiB |",
        f"| {sess['sessions']} subscribed sessions | {sess['rss_subscribed_kib'] / 1024:.1f} MiB | "
        f"{sess['subscribed_kib_per_session']:.0f} KiB |",
        "",
        "| round | p50 ms | p99 ms | min ms | max ms | missing | server CPU ms |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, r in enumerate(sess["rounds"], start=1):
        lines.append(
            f"| {n} | {f0(r['p50_ms'])} | {f0(r['p99_ms'])} | {f0(r['min_ms'])} | {f0(r['max_ms'])} | "
            f"{r['missing']} | {f0(r['server_cpu_ms'])} |"
        )
    return [*lines, ""]


def artifacts_section(rows: list[dict[str, Any]], results_dir: Path, rel: Path | str) -> list[str]:
    chart_artifacts(rows, results_dir / "artifacts.png")
    lines = [
        "## 4. Artifacts: 1 KiB, 100 KiB, 1 MiB from 10 agents at once",
        "",
        "Each of 10 agents holds a claimed task and reports its share of artifacts (inline content), all at "
        "once; then the same number of calls to `sink`, a tool on the same server that takes the same text and "
        "returns its length (the protocol floor for the payload).",
        "",
        f"![artifacts]({rel}/artifacts.png)",
        "",
        "| dialect | size | artifacts | artifacts/s | MiB/s | p50 ms | p99 ms | sink calls/s | sink p50 ms | "
        "sink p99 ms | cost vs sink |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        size = f"{r['size'] // 1024} KiB" if r["size"] < 1024 * 1024 else f"{r['size'] // (1024 * 1024)} MiB"
        lines.append(
            f"| {r['dialect']} | {size} | {r['count']} | {f1(r['per_s'])} | {r['mib_per_s']:.2f} | {f0(r['p50_ms'])} | "
            f"{f0(r['p99_ms'])} | {f1(r['sink_per_s'])} | {f0(r['sink_p50_ms'])} | {f0(r['sink_p99_ms'])} | "
            f"{r['sink_per_s'] / r['per_s']:.2f}x |"
        )
    return [*lines, ""]


def protocol_section(proto: dict[str, Any]) -> list[str]:
    lines = [
        "## 5. Protocol: single calls beside `echo` (bench/protocol.py)",
        "",
        "N clients, each phase started together; every call timed. Cost vs echo = echo calls/s ÷ the call's "
        "calls/s at the same concurrency (target: at most 1.5x). Server CPU = the server process's CPU time over "
        "the phase per call (its background loops included, as in echo's).",
        "",
        "| dialect | clients | call | calls/s | p50 ms | p99 ms | cost vs echo | server CPU ms/call |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for dialect, levels in proto.items():
        for level, calls in levels.items():
            echo = calls["echo"]["calls_per_s"]
            for name, cell in calls.items():
                cost = echo / cell["calls_per_s"] if cell["calls_per_s"] else float("inf")
                cpu = f"{cell['server_cpu_ms']:.2f}" if "server_cpu_ms" in cell else ""  # not measured before
                lines.append(
                    f"| {dialect} | {level} | `{name}` | {f0(cell['calls_per_s'])} | {cell['p50_ms']:.1f} | "
                    f"{cell['p99_ms']:.1f} | {cost:.2f}x | {cpu} |"
                )
    return [*lines, ""]


def integrate_section(integrate: dict[str, Any]) -> list[str]:
    lines = [
        "## 6. Integration: replay and ref update beside the bare git commands (bench/integrate.py)",
        "",
        f"A one-file change replayed (`rebase`) onto a target moved by one commit, in a generated repository of "
        f"{integrate['files']:,} files, then the target moved by compare-and-swap: `merges.replay` + "
        f"`merges.move_ref`, beside the same git commands (checked equal, commit ids aside) each run by "
        f"`subprocess.run`; alternating, median of {integrate['rounds']} rounds each; {integrate['git']}; "
        f"{integrate.get('date', '')}, {integrate.get('cores', '?')} cores at load average "
        f"{integrate.get('load_after', [float('nan')])[0]:.1f}.",
        "",
        "| repository | git commands | JCT ms | bare git ms | JCT / bare | median of paired ratios |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for variant, cell in integrate["variants"].items():
        lines.append(
            f"| {variant} | {cell['commands']} | {cell['jct_ms']:.1f} | {cell['bare_ms']:.1f} | {cell['ratio']:.2f}x | "
            f"{cell['paired_ratio']:.2f}x |"
        )
    return [*lines, ""]
