"""Settings, read once from JCT_* environment variables (and `.env`) at the entry point."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

TOOLSETS = ("worker", "plan", "observe", "review", "admin")
VERDICTS = ("pass", "partial", "fail")


def _split_csv(value: Any) -> Any:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


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
    lease_seconds: int = Field(default=900, ge=5, le=7 * 86400)
    sweep_interval_seconds: float = Field(default=5.0, gt=0, le=3600)
    notify_interval_seconds: float = Field(default=0.25, gt=0, le=60)
    max_attempts: int = Field(default=3, ge=1, le=100)
    allowed_repo_prefixes: Annotated[list[str], NoDecode] = Field(default_factory=list)
    review_auto_approve: bool = True
    review_auto_approve_verdicts: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["pass"])
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
    # Tasks one principal may hold claimed at once.
    max_claims_per_agent: int = Field(default=5, ge=1, le=10_000)
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

    _csv = field_validator(
        "allowed_repo_prefixes", "review_auto_approve_verdicts", "toolsets", "allowed_hosts", mode="before"
    )(_split_csv)

    @field_validator("toolsets")
    @classmethod
    def _known_toolsets(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(TOOLSETS))
        if unknown:
            raise ValueError(f"unknown toolsets {unknown}; choose from {', '.join(TOOLSETS)}")
        return value

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

    @field_validator("review_auto_approve_verdicts")
    @classmethod
    def _known_verdicts(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(VERDICTS))
        if unknown:
            raise ValueError(f"unknown verdicts {unknown}; choose from {', '.join(VERDICTS)}")
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
        return self

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
