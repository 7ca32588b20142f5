"""The GEMM tuner's pick (backends/cublaslt.py `fastest`) on a host clock: candidates timed in interleaved rounds, so a
drift of the GPU's clocks during tuning does not decide between near-equal candidates. Runs anywhere."""

from __future__ import annotations

from backends.cublaslt import TIMED_REPS, fastest


def drifting_clock(true_us: list[float], drift_us: float):
    """A timer whose every reading is the candidate's true time plus a drift that grows by drift_us a reading (a GPU
    warming, or boosting, while the tuner runs); it logs the order it was asked in."""
    asked: list[int] = []

    def time_once(i: int) -> float:
        asked.append(i)
        return true_us[i] + drift_us * len(asked)

    return time_once, asked


def test_a_clock_drift_during_tuning_does_not_pick_the_slower_candidate() -> None:
    """Candidate 1 is truly faster by 0.2 us; the clock slows 0.1 us a reading. Each candidate's rounds timed
    together, candidate 0 would read 0.3-0.5 us faster than candidate 1 (all its readings before any of 1's)."""
    true_us = [5.0, 4.8]
    time_once, asked = drifting_clock(true_us, 0.1)
    best, medians = fastest([0, 1], time_once)
    assert best == 1, f"the drift picked candidate {best}: medians {medians}"
    assert abs(medians[1] - medians[0] - (true_us[1] - true_us[0])) < 0.15, medians
    assert len(asked) == 2 * TIMED_REPS and asked[:4] == [0, 1, 0, 1], "non-vacuity: every round times each once"


def test_the_pick_is_the_least_median_and_a_tie_keeps_the_heuristics_order() -> None:
    readings = {0: [9.0, 3.0, 9.0, 9.0, 9.0], 1: [5.0] * 5, 2: [5.0] * 5}  # 0's one fast outlier is not its median
    it = {i: iter(r) for i, r in readings.items()}
    best, medians = fastest([0, 1, 2], lambda i: next(it[i]))
    assert medians == [9.0, 5.0, 5.0] and best == 1, (best, medians)
