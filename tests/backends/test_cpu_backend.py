"""The CPU backend: record/replay, counters, sanitizer, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from backends.cpu import CpuBackend
from seams.lanes import GRAPHS_REASON, guarantee
from tests.helpers import k_add, k_gemm, k_mul, k_tanh
from vt.backend import CaptureMode
from vt.errors import BadBufferError, CaptureUnsupported, GraphDestroyed, IllegalMemoryAccess


def _tensor(b: CpuBackend, values: np.ndarray):
    t = b.empty(values.shape, values.dtype)
    b.copy_h2d(t, values)
    return t


def _chain(b: CpuBackend, x, w, h, out, stream=None) -> None:
    b.launch(k_gemm, x, w, h, stream=stream)
    b.launch(k_tanh, h, h, stream=stream)
    b.launch(k_mul, h, h, out, stream=stream)
    b.launch(k_add, out, x, out, stream=stream)


def test_captured_chain_records_without_executing_and_replays_to_the_eager_numbers() -> None:
    b = CpuBackend()
    rng = np.random.default_rng(0)
    x = _tensor(b, rng.standard_normal((8, 8), dtype=np.float32))
    w = _tensor(b, rng.standard_normal((8, 8), dtype=np.float32))
    h, out = b.empty((8, 8), np.float32), b.empty((8, 8), np.float32)
    _chain(b, x, w, h, out)
    eager = b.copy_d2h(out)

    b.copy_h2d(out, np.zeros((8, 8), np.float32))
    s = b.new_stream()
    b.begin_capture(s)
    _chain(b, x, w, h, out, stream=s)
    graph = b.end_capture(s)
    assert not b.copy_d2h(out).any(), "nothing may execute during capture"
    assert graph.num_nodes == 4
    graph.replay(s)
    np.testing.assert_array_equal(b.copy_d2h(out), eager)


def test_replay_after_staging_new_inputs_gives_the_new_answer_and_unstaged_gives_stale() -> None:
    b = CpuBackend()
    x, y, out = (b.empty((4,), np.float32) for _ in range(3))
    b.copy_h2d(x, np.arange(4, dtype=np.float32))
    b.copy_h2d(y, np.ones(4, np.float32))
    s = b.new_stream()
    b.begin_capture(s)
    b.launch(k_add, x, y, out, stream=s)
    g = b.end_capture(s)
    g.replay(s)
    np.testing.assert_array_equal(b.copy_d2h(out), [1, 2, 3, 4])
    b.copy_h2d(x, np.full(4, 10, np.float32))  # staged into the persistent input
    g.replay(s)
    np.testing.assert_array_equal(b.copy_d2h(out), [11, 11, 11, 11])
    fresh = _tensor(b, np.zeros(4, np.float32))  # "staged" into a new buffer the graph never saw
    del fresh
    g.replay(s)
    np.testing.assert_array_equal(b.copy_d2h(out), [11, 11, 11, 11])


def test_async_h2d_in_capture_reads_the_host_array_at_replay_time() -> None:
    b = CpuBackend()
    host = np.zeros(4, np.float32)
    dst = b.empty((4,), np.float32)
    s = b.new_stream()
    b.begin_capture(s)
    b.copy_h2d_async(dst, host, stream=s)
    g = b.end_capture(s)
    host[:] = 7
    g.replay(s)
    np.testing.assert_array_equal(b.copy_d2h(dst), [7, 7, 7, 7])


def test_counters_count_driver_allocs_and_those_inside_a_capture() -> None:
    b = CpuBackend()
    b.reset_counters()
    t = b.empty((16,), np.float32)
    assert (b.allocs_in_step, b.allocs_in_capture) == (1, 0)
    s = b.new_stream()
    b.begin_capture(s, CaptureMode.RELAXED)
    b.alloc(64)
    b.alloc(64)
    b.end_capture(s)
    assert b.allocs_in_capture == 2 and b.allocs_in_step == 3
    b.free(t.buffer)
    assert b.frees_in_step == 1
    b.reset_counters()
    assert (b.allocs_in_step, b.frees_in_step, b.allocs_in_capture) == (0, 0, 0)


def test_global_capture_refuses_the_first_allocation_and_counts_it() -> None:
    b = CpuBackend()
    s = b.new_stream()
    b.reset_counters()
    b.begin_capture(s, CaptureMode.GLOBAL)
    with pytest.raises(CaptureUnsupported, match="operation not permitted when stream is capturing"):
        b.pool.get(4096)
    with pytest.raises(Exception, match="cudaErrorStreamCaptureInvalidated"):
        b.end_capture(s)
    assert b.allocs_in_capture == 1
    assert b.pool.stats()["blocks_in_use"] == 0, "a refused get leaves the pool's counts consistent"


# ---- sanitizer ------------------------------------------------------------------------------


def test_sanitizer_catches_use_after_free_with_both_stack_traces() -> None:
    b = CpuBackend(sanitize=True)
    x = _tensor(b, np.ones(4, np.float32))
    out = b.empty((4,), np.float32)
    b.free(x.buffer)
    assert np.isnan(x.array()).all(), "freed memory is poisoned"
    with pytest.raises(IllegalMemoryAccess) as ei:
        b.launch(k_add, x, x, out)
    msg = str(ei.value)
    assert "cudaErrorIllegalAddress" in msg and "'k_add'" in msg and f"Buffer#{x.buffer.id}" in msg
    assert "allocated at:" in msg and "_tensor" in msg  # the allocation's stack
    assert "freed at:" in msg and "test_sanitizer_catches_use_after_free" in msg.split("freed at:")[1]


def test_sanitizer_catches_an_out_of_range_write() -> None:
    b = CpuBackend(sanitize=True)
    small = b.empty((4,), np.float32)
    x = _tensor(b, np.ones(8, np.float32))
    overrun = small.view((8,))  # 32 bytes over a 16-byte buffer
    with pytest.raises(Exception) as ei:  # whatever escapes, the sanitizer must have named it first
        b.launch(k_add, x, x, overrun)
    assert isinstance(ei.value, IllegalMemoryAccess), f"the sanitizer let it through: {ei.value!r}"
    msg = str(ei.value)
    assert "out of range" in msg
    assert "allocated at:" in msg and "launched at:" in msg and "test_sanitizer_catches_an_out_of_range" in msg


def test_sanitizer_catches_use_after_free_on_replay() -> None:
    b = CpuBackend(sanitize=True)
    x, out = b.empty((4,), np.float32), b.empty((4,), np.float32)
    s = b.new_stream()
    b.begin_capture(s)
    b.launch(k_add, x, x, out, stream=s)
    g = b.end_capture(s)
    b.free(x.buffer)
    with pytest.raises(IllegalMemoryAccess, match="freed"):
        g.replay(s)


def test_without_sanitizer_a_use_after_free_is_silent() -> None:
    """Non-vacuity for the sanitizer tests: the bug really is invisible without it."""
    b = CpuBackend(sanitize=False)
    x, out = _tensor(b, np.ones(4, np.float32)), b.empty((4,), np.float32)
    b.free(x.buffer)
    b.launch(k_add, x, x, out)
    np.testing.assert_array_equal(b.copy_d2h(out), [2, 2, 2, 2])


# ---- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, -8, 1 << 41, 2.0, None])
def test_bad_alloc_sizes(n) -> None:
    b = CpuBackend()
    with pytest.raises(BadBufferError):
        b.alloc(n)
    assert b.allocs == 0


def test_double_free_and_foreign_free_are_typed_errors() -> None:
    b, other = CpuBackend(), CpuBackend()
    buf = b.alloc(64)
    b.free(buf)
    with pytest.raises(BadBufferError, match="double free"):
        b.free(buf)
    with pytest.raises(BadBufferError, match="another backend"):
        other.free(b.alloc(64))
    assert b.frees == 1 and other.frees == 0


def test_replaying_or_destroying_a_destroyed_graph_is_a_typed_error() -> None:
    b = CpuBackend()
    s = b.new_stream()
    b.begin_capture(s)
    g = b.end_capture(s)
    g.destroy()
    with pytest.raises(GraphDestroyed):
        g.replay(s)
    with pytest.raises(GraphDestroyed):
        g.destroy()


def test_graph_owned_async_allocation_is_freed_by_destroy_not_free() -> None:
    b = CpuBackend()
    s = b.new_stream()
    b.begin_capture(s)
    buf = b.alloc_async(256, s)
    g = b.end_capture(s)
    with pytest.raises(BadBufferError, match="belongs to a graph"):
        b.free(buf)
    g.destroy()
    assert buf.is_freed


def _chain_c_into_b(b: CpuBackend):
    """Capture on A; fork B from A and C from B; C does work and joins back into B."""
    x = b.empty((4,), np.float32)
    a_s, b_s, c_s = b.new_stream(), b.new_stream(), b.new_stream()
    b.begin_capture(a_s)
    b.wait_event(b_s, b.record_event(a_s))
    b.wait_event(c_s, b.record_event(b_s))
    b.launch(k_add, x, x, x, stream=c_s)
    b.wait_event(b_s, b.record_event(c_s))
    return a_s, b_s


def test_a_side_stream_joined_through_another_side_stream_is_joined() -> None:
    """A -> B -> C forked, C joined into B, B into A: legal on CUDA, so legal here."""
    b = CpuBackend()
    a_s, b_s = _chain_c_into_b(b)
    b.wait_event(a_s, b.record_event(b_s))
    assert b.end_capture(a_s).num_nodes == 1


def test_a_chain_that_stops_short_of_the_origin_is_unjoined() -> None:
    """Non-vacuity for the chain rule: C joined into B, but B never joined back into A."""
    from vt.errors import CaptureUnjoined

    b = CpuBackend()
    a_s, _ = _chain_c_into_b(b)
    with pytest.raises(CaptureUnjoined):
        b.end_capture(a_s)


# ---- the sanitizer on the pool lane: released blocks, other owners, a graph's temporaries ---------------


def _sanitized_pool_tensor():
    from vt.pool import DevicePool  # noqa: F401  (the backend builds its own)

    b = CpuBackend(sanitize=True)
    if b.pool.is_bypass:
        pytest.skip("bypass-lane: every release is a driver free, which the freed-buffer check covers")
    t = b.pool.empty((4,), np.float32)
    b.copy_h2d(t, np.ones(4, np.float32))
    return b, t


def test_sanitizer_names_a_kernel_reading_a_released_pool_block_with_both_stacks() -> None:
    b, t = _sanitized_pool_tensor()
    out = b.empty((4,), np.float32)
    b.pool.release(t)
    assert np.isnan(t.array()).all(), "a released block is poisoned"
    with pytest.raises(Exception) as ei:
        b.launch(k_add, t, t, out)
    assert isinstance(ei.value, IllegalMemoryAccess), f"the sanitizer let it through: {ei.value!r}"
    msg = str(ei.value)
    assert "a pool block released" in msg and "handed out at:" in msg and "_sanitized_pool_tensor" in msg
    assert "released at:" in msg and "test_sanitizer_names_a_kernel_reading_a_released" in msg.split("released at:")[1]


def test_sanitizer_names_a_stale_tensor_whose_block_another_owner_holds_now() -> None:
    b, t = _sanitized_pool_tensor()
    out = b.empty((4,), np.float32)
    b.pool.release(t)
    newer = b.pool.empty((4,), np.float32)  # the LIFO free list hands the same block to a new owner
    assert newer.buffer is t.buffer, "non-vacuity: the block really was handed out again"
    b.launch(k_add, newer, newer, out)  # the new owner is fine
    with pytest.raises(Exception) as ei:
        b.launch(k_add, t, t, out)
    assert isinstance(ei.value, IllegalMemoryAccess) and "handed to another owner" in str(ei.value), repr(ei.value)


@pytest.mark.parametrize("lane", [guarantee("pool", id="pool-lane", reason=GRAPHS_REASON)])
def test_sanitizer_refuses_a_replay_over_a_temporary_someone_still_holds(lane: str) -> None:
    """The aliasing rule: a tensor drawn from a graph's pinned temporary and kept would be overwritten by the
    graph's next replay; the sanitizer names it, with the holder's stack, before the replay runs."""
    from seams.harness import SeamHarness

    h = SeamHarness("tiny-qwen3", backend_obj=CpuBackend(sanitize=True))
    h.start(2)
    h.step()
    h.step()  # captured
    slot = h.driver.last_slot
    assert slot is not None and slot.is_captured
    h.step()  # non-vacuity: a replay with nothing held is fine
    sizes = sorted({blk.nbytes for blk in slot.pinned})
    kept = [h.pool.empty((n // 4,), np.float32) for n in sizes]  # long-lived tensors from the free lists
    assert any(t.block in slot.pinned for t in kept), "non-vacuity: one of them is a graph temporary"
    with pytest.raises(Exception) as ei:
        h.step()
    assert isinstance(ei.value, IllegalMemoryAccess), repr(ei.value)
    assert "replays over" in str(ei.value) and "test_sanitizer_refuses_a_replay" in str(ei.value)


def test_sanitizer_quarantines_a_released_block_behind_every_other_free_one() -> None:
    """A released block goes to the back of its class's free list: a stale pointer keeps reading poison for as
    long as the pool has any other block to hand out. Non-vacuity: without the sanitizer the list is LIFO."""
    for sanitize, expect_same in ((True, False), (False, True)):
        b = CpuBackend(sanitize=sanitize)
        if b.pool.is_bypass:
            pytest.skip("bypass-lane: every release is a driver free")
        first, second = b.pool.empty((4,), np.float32), b.pool.empty((4,), np.float32)
        b.pool.release(second)
        b.pool.release(first)  # released last
        again = b.pool.empty((4,), np.float32)
        assert (again.buffer is first.buffer) == expect_same, f"sanitize={sanitize}"
