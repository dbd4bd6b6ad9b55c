"""The pages here show completed work waiting for a reviewer, as it did before automatic rework: a partial
verdict is not sent back to the queue in these tests (JCT_AUTO_REWORK off, unless a test sets it)."""

from tests.support.rework import manual_rework

__all__ = ["manual_rework"]  # the folder's make_settings fixture
