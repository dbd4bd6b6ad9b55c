"""`@pytest.mark.dialects("postgresql")`: a scenario that only exists on some databases. Its cases for the
other dialects are deselected, not skipped: like every PostgreSQL case, it is simply not there when
JCT_TEST_POSTGRES_URL is unset (tests/conftest.py `DIALECTS`)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "dialects(*names): run only on these databases; deselect the other cases")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept, dropped = [], []
    for item in items:
        marker = item.get_closest_marker("dialects")
        callspec = getattr(item, "callspec", None)
        if marker is not None and callspec is not None and callspec.params.get("dialect") not in marker.args:
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
