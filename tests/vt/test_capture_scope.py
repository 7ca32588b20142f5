"""GraphCaptureScope: nesting refused, inert when disabled, failures marked, exit never raises."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from backends.cpu import CpuBackend
from tests.helpers import guarding, k_add
from vt.capture import BreakableGraph, GraphCaptureScope
from vt.errors import CaptureUnjoined, CaptureUnsupported, NestedCaptureScope


class CountingBackend(CpuBackend):
    def __init__(self) -> None:
        super().__init__()
        self.capture_calls = 0

    def begin_capture(self, stream, mode=None):  # type: ignore[override]
        self.capture_calls += 1
        return super().begin_capture(stream, mode or __import__("vt.backend").backend.CaptureMode.GLOBAL)

    def end_capture(self, stream):  # type: ignore[override]
        self.capture_calls += 1
        return super().end_capture(stream)


def _xyz(b):
    x, out = b.empty((4,), np.float32), b.empty((4,), np.float32)
    b.copy_h2d(x, np.ones(4, np.float32))
    b.copy_h2d(out, np.zeros(4, np.float32))
    return x, out


def test_scope_captures_and_the_graph_replays() -> None:
    b = CountingBackend()
    x, out = _xyz(b)
    scope = GraphCaptureScope(b, b.new_stream(), enabled=True)
    with scope:
        b.launch(k_add, x, x, out)
    assert not scope.capture_failed and scope.graph is not None and b.capture_calls == 2
    assert not b.copy_d2h(out).any()
    scope.graph.replay(scope.stream)
    np.testing.assert_array_equal(b.copy_d2h(out), [2, 2, 2, 2])


def test_second_scope_on_the_same_thread_is_refused() -> None:
    b = CpuBackend()
    with GraphCaptureScope(b, b.new_stream(), enabled=True):
        with pytest.raises(NestedCaptureScope):
            GraphCaptureScope(b, b.new_stream(), enabled=True).__enter__()
    with GraphCaptureScope(b, b.new_stream(), enabled=True) as again:  # the first one closed cleanly
        pass
    assert again.graph is not None


def test_inert_scope_runs_eagerly_with_zero_capture_calls() -> None:
    b = CountingBackend()
    x, out = _xyz(b)
    scope = GraphCaptureScope(b, b.new_stream(), enabled=False)
    with scope:
        b.launch(k_add, x, x, out)
    assert scope.is_inert and scope.graph is None and b.capture_calls == 0
    np.testing.assert_array_equal(b.copy_d2h(out), [2, 2, 2, 2])


def test_failure_inside_is_marked_kept_and_exit_does_not_raise() -> None:
    b = CpuBackend()
    scope = GraphCaptureScope(b, b.new_stream(), enabled=True)
    with guarding("the scope's exit marks the failure inside it and raises nothing", CaptureUnsupported):
        with scope:
            b.alloc(128)  # refused in global mode
            raise AssertionError("not reached")
    assert scope.capture_failed and isinstance(scope.error, CaptureUnsupported)
    assert scope.graph is None and not b.is_capturing(scope.stream)


def test_failure_at_end_capture_is_marked() -> None:
    b = CpuBackend()
    x, _ = _xyz(b)
    scope = GraphCaptureScope(b, b.new_stream(), enabled=True)
    with scope:
        side = b.new_stream()
        b.wait_event(side, b.record_event(scope.stream))
        b.launch(k_add, x, x, x, stream=side)
    assert scope.capture_failed and isinstance(scope.error, CaptureUnjoined)


def test_breakable_graph_replays_segments_and_breaks_in_order() -> None:
    b = CpuBackend()
    x, out = _xyz(b)
    log: list[str] = []
    bg = BreakableGraph(b, b.new_stream())
    bg.capture([lambda: b.launch(k_add, x, x, out), lambda: log.append("break"), lambda: b.launch(k_add, out, x, out)])
    assert len(bg.segments) == len(bg.breaks) + 1 == 2
    np.testing.assert_array_equal(b.copy_d2h(out), [3, 3, 3, 3])
    bg.replay()
    np.testing.assert_array_equal(b.copy_d2h(out), [3, 3, 3, 3])
    assert log == ["break", "break"]


class _FreesOnCollect:
    """Dead cyclic garbage whose finalizer frees a device buffer, as an engine a test dropped does."""

    def __init__(self, backend, buf) -> None:
        self.backend, self.buf, self.me = backend, buf, self

    def __del__(self) -> None:
        self.backend.free(self.buf)


def test_no_garbage_collection_frees_device_memory_inside_a_capture() -> None:
    import gc

    b = CpuBackend()
    x, out = _xyz(b)
    gc.collect()
    before = gc.get_threshold()
    gc.set_threshold(1)  # a collection at the first allocation inside the capture, if the collector may run
    try:
        buf = b.alloc(64)
        scope = GraphCaptureScope(b, b.new_stream(), enabled=True)
        with scope:
            b.launch(k_add, x, x, out)
            _FreesOnCollect(b, buf)  # cyclic garbage at once, as anything another thread or an earlier test dropped
            junk = [[i] for i in range(100)]  # allocations: the collector's chance
        assert not scope.capture_failed, f"a collection ran a finalizer inside the capture: {scope.error}"
        assert gc.isenabled(), "the collector is back on after the capture"
        assert len(junk) == 100
        dropped = _FreesOnCollect(b, b.alloc(64))
        del dropped
        gc.collect()
        assert b.frees >= 2, "non-vacuity: outside a capture the garbage is collected and its buffers freed"
    finally:
        gc.set_threshold(*before)


def test_a_driver_free_inside_a_global_capture_invalidates_it() -> None:
    b = CpuBackend()
    x, out = _xyz(b)
    buf = b.alloc(64)
    scope = GraphCaptureScope(b, b.new_stream(), enabled=True)
    with contextlib.suppress(CaptureUnsupported), scope:  # marked by the scope (whether its exit raises: not here)
        b.launch(k_add, x, x, out)
        b.free(buf)
    assert scope.capture_failed and isinstance(scope.error, CaptureUnsupported), (
        f"cudaFree is an unsafe call: cudaErrorStreamCaptureUnsupported expected, got {scope.error!r}")
