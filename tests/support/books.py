"""Counting from the database after a scenario: double claims, lost tasks, and acknowledged writes.

`Books.read(database_url)` reads tasks, runs, artifacts, evidence, reviews and the audit log once; each
method returns what breaks one rule, as readable lines (an empty list when the rule holds):

- `double_claims()`: no task claimed by two runs at once. The audit log's ids follow commit order for
  rows of one task (a claim sees the task queued only once the end of the previous run committed), so
  each `task.claimed` must come after the end row (`run.lease_expired`, `run.released`, `run.done`, ...)
  of the run claimed before it; and no task has two runs that both finished by their agent (done,
  under_review, failed).
- `lost_tasks()`: every task ended completed and approved, by exactly one run that is done; nothing is
  left running.
- `unaccounted_claims()`: every claimed run ended expired or released, or is the run that completed its
  task; every run has exactly one `task.claimed` row, and every such row its run.
- `overlapping_holds()`: no two tasks whose touches overlap ran at once on one repository (DESIGN section 16).
- `attempts_differ()`: a task's `attempts` is the number of its runs whose lease expired.
- `missing(tally)`: every claim, artifact and completion an agent was told of is in the database.
- `store_differs(trace_root)`: every file in the trace store is an artifact's whole content (no partial
  file, no temporary file, nothing unrecorded), and every stored artifact has its file; `writing=True` while
  the server still serves passes over the temp files of writes in flight.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

from sqlalchemy import select

from server.db import tables as t
from server.db.engine import Database
from server.touches import conflicts
from tests.support.agents import Tally

# What the agent's completion leaves a run in; `expired` and `released` are the ends without a result.
FINISHED_BY_AGENT = ("done", "under_review", "failed")
RUN_ENDS = ("run.lease_expired", "run.released", "run.cancelled", *(f"run.{s}" for s in FINISHED_BY_AGENT))

Row = dict[str, Any]


@dataclass(frozen=True)
class Books:
    tasks: dict[str, Row]
    runs: dict[str, Row]
    artifacts: dict[str, Row]
    evidence: dict[str, Row]  # by run_id
    reviews: dict[str, Row]  # by evidence_pack_id
    audit: list[Row]  # in id order

    @classmethod
    async def read(cls, database_url: str) -> Books:
        db = Database(database_url)
        try:
            async with db.read() as conn:

                async def rows(query: Any) -> list[Row]:
                    return [dict(row) for row in (await conn.execute(query)).mappings().all()]

                tasks = await rows(select(t.tasks))
                runs = await rows(select(t.runs))
                artifacts = await rows(select(t.artifacts))
                evidence = await rows(select(t.evidence_packs))
                reviews = await rows(select(t.review_decisions))
                audit = await rows(select(t.audit_log).order_by(t.audit_log.c.id))
        finally:
            await db.dispose()
        return cls(
            tasks={row["id"]: row for row in tasks},
            runs={row["id"]: row for row in runs},
            artifacts={row["id"]: row for row in artifacts},
            evidence={row["run_id"]: row for row in evidence},
            reviews={row["evidence_pack_id"]: row for row in reviews},
            audit=audit,
        )

    # --- views ---------------------------------------------------------------------------------

    def runs_of(self, task_id: str) -> list[Row]:
        return sorted((r for r in self.runs.values() if r["task_id"] == task_id), key=lambda r: r["started_at"])

    def statuses(self) -> dict[str, int]:
        """Tasks by status."""
        counts: dict[str, int] = defaultdict(int)
        for task in self.tasks.values():
            counts[task["status"]] += 1
        return dict(counts)

    def run_statuses(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for run in self.runs.values():
            counts[run["status"]] += 1
        return dict(counts)

    def completing_run(self, task_id: str) -> str | None:
        result = self.tasks[task_id]["result"]
        return result.get("run_id") if isinstance(result, dict) else None

    def claims(self) -> list[Row]:
        return [row for row in self.audit if row["action"] == "task.claimed"]

    # --- the rules -----------------------------------------------------------------------------

    def double_claims(self) -> list[str]:
        problems = []
        ended: dict[str, int] = {}  # run_id -> audit id of its end
        for row in self.audit:
            if row["entity_kind"] == "Run" and row["action"] in RUN_ENDS:
                ended.setdefault(row["entity_id"], row["id"])
        previous: dict[str, str] = {}  # task_id -> run claimed last
        for row in self.claims():
            task_id, run_id = row["entity_id"], row["after"]["run_id"]
            before = previous.get(task_id)
            if before is not None and not ended.get(before, row["id"]) < row["id"]:
                problems.append(f"task {task_id}: run {run_id} claimed (audit {row['id']}) before run {before} ended")
            previous[task_id] = run_id
        for task_id in self.tasks:
            finished = [r["id"] for r in self.runs_of(task_id) if r["status"] in FINISHED_BY_AGENT]
            if len(finished) > 1:
                problems.append(f"task {task_id}: {len(finished)} runs finished by their agents: {finished}")
        return problems

    def lost_tasks(self) -> list[str]:
        problems = []
        for task_id, task in self.tasks.items():
            runs = self.runs_of(task_id)
            done = [r["id"] for r in runs if r["status"] == "done"]
            states = [(r["status"], r["attempt"]) for r in runs]
            completing = self.completing_run(task_id)
            pack = self.evidence.get(completing) if completing is not None else None
            review = self.reviews.get(pack["id"]) if pack is not None else None
            approved = review is not None and review["decision"] == "approved"
            if task["status"] != "completed" or done != [completing] or not approved:
                problems.append(f"task {task_id}: {task['status']}, runs {states}, approved: {approved}")
        return problems

    def unaccounted_claims(self) -> list[str]:
        problems = []
        claimed: dict[str, int] = defaultdict(int)
        for row in self.claims():
            run_id = row["after"]["run_id"]
            claimed[run_id] += 1
            run = self.runs.get(run_id)
            if run is None:
                problems.append(f"audit {row['id']}: task.claimed names run {run_id}, which does not exist")
            elif run["task_id"] != row["entity_id"]:
                problems.append(f"audit {row['id']}: run {run_id} is not a run of task {row['entity_id']}")
            elif run["status"] not in ("expired", "released") and run_id != self.completing_run(run["task_id"]):
                problems.append(
                    f"run {run_id} of task {run['task_id']} ended {run['status']}, not expired, "
                    "released or completing its task"
                )
        for run_id in self.runs:
            if claimed[run_id] != 1:
                problems.append(f"run {run_id} has {claimed[run_id]} task.claimed rows")
        return problems

    def holds(self) -> list[tuple[str, int, float]]:
        """Each run of a task with touches as (task_id, its task.claimed row, its end row or infinity): while
        it runs, its task holds its touches (in a repository JCT does not integrate, until the run ends)."""
        ended: dict[str, int] = {}
        for row in self.audit:
            if row["entity_kind"] == "Run" and row["action"] in RUN_ENDS:
                ended.setdefault(row["entity_id"], row["id"])
        return [
            (row["entity_id"], row["id"], ended.get(row["after"]["run_id"], math.inf))
            for row in self.claims()
            if self.tasks[row["entity_id"]]["touches"]
        ]

    def overlapping_holds(self) -> list[str]:
        """No two tasks of one repository whose touches overlap held them at once. Audit ids order a hold's
        start after the end it waited for (the claim read that end committed), so two holds of overlapping
        touches must not interleave."""
        problems = []
        for (a, start_a, end_a), (b, start_b, end_b) in itertools.combinations(self.holds(), 2):
            task_a, task_b = self.tasks[a], self.tasks[b]
            if a == b or task_a["target_repo"] != task_b["target_repo"]:
                continue
            pairs = conflicts(task_a["touches"], task_b["touches"])
            if pairs and start_a < end_b and start_b < end_a:
                problems.append(
                    f"tasks {a} and {b} held {pairs} at once (audit {start_a}..{end_a}, {start_b}..{end_b})"
                )
        return problems

    def attempts_differ(self) -> list[str]:
        problems = []
        for task_id, task in self.tasks.items():
            expired = sum(1 for r in self.runs_of(task_id) if r["status"] == "expired")
            if task["attempts"] != expired:
                problems.append(f"task {task_id}: attempts {task['attempts']}, {expired} expired runs")
        return problems

    def missing(self, tally: Tally) -> list[str]:
        problems = []
        for run_id, task_id in tally.claims.items():
            run = self.runs.get(run_id)
            if run is None or run["task_id"] != task_id:
                problems.append(f"claim of task {task_id} as run {run_id} was acknowledged, but is not recorded")
        for artifact_id, run_id in tally.artifacts.items():
            artifact = self.artifacts.get(artifact_id)
            if artifact is None or artifact["run_id"] != run_id:
                problems.append(f"artifact {artifact_id} of run {run_id} was acknowledged, but is not recorded")
        for run_id, task_id in tally.completions.items():
            run = self.runs.get(run_id)
            if run is None or run["status"] != "done" or self.completing_run(task_id) != run_id:
                status = None if run is None else run["status"]
                problems.append(f"completion of task {task_id} by run {run_id} was acknowledged; the run is {status}")
        return problems

    def problems(self, tally: Tally) -> dict[str, list[str]]:
        """What every check found, by check (empty when the books balance): double claims, lost tasks,
        unaccounted claims, attempts that differ from expired runs, acknowledged writes not recorded."""
        found = {
            "double claims": self.double_claims(),
            "lost tasks": self.lost_tasks(),
            "unaccounted claims": self.unaccounted_claims(),
            "attempts differ": self.attempts_differ(),
            "missing": self.missing(tally),
        }
        return {check: problems for check, problems in found.items() if problems}

    def store_differs(self, trace_root: Path, *, writing: bool = False) -> list[str]:
        """Files in the trace store that are not an artifact's whole content, and stored artifacts without one.
        `writing`: the server is still serving, so a temp file of a write in flight (a report's staged content,
        a completion's manifest) is passed over; once it has stopped, every temp file is a leftover."""
        stored: dict[Path, dict[str, Any]] = {}
        for artifact in self.artifacts.values():
            if artifact["stored"]:
                stored[Path(url2pathname(urlparse(artifact["uri"]).path))] = artifact
        # A completed run's manifest (server/core/review/manifest.py) sits beside its artifacts, naming them.
        files = {
            path.resolve()
            for path in trace_root.rglob("*")
            if path.is_file() and path.name != "manifest.json" and not (writing and path.name.startswith(".tmp-"))
        }
        problems = [f"artifact {a['id']}: no file at {path}" for path, a in stored.items() if path not in files]
        for path in sorted(files):
            recorded = stored.get(path)
            if recorded is None:
                problems.append(f"{path}: a file no artifact records")
            elif hashlib.sha256(path.read_bytes()).hexdigest() != recorded["sha256"]:
                problems.append(f"{path}: not the whole content of artifact {recorded['id']}")
        return problems
