"""A step of few prefill tokens over a long context (a prefix-cache hit's tail, a late chunk) attends with the decode
kernel, which splits the context across blocks; the rest with the tensor-core prefill kernel; both give the tokens
the other does."""

from __future__ import annotations

import numpy as np
import pytest

from backends.cpu import CpuBackend
from models.decoder import SHORT_PREFILL_TOKENS
from vt import LLM, SamplingParams
from vt.engine.worker.runner import ModelRunner

GREEDY = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)


def prefill_attention_kernels(monkeypatch, llm: LLM, prompts: list[list[int]]) -> list[set[str]]:
    """The attention kernels each prompt's prefill step launched, the prompts run one after another (their
    decode steps replay graphs, whose launches the recording does not see)."""
    steps: list[set[str]] = []
    firsts: list[int] = []
    launch = CpuBackend.launch

    def recording(self, kernel, *args, **kw):  # type: ignore[no-untyped-def]
        name = getattr(kernel, "__name__", "")
        if "_attention" in name and steps:
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


def test_a_hits_tail_takes_the_decode_kernel_a_miss_and_a_short_prompt_the_prefill_kernel(monkeypatch) -> None:
    rng = np.random.default_rng(0)
    llm = LLM("tiny-qwen3", backend="cpu", max_model_len=1024, num_blocks=256, max_num_seqs=4)
    prompt = [int(t) for t in rng.integers(3, llm.engine.vocab_size, 640)]
    hit = prompt[:-16] + [int(t) for t in rng.integers(3, llm.engine.vocab_size, 16)]
    fresh = [int(t) for t in rng.integers(3, llm.engine.vocab_size, 16)]
    miss, tail, short = prefill_attention_kernels(monkeypatch, llm, [prompt, hit, fresh])
    assert llm.engine.kv_manager.hits >= 608, f"non-vacuity: the second prompt is a hit ({llm.engine.kv_manager.hits})"
    assert miss == {"paged_prefill_attention"}
    rows = llm.engine.runner.decoder.model.rows_kernel  # VT_SHARED_ROWS_ATTENTION: a kernel of its own
    named = {None: "paged_decode_attention", "rows": "paged_decode_attention_rows", "mma": "paged_rows_attention"}
    assert tail == {named[rows]}, \
        "the hit's 16-token tail over 624 cached keys"
    assert short == {"paged_prefill_attention"}, "a 16-token prompt: no context to split"


@pytest.mark.parametrize("route", ["whole", "piecewise"])
def test_short_and_long_prefills_generate_the_same_tokens_through_either_kernel(route: str, monkeypatch) -> None:
    """Prompts computed whole (the prefill kernel) and in small chunks (the decode kernel once the context is long,
    in mixed steps beside the other prompt's decode row) give the same greedy tokens."""
    if route == "piecewise":  # the decode kernel inside the piecewise graph's attention break (a step of more rows
        monkeypatch.setattr(ModelRunner, "_runs_whole", lambda *args: False)  # than the whole route's 64 goes there)
    rng = np.random.default_rng(1)
    prompts = [[int(t) for t in rng.integers(3, 500, n)] for n in (SHORT_PREFILL_TOKENS + 1, 300)]
    whole = LLM("tiny-qwen3", backend="cpu", max_model_len=512, num_blocks=128, enable_prefix_caching=False)
    chunked = LLM("tiny-qwen3", backend="cpu", max_model_len=512, num_blocks=128, enable_prefix_caching=False,
                  max_num_batched_tokens=SHORT_PREFILL_TOKENS // 2, max_num_seqs=2)
    # the first decodes while the second's chunks pass its 256th key; greedy tokens of a random tiny model survive
    # small errors, the sampled tokens' log-probabilities do not (float32: the two kernels agree to ~1e-6)
    sp = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=0)
    expect = [o.outputs[0] for o in whole.generate(prompts, sp)]
    got = [o.outputs[0] for o in chunked.generate(prompts, sp)]
    assert len({tuple(o.token_ids) for o in expect}) == 2, "non-vacuity: the prompts give different tokens"
    assert [o.token_ids for o in got] == [o.token_ids for o in expect]
    assert [o.cumulative_logprob for o in got] == pytest.approx([o.cumulative_logprob for o in expect], abs=1e-4)
