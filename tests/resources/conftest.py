"""The pages here show completed work waiting for a reviewer, as it did before automatic rework: a partial
verdict is not sent back to the queue in these tests (JCT_AUTO_REWORK off, unless a test sets it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from server.config import Settings


@pytest.fixture
def make_settings(make_settings: Callable[..., Settings]) -> Callable[..., Settings]:
    def make(**overrides: Any) -> Settings:
        return make_settings(**({"auto_rework": False} | overrides))

    return make
