"""A step of few prefill tokens (a prefix-cache hit's tail, a short prompt, small chunks) attends with the decode
kernel, which splits a long context across blocks, and a longer one with the tensor-core prefill kernel; both give
the tokens the other does."""

from __future__ import annotations

import numpy as np

from backends.cpu import CpuBackend
from models.decoder import SHORT_PREFILL_TOKENS
from vt import LLM, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)


def prefill_attention_kernels(monkeypatch, llm: LLM, prompts: list[list[int]]) -> list[set[str]]:
    """The attention kernels each prompt's prefill step launched, the prompts run one after another (their
    decode steps replay graphs, whose launches the recording does not see)."""
    steps: list[set[str]] = []
    firsts: list[int] = []
    launch = CpuBackend.launch

    def recording(self, kernel, *args, **kw):  # type: ignore[no-untyped-def]
        name = getattr(kernel, "__name__", "")
        if name.endswith("attention") and steps:
            steps[-1].add(name)
        return launch(self, kernel, *args, **kw)

    monkeypatch.setattr(CpuBackend, "launch", recording)
    engine = llm.engine
    for prompt in prompts:
        engine.add_request(prompt, GREEDY)
        firsts.append(len(steps))
        while engine.has_unfinished():
            steps.append(set())
            engine.step()
    return [steps[i] for i in firsts]


def test_a_prefix_hits_tail_attends_with_the_decode_kernel_and_a_miss_with_the_prefill_kernel(monkeypatch) -> None:
    rng = np.random.default_rng(0)
    llm = LLM("tiny-qwen3", backend="cpu", max_model_len=1024, num_blocks=256, max_num_seqs=4)
    prompt = [int(t) for t in rng.integers(3, llm.engine.vocab_size, 640)]
    hit = prompt[:-16] + [int(t) for t in rng.integers(3, llm.engine.vocab_size, 16)]
    miss, tail = prefill_attention_kernels(monkeypatch, llm, [prompt, hit])
    assert llm.engine.kv_manager.hits >= 608, f"non-vacuity: the second prompt is a hit ({llm.engine.kv_manager.hits})"
    assert miss == {"paged_prefill_attention"}
    assert tail == {"paged_decode_attention"}, "the hit's 16-token tail"


def test_short_and_long_prefills_generate_the_same_tokens_through_either_kernel() -> None:
    """A prompt computed whole (the prefill kernel) and in chunks of at most SHORT_PREFILL_TOKENS (the decode
    kernel), and a prefix hit, all give the same greedy tokens."""
    rng = np.random.default_rng(1)
    prompts = [[int(t) for t in rng.integers(3, 500, n)] for n in (SHORT_PREFILL_TOKENS + 1, 300)]
    whole = LLM("tiny-qwen3", backend="cpu", max_model_len=512, num_blocks=128, enable_prefix_caching=False)
    chunked = LLM("tiny-qwen3", backend="cpu", max_model_len=512, num_blocks=128, enable_prefix_caching=False,
                  max_num_batched_tokens=SHORT_PREFILL_TOKENS // 2, max_num_seqs=1)
    expect = [o.outputs[0].token_ids for o in whole.generate(prompts, GREEDY)]
    assert len({tuple(t) for t in expect}) == 2, "non-vacuity: the prompts give different tokens"
    assert [o.outputs[0].token_ids for o in chunked.generate(prompts, GREEDY)] == expect
