"""The error codes every JCT surface speaks, and the one exception that carries them."""

from __future__ import annotations

from enum import IntEnum, StrEnum
from typing import Any


class ErrorCode(StrEnum):
    TASK_NOT_FOUND = "TASK_NOT_FOUND"
    RUN_NOT_FOUND = "RUN_NOT_FOUND"
    EVIDENCE_PACK_NOT_FOUND = "EVIDENCE_PACK_NOT_FOUND"
    ARTIFACT_NOT_FOUND = "ARTIFACT_NOT_FOUND"
    TASK_ALREADY_CLAIMED = "TASK_ALREADY_CLAIMED"
    TASK_NOT_CLAIMED = "TASK_NOT_CLAIMED"
    NOT_CLAIMANT = "NOT_CLAIMANT"
    LEASE_EXPIRED = "LEASE_EXPIRED"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    REPO_NOT_ALLOWED = "REPO_NOT_ALLOWED"
    BUDGET_OUT_OF_RANGE = "BUDGET_OUT_OF_RANGE"
    IDEMPOTENCY_CONFLICT = "IDEMPOTENCY_CONFLICT"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    REVIEW_NOT_ALLOWED = "REVIEW_NOT_ALLOWED"
    ALREADY_REVIEWED = "ALREADY_REVIEWED"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    MISSION_NOT_FOUND = "MISSION_NOT_FOUND"
    # jct_start_workflow named no workflow JCT knows (a shipped one, or a file in JCT_WORKFLOWS_DIR that loaded).
    WORKFLOW_NOT_FOUND = "WORKFLOW_NOT_FOUND"
    DOCTRINE_NOT_FOUND = "DOCTRINE_NOT_FOUND"
    # Claimed by id while it still waits for its dependencies (or its phase): the message names them.
    TASK_BLOCKED = "TASK_BLOCKED"
    # Claimed while its mission's budget (max_cost_usd, max_tokens) is spent: the message names the budget.
    MISSION_BUDGET_SPENT = "MISSION_BUDGET_SPENT"
    # Claimed by id while its touches overlap those of a task that holds its own (running, or its work waiting
    # for review or to be merged): the message names that task and the paths.
    TASK_CONFLICTS = "TASK_CONFLICTS"
    # Verified changes (JCT reads the task's repository): the reported commit is not there, it does not
    # descend from the run's base commit, or the repository cannot be read right now.
    COMMIT_NOT_FOUND = "COMMIT_NOT_FOUND"
    NOT_A_DESCENDANT = "NOT_A_DESCENDANT"
    REPO_NOT_AVAILABLE = "REPO_NOT_AVAILABLE"
    # The world failed (database unreachable, a lock timeout, disk full), not JCT or its caller: retry later.
    UNAVAILABLE = "UNAVAILABLE"
    INTERNAL_ERROR = "INTERNAL_ERROR"


# The codes that say "no such record": a page or resource answers them as not found. (COMMIT_NOT_FOUND is
# about what an agent reported, not about the page asked for.)
NOT_FOUND: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.TASK_NOT_FOUND,
        ErrorCode.RUN_NOT_FOUND,
        ErrorCode.EVIDENCE_PACK_NOT_FOUND,
        ErrorCode.ARTIFACT_NOT_FOUND,
        ErrorCode.MISSION_NOT_FOUND,
        ErrorCode.WORKFLOW_NOT_FOUND,
        ErrorCode.DOCTRINE_NOT_FOUND,
    }
)


class RpcCode(IntEnum):
    """JSON-RPC error codes JCT answers with outside a tool result: its front door's refusals, and resources
    and prompts that cannot be read while the world fails. In the band MCP leaves to implementations
    (-32000..-32019), past -32000 and -32001, which the SDKs use for a closed connection and a timeout."""

    AUTHENTICATION_REQUIRED = -32010  # HTTP 401: no token, or one that is not valid
    FORBIDDEN = -32011  # HTTP 403: a token whose roles allow nothing here
    RATE_LIMITED = -32012  # HTTP 429: data.retry_after_seconds
    UNAVAILABLE = -32013  # HTTP 503, and a resource or prompt read while the database or disk fails


class JctError(Exception):
    """A failure the caller can act on: a code, what was wrong, and what to do next."""

    def __init__(
        self, code: ErrorCode, message: str, suggestion: str = "", *, retry_after_seconds: int | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.suggestion = suggestion
        self.retry_after_seconds = retry_after_seconds

    def to_dict(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code.value, "message": self.message, "suggestion": self.suggestion}
        if self.retry_after_seconds is not None:
            error["retry_after_seconds"] = self.retry_after_seconds
        return {"success": False, "error": error}


def invalid(message: str, suggestion: str = "Fix the argument and call again.") -> JctError:
    return JctError(ErrorCode.INVALID_ARGUMENT, message, suggestion)


def not_found(code: ErrorCode, what: str, record_id: str, suggestion: str) -> JctError:
    """`what` (Task, Run, ...) `record_id` is not there: one of the NOT_FOUND codes."""
    return JctError(code, f"{what} {record_id} does not exist.", suggestion)


def task_not_found(task_id: str, suggestion: str = "Use jct_list_tasks to find tasks.") -> JctError:
    return not_found(ErrorCode.TASK_NOT_FOUND, "Task", task_id, suggestion)
