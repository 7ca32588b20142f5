"""The CPU backend's stream-order simulator (backends/streams.py): a missing wait is a race under every
schedule, reported with both submit stacks; a present one is never a race under any schedule hypothesis
finds; the adversarial schedule shows the wrong values a missing wait causes, deterministically.
Then the seed case behind BreakableGraph, and the engine's own streams under the simulator."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.cpu import CpuBackend
from backends.streams import from_choices, in_order, seeded, side_streams_late
from vt.capture import BreakableGraph
from vt.errors import StreamRace


def k_add(xp: Any, a: Any, b: Any, out: Any) -> None:
    xp.add(a, b, out=out)


def _filled(b: CpuBackend, values: np.ndarray) -> Any:
    """A tensor holding values, the copy waited for (an upload is async on its stream, as CuPy's set())."""
    t = b.empty(values.shape, np.float32)
    b.copy_h2d(t, values)
    b.synchronize()
    return t


@contextlib.contextmanager
def no_race() -> Iterator[None]:
    """The guarantee under test: no StreamRace; one raised is this test's failure, with both stacks."""
    try:
        yield
    except StreamRace as race:
        pytest.fail(f"a race where none may be: {race}")


def producer_then_consumer(b: CpuBackend, wait: bool, main: Any = None) -> tuple[Any, np.ndarray]:
    """main: x -> fork; side: y = x + x (the producer); main: out = y + y (the consumer), after a wait
    on the side stream's event or without one. Returns out and the right answer."""
    main, side = main or b.new_stream(), b.new_stream()
    xs = np.arange(8, dtype=np.float32)
    x, y, out = _filled(b, xs), _filled(b, np.zeros(8, np.float32)), _filled(b, np.zeros(8, np.float32))
    b.wait_event(side, b.record_event(main))
    b.launch(k_add, x, x, y, stream=side)  # the producer
    if wait:
        b.wait_event(main, b.record_event(side))
    b.launch(k_add, y, y, out, stream=main)  # the consumer
    return out, xs * 4


POLICIES = {"in order": lambda b: in_order, "side streams late": lambda b: side_streams_late(b.default_stream),  # no
            # test work runs on the default stream: every stream is held back as late as legal
            "seeded 0": lambda b: seeded(0), "seeded 1": lambda b: seeded(1)}


@pytest.mark.parametrize("policy", list(POLICIES))
def test_a_missing_wait_is_a_race_under_every_schedule_with_both_stacks(policy: str) -> None:
    b = CpuBackend()
    order = b.simulate_streams(POLICIES[policy](b))
    with pytest.raises(StreamRace) as race:
        producer_then_consumer(b, wait=False)
        b.synchronize()
    text = str(race.value)
    assert "no wait between" in text and text.count("producer_then_consumer") >= 2, (
        "the report carries both submit stacks")
    assert order.races, "and the simulator kept it"


@settings(max_examples=60, deadline=None)
@given(choices=st.lists(st.integers(0, 7), max_size=12))
def test_with_the_wait_no_schedule_races_and_every_schedule_is_right(choices: list[int]) -> None:
    b = CpuBackend()
    order = b.simulate_streams(from_choices(choices))
    with no_race():
        out, want = producer_then_consumer(b, wait=True)
        b.synchronize()
        got = b.copy_d2h(out)
    np.testing.assert_array_equal(got, want)
    assert order.num_executed >= 2, "non-vacuity: both kernels ran (and no StreamRace was raised)"


def test_the_adversary_shows_the_stale_value_a_missing_wait_reads() -> None:
    """Deterministic, not timing: with side work as late as legal, the consumer reads y before the producer
    wrote it, every time."""
    b = CpuBackend()
    main = b.new_stream()
    b.simulate_streams(side_streams_late(main))
    issued: tuple = ()
    with pytest.raises(StreamRace):  # at the synchronize that forces the producer under the consumer's read
        issued = producer_then_consumer(b, wait=False, main=main)
        b.synchronize()
    assert issued, "the race is met at the synchronize, after both launches were issued (the side work held back)"
    out, want = issued
    got = out.array().copy()
    assert np.array_equal(got, np.zeros(8, np.float32)) and not np.array_equal(got, want), "the stale read"


@pytest.mark.parametrize("writer", ["first side stream", "second side stream"])
def test_the_detector_sees_a_writer_on_any_stream(writer: str) -> None:
    b = CpuBackend()
    b.simulate_streams()
    main, s1, s2 = b.new_stream(), b.new_stream(), b.new_stream()
    t = _filled(b, np.ones(4, np.float32))
    other = _filled(b, np.ones(4, np.float32))
    w, r = (s1, s2) if writer == "first side stream" else (s2, s1)
    for s in (s1, s2):
        b.wait_event(s, b.record_event(main))
    b.launch(k_add, t, t, t, stream=w)
    with pytest.raises(StreamRace, match=f"Stream#{w.id} accessed"):
        b.launch(k_add, t, t, other, stream=r)


def test_a_host_read_of_an_unjoined_side_write_is_a_race() -> None:
    b = CpuBackend()
    b.simulate_streams()
    main, side = b.new_stream(), b.new_stream()
    t = _filled(b, np.ones(4, np.float32))
    b.wait_event(side, b.record_event(main))
    b.launch(k_add, t, t, t, stream=side)
    with b.use_stream(main), pytest.raises(StreamRace, match="a host read"):
        b.copy_d2h(t)  # synchronizes main only
    b.synchronize(side)
    np.testing.assert_array_equal(b.copy_d2h(t), [2, 2, 2, 2])  # after the join, the same read is clean


# ---- the seed case: a break's side work around the segments -------------------------------------
def _graph_with_side_break(b: CpuBackend, join: bool) -> tuple[BreakableGraph, Any, Any, Any]:
    s, side = b.new_stream(), b.new_stream()
    x, a, y, out = (_filled(b, np.full(8, i, np.float32)) for i in range(1, 5))  # a write must change bytes

    def brk() -> list:
        b.wait_event(side, b.record_event(s))
        b.launch(k_add, a, a, y, stream=side)
        return [b.record_event(side)] if join else []

    g = BreakableGraph(b, s)
    g.capture([lambda: b.launch(k_add, x, x, a), brk, lambda: b.launch(k_add, y, y, out)])
    return g, s, x, out


@pytest.mark.parametrize("policy", list(POLICIES))
def test_a_breaks_side_work_joined_in_the_legal_window_never_races(policy: str) -> None:
    b = CpuBackend()
    order = b.simulate_streams(POLICIES[policy](b))
    with no_race():
        g, s, x, out = _graph_with_side_break(b, join=True)
    for step in range(3):
        xs = np.full(8, step + 1, np.float32)
        with no_race():
            with b.use_stream(s):
                b.copy_h2d(x, xs)
            g.replay()
            b.synchronize()
            got = b.copy_d2h(out)
        np.testing.assert_array_equal(got, xs * 8)
    assert order.num_executed >= 9, "non-vacuity: three replays of three pieces ran (and nothing raced)"


@pytest.mark.parametrize("policy", list(POLICIES))
def test_a_breaks_side_work_left_unjoined_is_a_race_deterministically(policy: str) -> None:
    b = CpuBackend()
    b.simulate_streams(POLICIES[policy](b))
    with pytest.raises(StreamRace, match="no wait between"):
        _graph_with_side_break(b, join=False)
        b.synchronize()


# ---- BreakableGraph: replay order -----------------------------------------------------------------
def k_mark(xp: Any, trace: Any, cursor: Any, value: float) -> None:
    trace[int(cursor[0])] = value
    cursor[0] += 1


def test_breakable_graph_replays_segment_break_segment_in_that_order() -> None:
    """Each piece appends its own mark on the device: a replay that skips, repeats or swaps any piece
    writes another sequence (the old test passed with every segment skipped)."""
    b = CpuBackend()
    trace, cursor = b.empty((16,), np.float32), b.empty((1,), np.int64)
    g = BreakableGraph(b, b.new_stream())

    def mark(v: float):
        return lambda: b.launch(k_mark, trace, cursor, value=v)

    b.copy_h2d(cursor, np.zeros(1, np.int64))
    g.capture([mark(10), mark(100), mark(11), mark(101), mark(12)])
    assert len(g.segments) == len(g.breaks) + 1 == 3
    b.copy_h2d(cursor, np.zeros(1, np.int64))
    b.copy_h2d(trace, np.zeros(16, np.float32))
    g.replay()
    assert b.copy_d2h(cursor)[0] == 5, "non-vacuity: five pieces ran"
    assert b.copy_d2h(trace)[:5].tolist() == [10, 100, 11, 101, 12]
