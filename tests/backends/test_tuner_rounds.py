"""The GEMM tuner's pick (backends/cublaslt.py `fastest`) on a host clock: candidates timed in rounds there and back,
so a drift of the GPU's clocks during tuning does not decide between near-equal candidates. Runs anywhere."""

from __future__ import annotations

from collections.abc import Callable

from backends.cublaslt import TIMED_PAIRS, fastest


def drifting_clock(true_us: list[float], drift_us: float) -> tuple[Callable[[int], float], list[int]]:
    """A timer whose every reading is the candidate's true time plus a drift that grows by drift_us a reading (a GPU
    warming, or boosting, while the tuner runs); it logs the order it was asked in."""
    asked: list[int] = []

    def time_once(i: int) -> float:
        asked.append(i)
        return true_us[i] + drift_us * len(asked)

    return time_once, asked


def test_a_clock_drift_during_tuning_does_not_reach_the_comparison() -> None:
    """Candidate 2 is truly fastest, by 0.2 us; the clock slows 0.1 us a reading. Each candidate's reps timed
    together, the first candidate would read fastest; timed in one order every round, each would carry its place in
    the round. There and back, every pair's mean carries the same drift: the times differ as the true ones do."""
    true_us = [5.0, 5.1, 4.8]
    time_once, asked = drifting_clock(true_us, 0.1)
    best, times = fastest([0, 1, 2], time_once)
    assert best == 2, f"the drift picked candidate {best}: times {times}"
    for i in (1, 2):
        seen, real = times[i] - times[0], true_us[i] - true_us[0]
        assert abs(seen - real) < 1e-9, f"the drift reached the comparison: {seen:+.3f} us where it is {real:+.3f}"
    assert len(asked) == 6 * TIMED_PAIRS and asked[:6] == [0, 1, 2, 2, 1, 0], "non-vacuity: there and back"


def test_the_pick_is_the_least_median_and_a_tie_keeps_the_heuristics_order() -> None:
    readings = {0: [9.0, 3.0, 9.0, 9.0, 9.0, 9.0], 1: [5.0] * 6, 2: [5.0] * 6}  # 0's one fast reading is not its time
    it = {i: iter(r) for i, r in readings.items()}
    best, times = fastest([0, 1, 2], lambda i: next(it[i]))
    assert times == [9.0, 5.0, 5.0] and best == 1, (best, times)
