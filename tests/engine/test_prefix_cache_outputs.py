"""Prefix caching changes which KV is computed, never what is generated: the engine's greedy and seeded tokens
are the same with it and without it (tiny-qwen3 on the CPU), while the cache serves most of the prompts."""

from __future__ import annotations

from vt import LLM, SamplingParams

SYSTEM = list(range(20, 68))  # three full blocks shared by every prompt


def generate(caching: bool) -> tuple[list[list[int]], LLM]:
    llm = LLM("tiny-qwen3", max_model_len=256, num_blocks=64, max_num_seqs=4, enable_prefix_caching=caching)
    prompts = [SYSTEM + [100 + i, 7, 8 + i] for i in range(6)]
    outs = []
    for params in (SamplingParams(temperature=0, max_tokens=12, ignore_eos=True),
                   SamplingParams(temperature=1.0, seed=3, max_tokens=12, ignore_eos=True)):
        outs += [o.outputs[0].token_ids for o in llm.generate(prompts, params)]  # six at once, four seats
        outs += [o.outputs[0].token_ids for o in llm.generate(prompts[:2], params)]  # again, later
    return outs, llm


def test_outputs_are_the_same_with_and_without_prefix_caching() -> None:
    cold, off = generate(False)
    warm, on = generate(True)
    assert warm == cold, "the tokens generated do not depend on which KV came from the cache"
    kv = on.engine.kv_manager
    assert kv.hits >= 10 * 48, f"non-vacuous: the cache served {kv.hits} of {kv.queries} prompt tokens"
    assert off.engine.kv_manager.hits == 0
