"""Which lane this process is: the predicate mirrors the pool's own reading of VT_POOL_BYPASS."""

from __future__ import annotations

from typing import Any

from vt.env import flags


def is_bypass_lane() -> bool:
    """True exactly when a DevicePool built with default flags is in the bypass lane: both read
    vt.env.flags().pool_bypass, once per process."""
    return flags().pool_bypass


BYPASS_REASON = "bypass-lane: pool has no free list"
GRAPHS_REASON = "bypass-lane: no decode graphs without a free list to pre-grow"


def guarantee(*values: Any, id: str, reason: str = BYPASS_REASON) -> Any:
    """A pytest case whose guarantee is false by design on the bypass lane: skipped there, with the
    reason in its test id, so a report shows why it did not run."""
    import pytest

    if is_bypass_lane():
        return pytest.param(*values, id=f"{id}[{reason}]", marks=pytest.mark.skip(reason=reason))
    return pytest.param(*values, id=id)
