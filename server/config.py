"""Settings, read once from JCT_* environment variables (and `.env`) at the entry point."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import unquote, urlsplit

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

TOOLSETS = ("worker", "plan", "observe", "review", "admin")
GIT_URL_SCHEMES = ("https", "http", "ssh", "git", "file")
VERDICTS = ("pass", "partial", "fail")


def _split_csv(value: Any) -> Any:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _only(what: str, known: tuple[str, ...]) -> Callable[[list[str]], list[str]]:
    """A validator refusing any value outside `known`."""

    def check(value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise ValueError(f"unknown {what} {unknown}; choose from {', '.join(known)}")
        return value

    return check


def is_git_url(location: str) -> bool:
    """`https://...`, `ssh://...`, `file:///...` or scp-like `git@host:path`; anything else is a local path."""
    return "://" in location or re.match(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:", location) is not None


def async_database_url(url: str) -> str:
    """Map the URL forms people paste (`sqlite:///x.db`, `postgres://...`) onto the async drivers."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"database URL {url!r} has no scheme; use sqlite:///path.db or postgresql://user@host/db")
    base = scheme.split("+", 1)[0].lower()
    if base == "sqlite":
        return f"sqlite+aiosqlite://{rest}"
    if base in ("postgresql", "postgres"):
        return f"postgresql+asyncpg://{rest}"
    raise ValueError(f"unsupported database {scheme!r}; JCT runs on sqlite or postgresql")


def trace_root_path(value: Any) -> Any:
    """JCT_TRACE_ROOT as a directory: a plain path, or a `file://` URL (`file:///var/lib/jct/runs`).

    Any other scheme is refused: the trace store writes to a local directory only, and a URL read as a
    relative path (`./file:/var/...`) would scatter the traces silently.
    """
    if isinstance(value, Path) or not isinstance(value, str):
        return value
    value = value.strip()
    if not value:
        return None
    if "://" not in value:
        return Path(value)
    parts = urlsplit(value)
    if parts.scheme.lower() != "file":
        raise ValueError(
            f"{value!r} is a {parts.scheme}:// URL; the trace store is a local directory: give a path "
            "(/var/lib/jct/runs) or a file:// URL (file:///var/lib/jct/runs)"
        )
    if parts.netloc not in ("", "localhost") or parts.query or parts.fragment or not parts.path:
        raise ValueError(
            f"{value!r} is not a local file:// URL; write it file:///absolute/path (three slashes, no host)"
        )
    return Path(unquote(parts.path))


def user_data_dir() -> Path:
    """The per-user data directory JCT uses without JCT_HOME, the same whatever the working directory.

    `$XDG_DATA_HOME/jct` (default `~/.local/share/jct`) on Linux and other Unixes, `~/Library/Application
    Support/jct` on macOS, `%LOCALAPPDATA%\\jct` on Windows: so `make run` and every `jct serve --stdio` a
    client starts in some project share one database.
    """
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "jct"
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA")
        return (Path(local) if local else Path.home() / "AppData" / "Local") / "jct"
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    return (Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share") / "jct"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="JCT_", env_file=".env", extra="ignore", populate_by_name=True)

    home: Path = Field(default_factory=user_data_dir)
    database_url: str = Field(default="", validation_alias=AliasChoices("JCT_DATABASE_URL", "DATABASE_URL"))
    trace_root: Path | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=1, le=65535)
    auth: Literal["none", "token"] = "none"
    agent_id: str = ""
    # The lease of a claim nobody renews but the agent's own calls (a stateless HTTP request's).
    lease_seconds: int = Field(default=900, ge=5, le=7 * 86400)
    # The lease of a claim made through a connection that shows it lives (a `jct serve --stdio` process, an
    # HTTP session with its event stream open): renewed by the server every third of it while the connection
    # lives and the run is within its time budget, so a dead agent's task is claimable again this long after
    # (plus a sweep). 0: off, every claim gets JCT_LEASE_SECONDS and lives by its agent's calls alone.
    live_lease_seconds: float = Field(default=45.0, ge=0, le=3600)
    # jct_list_stuck: a running task with no progress event for this long is listed.
    stuck_after_seconds: int = Field(default=600, ge=1, le=7 * 86400)
    sweep_interval_seconds: float = Field(default=5.0, gt=0, le=3600)
    notify_interval_seconds: float = Field(default=0.25, gt=0, le=60)
    max_attempts: int = Field(default=3, ge=1, le=100)
    allowed_repo_prefixes: Annotated[list[str], NoDecode] = Field(default_factory=list)
    review_auto_approve: bool = True
    review_auto_approve_verdicts: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["pass"])
    # A fail or partial verdict an agent can fix (prover.FIXABLE_CHECKS) sends the task back at once, as a
    # needs_changes round by the review policy (DESIGN section 17).
    auto_rework: bool = True
    max_artifact_bytes: int = Field(default=1024 * 1024, ge=1024, le=256 * 1024 * 1024)
    # All the content one run may store in the trace store, however many artifacts it reports.
    max_run_artifact_bytes: int = Field(default=32 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024 * 1024)
    toolsets: Annotated[list[str], NoDecode] = Field(default_factory=lambda: list(TOOLSETS))
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Where clients reach JCT (https://jct.example.com, e.g. a TLS proxy): named in the RFC 9728 metadata, the
    # 401 challenge and `jct token create`'s connect line. Without it, a Host JCT answers to by name.
    public_url: str = ""
    # With JCT_AUTH=token: HTTP requests per minute per principal (a token bucket; 429 beyond it).
    rate_limit_per_minute: int = Field(default=600, ge=1, le=1_000_000)
    # With JCT_AUTH=token: requests per minute from one client address that carry no valid token (429 beyond).
    unauthenticated_per_minute: int = Field(default=60, ge=1, le=1_000_000)
    # Failed dashboard logins per minute from one client address; past it, every login from there is 429.
    login_failures_per_minute: int = Field(default=10, ge=1, le=10_000)
    # `jct serve`: a connection that has not sent a request's complete headers this long after connecting (or
    # after its previous response) is closed (server/connections.py).
    header_timeout_seconds: float = Field(default=10.0, gt=0, le=3600)
    # `jct serve`: open HTTP connections at most (event streams included), kept below the open-file limit;
    # past it, the one that has waited longest for its headers is closed.
    max_connections: int = Field(default=1000, ge=1, le=1_000_000)
    # Tasks one principal may hold claimed at once.
    max_claims_per_agent: int = Field(default=5, ge=1, le=10_000)
    # The longest jct_claim_next may wait for work (its wait_seconds): below what clients wait for a tool call.
    claim_wait_max_seconds: float = Field(default=240.0, gt=0, le=3600)
    # Open sessions and event streams (legacy streamable HTTP sessions, SSE connections, listen streams):
    # past the cap for one principal its least recently used one is closed; past the cap for the process,
    # the least recently used idle one of anyone. A new one is never refused.
    max_sessions_per_principal: int = Field(default=100, ge=1, le=1_000_000)
    max_sessions: int = Field(default=10_000, ge=1, le=10_000_000)
    # A legacy streamable HTTP session with no request in flight (no open GET stream either) for this long
    # is closed; its client re-initializes on the 404 (Claude Code does). 0: never.
    session_idle_seconds: float = Field(default=1800.0, ge=0, le=30 * 86400)
    # resources/subscribe URIs one session may hold.
    max_subscriptions_per_session: int = Field(default=100, ge=1, le=100_000)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # One info line per tool call on the `jct.calls` logger (tool, principal, agent, task/run id, outcome,
    # duration), never an argument's text; false: none.
    log_tool_calls: bool = True
    # `json`: one JSON object per log line (for log shippers); `text`: one readable line.
    log_format: Literal["text", "json"] = "text"
    # Behind a load balancer: this replica's name, prefixed to its MCP session ids (`jct1.<hex>`) so the
    # balancer can send each legacy session back to the process that holds it (deploy/nginx.conf).
    replica: str = Field(default="", pattern=r"^([a-z][a-z0-9_-]{0,31})?$")
    # On SIGTERM: how long to wait for in-flight tool calls before their statements are cancelled and the
    # process exits (a few seconds later at most).
    shutdown_grace_seconds: float = Field(default=30.0, ge=0, le=3600)
    # How long a statement may wait for a lock (a row another transaction holds; on SQLite, another
    # process's write lock), and (PostgreSQL) run at all, before it fails with UNAVAILABLE, rolled back.
    lock_timeout_seconds: float = Field(default=10.0, gt=0, le=3600)
    statement_timeout_seconds: float = Field(default=60.0, gt=0, le=86400)
    # Workflow files (*.yaml) beside the ones JCT ships; default $JCT_HOME/workflows.
    workflows_dir: Path | None = None
    # Reviews that may ask a task for changes (a person's, an agent's or the automatic rework's): the last of
    # them fails it with quality_gate_exhausted (a workflow step's gate.max_rounds replaces it for that step).
    max_review_rounds: int = Field(default=3, ge=1, le=100)
    # Repositories JCT reads itself (DESIGN section 13): `prefix=location` pairs; a location is a local
    # directory of repositories or a git URL JCT fetches into $JCT_HOME/git. A task whose target_repo starts
    # with a prefix is verifiable.
    repos: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Every git command JCT runs (a fetch included) stops after this long.
    git_timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    # A fetched repository's cache may not grow past this.
    git_fetch_max_bytes: int = Field(default=2 * 1024**3, ge=1024 * 1024, le=1024**4)
    # Integration (DESIGN section 16). The JCT_REPOS prefixes JCT may write: approved work of their repositories is
    # merged into the target branch (a URL location is pushed to with the server account's credential).
    repos_writable: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # With JCT_AUTH=none, whether a local working tree is integrable too (`off`: read, never written).
    integrate_local: bool = True
    # How a run's commits reach the target branch: replayed one by one (`rebase`), a merge commit, or one commit.
    merge_strategy: Literal["rebase", "merge", "squash"] = "rebase"
    # A command run on the integrated commit before the target ref moves, per repository: a JSON object of
    # target_repo (or a prefix of it) to a shell command, e.g. {"myorg/api": "make test"}.
    check_commands: dict[str, str] = Field(default_factory=dict)
    check_timeout_seconds: float = Field(default=900.0, gt=0, le=86400)
    # The check command's output JCT keeps (its tail).
    check_output_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    # How long one process's hold on integrating a (repository, ref) lasts unless renewed (a third of it); a
    # process that dies mid-integration is taken over this long after.
    integrator_lease_seconds: float = Field(default=30.0, ge=1, le=3600)
    # Where runs' worktrees are made; default $JCT_HOME/worktrees.
    worktrees_dir: Path | None = None

    _csv = field_validator(
        "allowed_repo_prefixes",
        "review_auto_approve_verdicts",
        "toolsets",
        "allowed_hosts",
        "repos",
        "repos_writable",
        mode="before",
    )(_split_csv)

    @field_validator("repos")
    @classmethod
    def _repo_pairs(cls, value: list[str]) -> list[str]:
        for pair in value:
            prefix, sep, location = pair.partition("=")
            if not sep or not prefix.strip() or not location.strip():
                raise ValueError(
                    f"{pair!r} is not prefix=location, e.g. myorg/=/srv/git or myorg/=https://git.example.com/myorg"
                )
            if is_git_url(location.strip()):
                scheme = location.strip().split("://", 1)[0].lower() if "://" in location else "ssh"
                if scheme not in GIT_URL_SCHEMES:
                    raise ValueError(f"{location!r}: JCT fetches only {', '.join(GIT_URL_SCHEMES)} URLs")
            elif not Path(location.strip()).expanduser().is_absolute():
                raise ValueError(f"{location!r} is neither a git URL nor an absolute directory")
        return [f"{p.strip()}={loc.strip()}" for p, _, loc in (pair.partition("=") for pair in value)]

    @property
    def repo_locations(self) -> list[tuple[str, str]]:
        """JCT_REPOS as (prefix, location), the longest prefix first."""
        pairs = [tuple(pair.split("=", 1)) for pair in self.repos]
        return sorted(((p, loc) for p, loc in pairs), key=lambda item: -len(item[0]))

    _trace_root = field_validator("trace_root", mode="before")(trace_root_path)

    _known_toolsets = field_validator("toolsets")(_only("toolsets", TOOLSETS))
    _known_verdicts = field_validator("review_auto_approve_verdicts")(_only("verdicts", VERDICTS))

    @field_validator("public_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        value = value.strip()
        if not value:
            return ""
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value!r} is not an http:// or https:// URL naming a host, e.g. https://jct.example.com")
        if "?" in value or "#" in value:
            raise ValueError(f"{value!r} has a query or fragment; give the base URL only, e.g. https://jct.example.com")
        if parts.path not in ("", "/") or parts.username is not None:
            raise ValueError(
                f"{value!r} is not a base URL: give scheme, host and port only, e.g. https://jct.example.com"
            )
        _ = parts.port  # a port that is not a number raises ValueError here
        return f"{parts.scheme}://{parts.netloc}"

    @field_validator("live_lease_seconds")
    @classmethod
    def _live_lease(cls, value: float) -> float:
        if 0 < value < 1:
            raise ValueError(f"{value} is too short to renew in time; give 1 second or more, or 0 to turn it off")
        return value

    @model_validator(mode="after")
    def _run_cap_holds_one_artifact(self) -> Settings:
        if self.max_run_artifact_bytes < self.max_artifact_bytes:
            raise ValueError(
                f"JCT_MAX_RUN_ARTIFACT_BYTES ({self.max_run_artifact_bytes}) is below JCT_MAX_ARTIFACT_BYTES "
                f"({self.max_artifact_bytes}): a run could not store even one artifact of the largest size"
            )
        return self

    @model_validator(mode="after")
    def _derive_paths(self) -> Settings:
        if not self.database_url:
            self.database_url = f"sqlite:///{self.home / 'jct.db'}"
        self.database_url = async_database_url(self.database_url)
        if self.trace_root is None:
            self.trace_root = self.home / "traces"
        if self.workflows_dir is None:
            self.workflows_dir = self.home / "workflows"
        if self.worktrees_dir is None:
            self.worktrees_dir = self.home / "worktrees"
        unknown = [p for p in self.repos_writable if p not in {prefix for prefix, _ in self.repo_locations}]
        if unknown:
            raise ValueError(f"JCT_REPOS_WRITABLE names {unknown!r}, which JCT_REPOS does not: name its prefixes")
        return self

    @property
    def worktrees(self) -> Path:
        assert self.worktrees_dir is not None  # set by _derive_paths
        return self.worktrees_dir

    @property
    def traces(self) -> Path:
        assert self.trace_root is not None  # set by _derive_paths
        return self.trace_root

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    def effective(self) -> dict[str, str]:
        """The values in force, for `jct config`, with secrets masked."""
        shown: dict[str, str] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if name == "database_url":
                value = _mask_password(value)
            if isinstance(value, list):
                value = ",".join(value)
            shown[f"JCT_{name.upper()}"] = str(value)
        return shown


def _mask_password(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not at or ":" not in creds:
        return url
    user = creds.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}"
