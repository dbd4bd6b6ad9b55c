"""What starting any command needs and nothing more (`jct serve --stdio` loads only this before it answers):
settings, logging, and one-line failures."""

from __future__ import annotations

import logging
import sys
from typing import Any, NoReturn

from pydantic import ValidationError

from server.config import Settings


class StartupError(Exception):
    """Something the operator must fix before JCT can start; reported as one line, never a traceback."""


def fail(message: str, code: int = 1) -> NoReturn:
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    import typer

    raise typer.Exit(code)


def load_settings(**overrides: Any) -> Settings:
    """Settings from JCT_* (and .env); command-line overrides are validated the same way."""
    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        return Settings(**given)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        name = f"JCT_{field.upper()}" if field else "JCT_*"
        message = str(first["msg"]).removeprefix("Value error, ")
        fail(f"bad setting {name}: {message}", 2)


def configure_logging(settings: Settings) -> None:
    """Everything JCT and its libraries log goes to stderr: on stdio, stdout carries only the protocol.
    JCT_LOG_FORMAT=json writes one JSON object per line (time, level, logger, message, exc_info)."""
    handler = logging.StreamHandler(sys.stderr)
    if settings.log_format == "json":
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(
            JsonFormatter(
                "%(levelname)s %(name)s %(message)s",
                rename_fields={"levelname": "level", "name": "logger"},
                timestamp="time",
            )
        )
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=settings.log_level, handlers=[handler], force=True)
