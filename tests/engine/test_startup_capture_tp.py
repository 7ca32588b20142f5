"""Graphs captured at start-up on TP = 2 ranks: each rank takes its graphs on the same dummy steps, and they
generate TP = 1's tokens. Apart from test_startup_capture.py: one mutant of its four needs this test."""

from __future__ import annotations

import pytest

from seams.lanes import GRAPHS_REASON, is_bypass_lane
from tests.engine.startup_rig import KW, PROMPTS, captures
from vt import LLM, SamplingParams

pytestmark = pytest.mark.skipif(is_bypass_lane(), reason=GRAPHS_REASON)


def test_tp2_ranks_capture_at_startup_in_step_and_generate_the_tp1_tokens() -> None:
    """Each rank takes its graphs on the same dummy steps, so the captures' collectives pair up."""
    kw = KW | dict(max_model_len=256, max_num_batched_tokens=256)
    # the third runs past half of max_model_len's table, so it needs the widest width bucket (powers of two)
    prompts = [{"prompt_token_ids": p} for p in (*PROMPTS[:2], PROMPTS[2][:200])]
    sp = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    one = [o.outputs[0].token_ids for o in LLM("tiny-qwen3", **kw).generate(prompts, sp)]
    two = LLM("tiny-qwen3", tensor_parallel_size=2, startup_capture=True, **kw)
    taken = captures(two)
    widest_keys = two.engine.runner.decoder.max_width * 16
    assert taken > 0 and all(len(t) == 8 for t in one) and 200 + 8 > widest_keys // 2, (widest_keys, one)
    assert [o.outputs[0].token_ids for o in two.generate(prompts, sp)] == one
    assert captures(two) == taken, "no capture on a request's time"
