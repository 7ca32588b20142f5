"""The CPU backend's model of CuPy's allocations (backends/cupy_model.py): the arrays a kernel creates
are pool blocks for exactly their life, in the capture too, and never on replay; and a whole decode
step's pool traffic is the one an H200 recorded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from backends.cpu import CpuBackend
from seams.harness import SeamHarness
from seams.lanes import is_bypass_lane
from tests.helpers import guarding
from vt.errors import CaptureInvalidated, CaptureUnsupported

DATA = Path(__file__).parent / "data"
TRACES = sorted(DATA.glob("cupy-trace-*.json"))
pool_lane = pytest.mark.skipif(is_bypass_lane(), reason="bypass-lane: pool has no free list")


def _norm(xp, x, out) -> None:
    """Three temporaries and a CUB reduction, none of them in the launch's arguments."""
    out[...] = x / xp.sqrt(xp.mean(x * x, axis=-1, keepdims=True) + 1e-6)


def _setup():
    b = CpuBackend()
    x, out = b.empty((8, 64), np.float32), b.empty((8, 64), np.float32)
    b.copy_h2d(x, np.random.default_rng(0).standard_normal((8, 64), dtype=np.float32))
    return b, x, out, b.new_stream()


def test_a_kernels_arrays_are_pool_blocks_for_exactly_their_life() -> None:
    b, x, out, s = _setup()
    before = b.pool.stats()["blocks_in_use"]
    b.pool.mark_step_boundary()
    b.launch(_norm, x, out, stream=s)
    assert b.attribution.bytes.get("_norm", 0) >= 8 * 64 * 4, "non-vacuity: x * x alone is a whole [8, 64] array"
    assert sum(b.pool.step_demand_profile().values()) >= 2, "the temporaries were live together"
    assert b.pool.stats()["blocks_in_use"] == before, "every block went back when its array died"


@pool_lane
def test_a_capture_charges_temporaries_so_a_missing_pregrow_is_caught_on_the_cpu() -> None:
    """The kernel's outputs exist before the capture, so only its own temporaries can allocate. CuPy
    allocates them while it records; so does the CPU backend (on stand-ins: nothing executes)."""
    b, x, out, s = _setup()
    b.pool.mark_step_boundary()
    b.launch(_norm, x, out, stream=s)
    demand = b.pool.step_demand_profile()
    assert b.attribution.bytes["_norm"] >= 8 * 64 * 4, "non-vacuity: x * x is in the profile"
    b.copy_h2d(out, np.full((8, 64), 7.0, np.float32))
    assert b.pool.drain() > 0, "precondition: the drain emptied the free lists"
    b.reset_counters()
    b.begin_capture(s)
    with pytest.raises(CaptureUnsupported, match="operation not permitted when stream is capturing"):
        b.launch(_norm, x, out, stream=s)
    with pytest.raises(CaptureInvalidated):
        b.end_capture(s)
    assert b.allocs_in_capture == 1, "refused at the first temporary"

    assert b.pool.pregrow_for_capture(demand) > 0, "non-vacuity: the pre-grow had work to do"
    b.reset_counters()
    with guarding("after the pre-grow the capture allocates nothing", CaptureUnsupported):
        b.begin_capture(s)
        b.launch(_norm, x, out, stream=s)
        graph = b.end_capture(s)
    assert b.allocs_in_capture == 0
    assert (b.copy_d2h(out) == 7.0).all(), "nothing executed during the capture"
    graph.replay(s)
    assert not (b.copy_d2h(out) == 7.0).any(), "non-vacuity: the replay did execute"


@pool_lane  # a capture's temporaries need free blocks: on the bypass lane every get is a driver alloc
def test_replay_creates_nothing() -> None:
    b, x, out, s = _setup()
    b.launch(_norm, x, out, stream=s)
    eager = b.copy_d2h(out)
    charged = dict(b.attribution.bytes)
    assert charged.get("_norm", 0) >= 8 * 64 * 4, "non-vacuity: the eager launch charged x * x"
    with guarding("the capture draws its temporaries from the blocks the eager launch gave back", CaptureUnsupported):
        b.begin_capture(s)
        b.launch(_norm, x, out, stream=s)
        graph = b.end_capture(s)
    captured = dict(b.attribution.bytes)
    gets = b.pool.stats()["hits"] + b.pool.stats()["misses"]
    for _ in range(3):
        graph.replay(s)
    assert b.attribution.bytes == captured and b.pool.stats()["hits"] + b.pool.stats()["misses"] == gets
    np.testing.assert_array_equal(b.copy_d2h(out), eager)


def _row_max(xp, x, out) -> None:
    """One reduction along the last axis: its result array and CUB's temp storage, nothing else."""
    out[...] = x.max(axis=-1)


def test_a_reduction_draws_its_result_and_cubs_temp_storage_from_the_pool() -> None:
    """Since the model's kernels are fused (none allocates), only the CuPy model's own tests hold it to CuPy."""
    b = CpuBackend()
    x, out = b.empty((8, 64), np.float32), b.empty((8,), np.float32)
    b.copy_h2d(x, np.random.default_rng(1).standard_normal((8, 64), dtype=np.float32))
    before = b.pool.stats()["hits"] + b.pool.stats()["misses"]
    b.launch(_row_max, x, out, stream=b.new_stream())
    gets = b.pool.stats()["hits"] + b.pool.stats()["misses"] - before
    assert gets == 2, f"{gets} pool gets: the reduction's result and CUB's segmented-reduction scratch"
    assert np.allclose(b.copy_d2h(out), b.copy_d2h(x).max(axis=-1)), "non-vacuity: it ran"


def test_a_kernels_recorded_traffic_is_replayed_only_at_its_own_shapes() -> None:
    b = CpuBackend()
    s = b.new_stream()
    for rows in (8, 8, 32):  # the second launch replays the first's plan; the third has other shapes
        x, out = b.empty((rows, 64), np.float32), b.empty((rows, 64), np.float32)
        b.copy_h2d(x, np.ones((rows, 64), np.float32))
        b.attribution.bytes.clear()
        b.launch(_norm, x, out, stream=s)
        assert b.attribution.bytes.get("_norm", 0) >= rows * 64 * 4, f"{rows} rows: x * x alone is [{rows}, 64]"


def first_difference(a: list, b: list) -> str:
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"first difference at event {i} of {len(a)} / {len(b)}: {a[i:i + 3]} vs {b[i:i + 3]}"


@pool_lane
@pytest.mark.parametrize("trace", TRACES, ids=[p.stem for p in TRACES])
def test_the_cpu_step_makes_the_pool_traffic_an_h200_recorded(trace: Path) -> None:
    """Fixtures written by the GPU lane (test_demand_profile_parity_cpu_and_cuda_identical on an H200,
    CuPy 14.2): one cold decode step's pool traffic, event for event. A kernel change needs them
    re-recorded there."""
    want = json.loads(trace.read_text())
    model, shape = trace.stem.removeprefix("cupy-trace-").rsplit("-B", 1)
    batch, _, dtype = shape.partition("-")
    h = SeamHarness(model, "cpu", dtype=dtype or "float32")
    h.start(int(batch))
    got = h.traced_step()
    assert got == want["events"], "cpu vs h200: " + first_difference(got, want["events"])
    assert {str(k): v for k, v in sorted(h.driver.last_slot.demand.items())} == want["demand"]  # type: ignore[union-attr]


def test_the_h200_traces_are_here() -> None:
    assert len(TRACES) == 12, f"GPU-lane fixtures missing from {DATA}"
