"""DevicePool driven by a mock allocator, plus a state machine against a plain reference model."""

from __future__ import annotations

import threading

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.helpers import MockAllocator
from vt.errors import BadBufferError, PoolError
from vt.pool import DevicePool, size_class


def make_pool(**kw) -> tuple[DevicePool, MockAllocator]:
    a = MockAllocator()
    kw.setdefault("bypass", False)
    return DevicePool(a, **kw), a


# ---- size classes --------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 7, 15, 16, 17, 31, 33, 100, 1000, 4097, 123457, 10**9 + 7])
def test_size_class_rounds_up_with_at_most_one_sixteenth_waste(n: int) -> None:
    c = size_class(n)
    assert c >= n
    assert (c - n) * 16 <= n, f"{n} -> {c} wastes more than 6.25%"


def test_size_class_has_sixteen_rungs_per_octave() -> None:
    rungs = {size_class(n) for n in range(1025, 2049)}
    assert len(rungs) == 16, sorted(rungs)


def test_sizes_under_16_are_exact_and_exact_flag_keys_exact_sizes() -> None:
    assert [size_class(n) for n in range(1, 16)] == list(range(1, 16))
    assert size_class(1001, exact=True) == 1001 and size_class(1001) != 1001


# ---- hit, miss, borrow, loan ----------------------------------------------------------------


def test_get_after_put_is_a_lifo_hit_without_driver_alloc() -> None:
    pool, a = make_pool()
    b1, b2 = pool.get(1000), pool.get(1000)
    pool.put(b1)
    pool.put(b2)
    assert len(a.allocs) == 2
    assert pool.get(1000) is b2, "free list must be LIFO"
    assert len(a.allocs) == 2 and pool.stats()["hits"] == 1


def test_borrow_is_best_fit_within_one_octave() -> None:
    pool, a = make_pool()
    big, bigger = pool.get(1900), pool.get(4000)
    pool.put(big)
    pool.put(bigger)
    got = pool.get(1000)  # 1900's class is within 2x of 1000's; 4000's is not
    assert got is big and pool.stats()["borrows"] == 1 and len(a.allocs) == 2


def test_borrow_never_goes_beyond_twice_the_class() -> None:
    pool, a = make_pool()
    pool.put(pool.get(2100))
    pool.get(1000)
    assert pool.stats()["borrows"] == 0 and len(a.allocs) == 2


def test_borrow_disabled_by_flag() -> None:
    pool, a = make_pool(borrow=False)
    pool.put(pool.get(1900))
    pool.get(1000)
    assert pool.stats()["borrows"] == 0 and len(a.allocs) == 2


def test_put_returns_a_borrowed_block_to_its_own_class_and_decrements_the_requester() -> None:
    pool, _ = make_pool()
    big = pool.get(1900)
    pool.put(big)
    pool.mark_step_boundary()
    loan = pool.get(1000)
    assert loan is big
    assert pool.step_demand_profile() == {size_class(1000): 1}, "a loan counts at the requester's class"
    pool.put(loan)
    assert pool.get(1900) is big, "the loan went back to the class it was allocated at"
    pool.put(big)
    assert pool.stats()["blocks_in_use"] == 0


# ---- step profile, pregrow, drain -----------------------------------------------------------


def test_demand_profile_is_the_peak_above_the_boundary() -> None:
    pool, _ = make_pool()
    held = pool.get(64)  # live before the boundary: part of the base, not of the demand
    pool.mark_step_boundary()
    xs = [pool.get(64) for _ in range(3)]
    for x in xs:
        pool.put(x)
    y = pool.get(64)
    assert pool.step_demand_profile() == {64: 3}
    pool.put(y)
    pool.put(held)


def test_pregrow_makes_the_profiled_gets_hits_and_is_idempotent() -> None:
    pool, a = make_pool()
    pool.mark_step_boundary()
    blocks = [pool.get(n) for n in (100, 100, 5000)]
    for b in blocks:
        pool.put(b)
    demand = pool.step_demand_profile()
    freed = pool.drain()
    assert freed > 0 and not a.live
    grown = pool.pregrow_for_capture(demand)
    assert grown == 3
    assert pool.pregrow_for_capture(demand) == 0, "pregrow must be idempotent"
    before = len(a.allocs)
    again = [pool.get(n) for n in (100, 100, 5000)]
    assert len(a.allocs) == before, "after pregrow the profiled gets must all be hits"
    for b in again:
        pool.put(b)


def test_pregrow_refused_inside_a_capture() -> None:
    pool, a = make_pool()
    a.capturing = True
    with pytest.raises(PoolError, match="inside a capture"):
        pool.pregrow_for_capture({64: 1})


def test_drain_frees_only_free_blocks() -> None:
    pool, a = make_pool()
    live, spare = pool.get(256), pool.get(256)
    pool.put(spare)
    assert pool.drain() == 256
    assert live.buffer.id in a.live and spare.buffer.id not in a.live
    pool.put(live)


# ---- bypass lane ----------------------------------------------------------------------------


def test_bypass_lane_is_exact_alloc_and_free_with_nothing_retained() -> None:
    pool, a = make_pool(bypass=True)
    b = pool.get(1001)
    assert a.allocs == [1001], "bypass get is an exact driver alloc"
    pool.put(b)
    assert not a.live and len(a.freed) == 1, "bypass put is a driver free"
    assert pool.drain() == 0 and pool.pregrow_for_capture({1024: 4}) == 0 and a.allocs == [1001]


# ---- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, -1, 1 << 50, 3.5, "4"])
def test_bad_sizes_are_typed_errors_and_counts_stay_consistent(n) -> None:
    pool, a = make_pool()
    with pytest.raises(BadBufferError):
        pool.get(n)
    assert pool.stats()["blocks_in_use"] == 0 and a.allocs == []


def test_double_put_and_foreign_block_are_hard_errors() -> None:
    pool, _ = make_pool()
    other, _ = make_pool()
    b = pool.get(64)
    pool.put(b)
    with pytest.raises(PoolError, match="not live"):
        pool.put(b)
    with pytest.raises(PoolError, match="did not hand out"):
        other.put(pool.get(64))
    assert pool.stats()["blocks_in_use"] == 1


def test_one_pool_per_backend() -> None:
    pool, a = make_pool()
    with pytest.raises(PoolError, match="already has"):
        DevicePool(a)


def test_concurrent_get_put_loses_nothing() -> None:
    pool, a = make_pool()

    def worker() -> None:
        for i in range(300):
            b = pool.get(64 + (i % 5) * 100)
            pool.put(b)

    ts = [threading.Thread(target=worker) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    s = pool.stats()
    assert s["blocks_in_use"] == 0
    assert s["hits"] + s["misses"] + s["borrows"] == 1200 and s["misses"] == len(a.allocs)


# ---- the state machine ----------------------------------------------------------------------

SIZES = st.sampled_from([8, 16, 100, 120, 1000, 1024, 1900, 4000, 5000])


class PoolMachine(RuleBasedStateMachine):
    """The pool against a plain model: which blocks are live, and the per-class peak."""

    def __init__(self) -> None:
        super().__init__()
        self.pool, self.alloc = make_pool()
        self.live: list = []  # (block, requester class)
        self.model_live: dict[int, int] = {}
        self.model_base: dict[int, int] = {}
        self.model_peak: dict[int, int] = {}

    def _bump(self, c: int, d: int) -> None:
        self.model_live[c] = self.model_live.get(c, 0) + d
        over = self.model_live[c] - self.model_base.get(c, 0)
        self.model_peak[c] = max(self.model_peak.get(c, 0), over)

    @rule(n=SIZES)
    def get(self, n: int) -> None:
        b = self.pool.get(n)
        assert b.nbytes >= n
        self.live.append((b, size_class(n)))
        self._bump(size_class(n), +1)

    @precondition(lambda self: self.live)
    @rule(i=st.integers(min_value=0))
    def put(self, i: int) -> None:
        b, c = self.live.pop(i % len(self.live))
        home = b.home
        self.pool.put(b)
        assert home.free and home.free[-1] is b, "put returns a block to the class it was allocated at"
        self._bump(c, -1)

    @rule()
    def boundary(self) -> None:
        self.pool.mark_step_boundary()
        self.model_base = dict(self.model_live)
        self.model_peak = {}

    @rule()
    def pregrow_from_profile(self) -> None:
        demand = self.pool.step_demand_profile()
        self.pool.pregrow_for_capture(demand)
        assert self.pool.pregrow_for_capture(demand) == 0
        n0 = len(self.alloc.allocs)
        got = []
        for c, k in demand.items():
            got += [(self.pool.get(c), c) for _ in range(k)]
        assert len(self.alloc.allocs) == n0, "profiled gets after pregrow must be hits"
        for b, _ in got:
            self.pool.put(b)
        self.pool.mark_step_boundary()
        self.model_base = dict(self.model_live)
        self.model_peak = {}

    @rule()
    def drain(self) -> None:
        live_ids = {b.buffer.id for b, _ in self.live}
        self.pool.drain()
        assert live_ids <= set(self.alloc.live), "drain freed a live block"

    @invariant()
    def no_block_is_both_live_and_free(self) -> None:
        free = {id(b) for sc in self.pool._classes.values() for b in sc.free}
        live = {id(b) for b, _ in self.live}
        assert not free & live
        assert all(not b.is_live for sc in self.pool._classes.values() for b in sc.free)

    @invariant()
    def demand_profile_is_the_true_peak(self) -> None:
        want = {c: p for c, p in self.model_peak.items() if p > 0}
        assert self.pool.step_demand_profile() == want

    @invariant()
    def blocks_in_use_matches(self) -> None:
        assert self.pool.stats()["blocks_in_use"] == len(self.live)


PoolMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None,
                                          derandomize=True)  # the same runs every time: a stable gate
TestPoolMachine = PoolMachine.TestCase


def test_recordings_on_two_threads_stay_apart() -> None:
    """Two captures on two threads: each records (and later pins) exactly its own blocks."""
    pool, _ = make_pool()
    a_in, b_done = threading.Event(), threading.Event()
    got: dict[str, tuple] = {}

    def thread_a() -> None:
        with pool.recording() as used:
            a_in.set()
            b_done.wait()
            x = pool.get(64)
            got["a"] = (used, x)

    def thread_b() -> None:
        a_in.wait()
        with pool.recording() as used:
            y = pool.get(128)
        got["b"] = (used, y)
        b_done.set()

    ts = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    (used_a, x), (used_b, y) = got["a"], got["b"]
    assert used_a == {x} and used_b == {y}
