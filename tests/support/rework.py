"""A `make_settings` with automatic rework off (JCT_AUTO_REWORK), unless a test sets it: for tests of pages that
show completed work waiting for a reviewer, as it did before automatic rework (a partial verdict stays for a
person instead of going back to the queue). A conftest.py imports `manual_rework` to use it for its folder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from server.config import Settings


@pytest.fixture(name="make_settings")
def manual_rework(make_settings: Callable[..., Settings]) -> Callable[..., Settings]:
    def make(**overrides: Any) -> Settings:
        return make_settings(**({"auto_rework": False} | overrides))

    return make
