"""The error codes every JCT surface speaks, and the one exception that carries them."""

from __future__ import annotations

from enum import StrEnum
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
    INTERNAL_ERROR = "INTERNAL_ERROR"


class JctError(Exception):
    """A failure the caller can act on: a code, what was wrong, and what to do next."""

    def __init__(self, code: ErrorCode, message: str, suggestion: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.suggestion = suggestion

    def to_dict(self) -> dict[str, Any]:
        return {
            "success": False,
            "error": {"code": self.code.value, "message": self.message, "suggestion": self.suggestion},
        }


def invalid(message: str, suggestion: str = "Fix the argument and call again.") -> JctError:
    return JctError(ErrorCode.INVALID_ARGUMENT, message, suggestion)
