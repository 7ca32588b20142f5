"""What the tensor-parallel tests share: prompts and params, and generating them at a TP size (each in its own
engine, closed after)."""

from __future__ import annotations

from vt.engine.front.llm import LLM
from vt.engine.sample.params import SamplingParams

PROMPTS = [{"prompt_token_ids": [5 + i, 17, 99, 3 * i + 1] * (3 + i)} for i in range(4)]
GREEDY = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True, logprobs=1)
KW = dict(max_model_len=128, num_blocks=64, max_num_batched_tokens=32)  # chunked prefills and mixed steps too


def generate(model: str, tp: int) -> tuple[list[list[int]], list[float]]:
    llm = LLM(model, tensor_parallel_size=tp, **KW)
    try:
        outs = llm.generate(PROMPTS, GREEDY)
    finally:
        llm.engine.close()
    return [o.outputs[0].token_ids for o in outs], [o.outputs[0].cumulative_logprob for o in outs]
