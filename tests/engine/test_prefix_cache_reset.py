"""LLM.reset_prefix_cache, vLLM's: every cached prefix forgotten (after new weights, or between benchmark runs), so a
prompt sent again is computed again; refused, with the cache as it was, while a request holds KV blocks. In this
process and through the engine core's process."""

from __future__ import annotations

import pytest

from vt import LLM, SamplingParams

PROMPT = list(range(20, 68))  # three whole blocks of 16
GREEDY = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)


@pytest.mark.parametrize("engine_process", [False, True], ids=["in-process", "engine-process"])
def test_after_a_reset_a_prompt_sent_again_is_computed_again(engine_process: bool) -> None:
    llm = LLM("tiny-qwen3", backend="cpu", max_model_len=256, num_blocks=64, engine_process=engine_process)
    try:
        served = [llm.generate([PROMPT], GREEDY)[0].num_cached_tokens for _ in range(2)]
        assert served == [0, len(PROMPT) - 1], f"non-vacuity: the cache serves the prompt sent again ({served})"
        assert llm.reset_prefix_cache() is True, "nothing runs: the reset is done"
        again = llm.generate([PROMPT], GREEDY)[0].num_cached_tokens
        assert again == 0, f"after the reset the cache served {again} prompt tokens"
    finally:
        if engine_process:
            llm.engine.close()


def test_a_reset_while_a_request_holds_blocks_is_refused_and_the_cache_kept() -> None:
    llm = LLM("tiny-qwen3", backend="cpu", max_model_len=256, num_blocks=64)
    engine = llm.engine
    llm.generate([PROMPT], GREEDY)
    engine.add_request(list(range(100, 140)), SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    engine.step()  # admitted: it holds blocks
    assert engine.kv_manager.tables, "non-vacuity: a request holds KV blocks"
    assert llm.reset_prefix_cache() is False, "a reset while a request holds blocks is refused"
    while engine.has_unfinished():
        engine.step()
    served = llm.generate([PROMPT], GREEDY)[0].num_cached_tokens
    assert served == len(PROMPT) - 1, f"the refused reset kept the cache: it served {served} prompt tokens"
