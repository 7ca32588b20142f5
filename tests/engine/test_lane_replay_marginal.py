"""scripts/replay-ab --kernels: under PDL a kernel starts before the one ahead of it ends and waits, so its duration
overlaps its neighbours'; the marginal time charges each kernel only what it adds to the timeline's end, and the
GPU's idle stretches apart, so the charges add up to the replay."""

from __future__ import annotations

import pytest

from tests.helpers import load_script


def test_marginal_times_charge_each_kernel_what_it_adds_and_sum_to_the_span() -> None:
    replay_ab = load_script("replay-ab")
    # gemm 0-10; attn launched early at 4 (PDL), ends 13; gemm 12-20 (overlaps attn's tail); idle 20-25; norm 25-27
    spans = [("attn", 4.0, 13.0), ("gemm", 0.0, 10.0), ("gemm", 12.0, 20.0), ("norm", 25.0, 27.0)]
    got = replay_ab.marginal_times(spans)
    assert got == pytest.approx({"gemm": 10.0 + 7.0, "attn": 3.0, replay_ab.IDLE: 5.0, "norm": 2.0})
    assert sum(got.values()) == pytest.approx(27.0), "the charges are the span, first start to last end"
    durations = sum(end - start for _, start, end in spans)
    assert durations > sum(got.values()), f"non-vacuity: the durations overlap ({durations} us summed)"


def test_a_kernel_inside_anothers_span_adds_nothing() -> None:
    replay_ab = load_script("replay-ab")
    got = replay_ab.marginal_times([("long", 0.0, 10.0), ("short", 2.0, 5.0)])
    assert got == pytest.approx({"long": 10.0, "short": 0.0}) and replay_ab.IDLE not in got
