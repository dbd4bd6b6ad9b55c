"""Who acts, the ids, and the limits and parsing of what clients send (the closed enums: server/vocab.py)."""

from __future__ import annotations

import getpass
import hashlib
import os
import re
import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Literal, TypeVar

from server.core.text import has_control
from server.errors import invalid

# The one principal, and base agent name, of everything local: stdio, HTTP without tokens, the dashboard.
LOCAL = "local"


def local_user() -> str:
    """The login name of the person running this process (the CLI's actor, stdio's agent base)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return os.environ.get("USER", LOCAL)


ActorKind = Literal["agent", "human", "system"]
E = TypeVar("E", bound=StrEnum)


@dataclass(frozen=True)
class Actor:
    """Who is calling.

    `actor_id` is the agent: it claims, and it is named in the audit log. `principal` is who authenticated
    (a token's name; `local` without tokens): a call that names its run acts on it only if the principal
    that claimed it is the caller's. `session` is the connection the call came through, None for a
    stateless request; with no run named, a call acts on the run this agent claimed through this
    connection; a caller without a session must name its run.
    `name` and `client` are for display; `client` is self-reported. `authenticated`: a bearer token proved
    the principal; a claim by a caller nothing authenticates gets a claim key (server/core/claims/leases.py).
    """

    actor_id: str
    actor_kind: ActorKind = "agent"
    name: str = ""
    client: str = ""
    admin: bool = False
    principal: str = ""
    session: str | None = None
    authenticated: bool = False

    @property
    def claimant(self) -> str:
        """The principal runs are bound to (the agent itself when nothing else is given)."""
        return self.principal or self.actor_id

    def executor(self) -> dict[str, str]:
        return {"actor_id": self.actor_id, "actor_kind": self.actor_kind, "name": self.name, "client": self.client}


SYSTEM = Actor(actor_id="jct", actor_kind="system", name="jct")


class Limits:
    """The maximum size of every text a client can send (documented in docs/tools.md, "Input limits")."""

    OBJECTIVE = 4_000
    SUMMARY = 20_000
    CRITERION = 1_000
    CRITERIA = 50
    REPO = 512
    REF = 256
    PATH = 1_024
    TITLE = 200
    IDEMPOTENCY_KEY = 256
    MEDIA_TYPE = 128
    URI = 2_048
    MESSAGE = 4_000
    REASON = 4_000
    NAME = 128
    OUTPUTS = 64_000
    LIST = 100
    CURSOR = 512
    EVIDENCE = 50
    DEPENDENCIES = 50
    PHASES = 20
    MISSION_TASKS = 500
    DOCTRINE_BODY = 20_000
    DOCTRINE_REF = 257  # namespace/name, 128 each
    DOCTRINES = 20  # named at one enqueue
    PRIOR_ART = 50
    TOUCHES = 50  # path globs a task declares it edits
    PRIOR_ART_ITEM = 1_000
    DATA_CHARS = 16_000
    MIN_BUDGET = 30
    MAX_BUDGET = 86_400


def check_text(value: object, field: str, limit: int, *, required: bool = True, single_line: bool = False) -> str:
    """Reject control characters and oversized text with a message that names the field and the limit."""
    if not isinstance(value, str):
        raise invalid(f"{field} must be a string, not {_type_name(value)}.", f"Send {field} as text.")
    if required and not value.strip():
        raise invalid(f"{field} must not be empty.", f"Give a non-empty {field}.")
    if len(value) > limit:
        raise invalid(f"{field} is {len(value)} characters; the limit is {limit}.", f"Shorten {field}.")
    if has_control(value) or (single_line and ("\n" in value or "\r" in value)):
        raise invalid(
            f"{field} contains control characters (or an unpaired UTF-16 surrogate).",
            f"Send {field} as plain printable text.",
        )
    return value


def parse_id(value: object, field: str) -> str:
    """Ids are canonical UUID strings; anything else is a caller mistake, not a lookup miss."""
    if not isinstance(value, str):
        raise invalid(
            f"{field} must be a UUID string, not {_type_name(value)}.", f"Pass the {field} exactly as JCT returned it."
        )
    try:
        canonical = str(uuid.UUID(value))
    except (ValueError, AttributeError, TypeError):
        raise invalid(
            f"{field} {value[:64]!r} is not a UUID.", f"Pass the {field} exactly as JCT returned it."
        ) from None
    return canonical


def parse_enum(enum: type[E], value: object, field: str) -> E:
    choices = ", ".join(member.value for member in enum)
    if not isinstance(value, str):
        raise invalid(f"{field} must be one of: {choices}, not {_type_name(value)}.", f"Use one of: {choices}.")
    try:
        return enum(value)
    except ValueError:
        raise invalid(f"{field} {value[:64]!r} is not one of: {choices}.", f"Use one of: {choices}.") from None


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def new_id() -> str:
    return str(uuid.uuid4())


# Between a run's id and its claim key in the run_id a claim returns without tokens (`<uuid>.<key>`).
KEY_SEPARATOR = "."


def new_claim_key() -> str:
    return secrets.token_hex(16)


def key_hash(key: str) -> str:
    """What the database keeps of a claim key: its SHA-256, so reading the database does not hand it out."""
    return hashlib.sha256(key.encode()).hexdigest()


def run_handle(run_id: str, key: str | None) -> str:
    """The run_id a claim returns: the run's id, and its claim key when there is one."""
    return run_id if key is None else f"{run_id}{KEY_SEPARATOR}{key}"


def parse_run_id(value: object, field: str = "run_id") -> tuple[str, str | None]:
    """A run_id as a claim returned it: the run's id (a UUID) and the claim key after it, if any."""
    if isinstance(value, str) and KEY_SEPARATOR in value:
        run_id, _, key = value.partition(KEY_SEPARATOR)
        if not _KEY.fullmatch(key):
            raise invalid(
                f"{field} does not end in a claim key (32 hex digits after the '{KEY_SEPARATOR}').",
                f"Pass the {field} exactly as JCT returned it.",
            )
        return parse_id(run_id, field), key
    return parse_id(value, field), None


_KEY = re.compile(r"[0-9a-f]{32}")


def parse_moment(value: str | None, field: str) -> datetime | None:
    """An ISO 8601 time a client sends (a filter's `since`), in UTC when it names no zone; None stays None."""
    if value is None:
        return None
    check_text(value, field, 64, single_line=True)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise invalid(
            f"{field} {value!r} is not an ISO 8601 time.", f"Write {field} like 2026-01-31T12:00:00Z."
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
