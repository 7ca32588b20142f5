"""Engine features end to end on CUDA: speculative decoding is lossless, chunked prefill generates what one prefill
does. Apart from tests/backends/test_cuda_backend.py, whose tests gate the backend's capture rules: a mutation
there (cuBLAS without our workspace) can also break a whole engine's start-up capture, which is not what these
check."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


def test_speculative_decoding_on_cuda_is_lossless() -> None:
    from vt.engine.config import EngineConfig
    from vt.engine.front.ladder import prompts_for, run_rung
    from vt.engine.front.llm_engine import LLMEngine

    def run(spec: bool):
        kw = dict(speculative_model="tiny-qwen3-draft", num_speculative_tokens=4) if spec else {}
        e = LLMEngine(EngineConfig(model="tiny-qwen3", backend="cuda", max_model_len=256, num_blocks=128,
                                   max_num_seqs=8, **kw))
        return run_rung(e, 4, prompts_for(512, 8, 24, seed=5), [8 + 5 * i for i in range(8)]), e

    (want, _), (got, e) = run(False), run(True)
    assert got.tokens == want.tokens and 0 < e.runner.proposer.acceptance_rate < 1


def test_chunked_prefill_on_cuda_generates_what_one_prefill_does() -> None:
    """A budget of 16 splits every prompt over several steps (and gives steps whose chunks sample nothing)."""
    from vt import LLM, SamplingParams

    prompts = [list(range(3, 3 + n)) for n in (90, 17, 41)]
    sp = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, prompt_logprobs=1)
    whole = LLM("tiny-qwen3", backend="cuda", max_model_len=256, num_blocks=64).generate(prompts, sp)
    split = LLM("tiny-qwen3", backend="cuda", max_model_len=256, num_blocks=64, max_num_seqs=4,
                max_num_batched_tokens=16).generate(prompts, sp)
    assert [o.token_ids for o in split] == [o.token_ids for o in whole]
    for a, b in zip(split, whole):
        assert a.prompt_logprobs is not None and len(a.prompt_logprobs) == len(b.prompt_logprobs or [])
