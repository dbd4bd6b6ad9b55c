"""The jct:// resource URIs, in one table: the pages, the records each template names, and their parsing."""

from __future__ import annotations

import re
from functools import partial
from typing import Final

QUEUE: Final = "jct://queue"
PENDING_REVIEWS: Final = "jct://reviews/pending"
FIXED: Final = (QUEUE, PENDING_REVIEWS)

# Record kind (as the audit log names entities) -> the URI template of its page.
TEMPLATES: Final = {
    "Task": "jct://tasks/{task_id}",
    "Issue": "jct://issues/{issue_id}",
    "Run": "jct://runs/{run_id}",
    "EvidencePack": "jct://evidence/{evidence_pack_id}",
    "Artifact": "jct://artifacts/{artifact_id}",
    "Mission": "jct://missions/{mission_id}",
}
# A workflow definition, by name (DESIGN section 12): not a record, so not in TEMPLATES.
WORKFLOW: Final = "jct://workflows/{name}"
_WORKFLOW = re.compile(r"jct://workflows/[a-z][a-z0-9_-]{0,63}")
# What JCT read of a run's change in its repository (a verifiable task): a diff, not a record of its own.
RUN_DIFF: Final = "jct://runs/{run_id}/diff"
# Doctrine is named, not numbered: jct://doctrine/myorg/code-style.
DOCTRINE: Final = "jct://doctrine/{namespace}/{name}"
_PREFIX: Final = {kind: template.split("{", 1)[0] for kind, template in TEMPLATES.items()}
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_RECORD = re.compile(rf"jct://(tasks|issues|runs|evidence|artifacts|missions)/({_UUID})")
MAX_LENGTH: Final = 128


def of(kind: str, record_id: str) -> str:
    """The page of a record, by its kind as the audit log names it ("Task", "Run", ...)."""
    return f"{_PREFIX[kind]}{record_id}"


task = partial(of, "Task")
issue = partial(of, "Issue")
run = partial(of, "Run")
evidence = partial(of, "EvidencePack")
artifact = partial(of, "Artifact")
mission = partial(of, "Mission")


def run_diff(run_id: str) -> str:
    return f"{run(run_id)}/diff"


def workflow(name: str) -> str:
    return f"jct://workflows/{name}"


def doctrine(ref: str) -> str:
    """The page of a doctrine entry, by its `namespace/name`."""
    return f"jct://doctrine/{ref}"


def is_jct_uri(uri: str) -> bool:
    """Whether `uri` names a JCT page: one of the fixed ones, a record's (with a canonical UUID), a workflow's."""
    return len(uri) <= MAX_LENGTH and (
        uri in FIXED or _RECORD.fullmatch(uri) is not None or _WORKFLOW.fullmatch(uri) is not None
    )
