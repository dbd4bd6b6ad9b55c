"""The typed records db/ hands to core/ (server/db/records.py) against the tables they are read from: a column
added to a table without its record would be dropped silently on every read (pydantic ignores what it does not
declare), and a field no column fills would fail every read."""

from __future__ import annotations

import pytest
from pydantic import BaseModel
from sqlalchemy import Table

from server.db import tables as t
from server.db.claims import Claimed
from server.db.claims.request import TASK_COLUMNS
from server.db.records import CompletingTask, EvidencePack, Integration, Mission, Run, Task, Token

# Columns a record leaves out on purpose: a run's spending, summed in SQL only (server/db/outcomes.py), while
# the record carries the telemetry they are taken from.
SUMMED_IN_SQL = {"tokens", "cost_usd", "duration_seconds"}

WHOLE_ROWS: list[tuple[type[BaseModel], Table, set[str]]] = [
    (Task, t.tasks, set()),
    (Run, t.runs, SUMMED_IN_SQL),
    (EvidencePack, t.evidence_packs, set()),
    (Integration, t.integrations, set()),
    (Mission, t.missions, set()),
    (Token, t.tokens, set()),
]


def columns(table: Table) -> set[str]:
    return {column.name for column in table.columns}


@pytest.mark.parametrize(("record", "table", "left_out"), WHOLE_ROWS, ids=[r.__name__ for r, _, _ in WHOLE_ROWS])
def test_a_table_s_record_declares_every_column_it_reads(
    record: type[BaseModel], table: Table, left_out: set[str]
) -> None:
    assert set(record.model_fields) == columns(table) - left_out


def test_what_a_completion_reads_of_its_task_are_columns_of_tasks() -> None:
    assert set(CompletingTask.model_fields) <= columns(t.tasks)


def test_a_claim_s_record_is_the_task_columns_it_returns_and_the_run_and_briefing() -> None:
    task_fields = set(Claimed.model_fields) & columns(t.tasks)
    assert task_fields == set(TASK_COLUMNS)
    assert set(Claimed.model_fields) - task_fields == {"attempt", "lease_expires_at", "packet", "snapshot", "decisions"}
