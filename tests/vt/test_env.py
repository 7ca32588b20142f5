"""Flags are read once per process."""

from __future__ import annotations

import pytest

from tests.helpers import MockAllocator
from vt.env import Flags, flags
from vt.pool import DevicePool


def test_flags_are_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    first = flags()
    monkeypatch.setenv("VT_POOL_BYPASS", "0" if first.pool_bypass else "1")
    assert flags() is first and flags().pool_bypass == first.pool_bypass


def test_pool_lane_does_not_change_when_the_environment_does(monkeypatch: pytest.MonkeyPatch) -> None:
    lane = flags().pool_bypass
    monkeypatch.setenv("VT_POOL_BYPASS", "0" if lane else "1")
    a = MockAllocator()
    pool = DevicePool(a)
    pool.put(pool.get(1000))
    assert bool(a.freed) == lane, "the pool must follow the flag as read at process start"


def test_bad_flag_value_names_the_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VT_CUDAGRAPH", "maybe")
    with pytest.raises(ValueError, match="VT_CUDAGRAPH"):
        Flags.from_environ()
