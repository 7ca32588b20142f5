"""Which lane this process is: the predicate mirrors the pool's own reading of VT_POOL_BYPASS."""

from __future__ import annotations

from vt.env import flags


def is_bypass_lane() -> bool:
    """True when DevicePool() built with default flags is in the bypass lane (same source: vt.env)."""
    return flags().pool_bypass


BYPASS_REASON = "bypass-lane: pool has no free list"
