"""Prefix caching changes which KV is computed, never what is generated: the engine's greedy and seeded tokens
are the same with it and without it (tiny-qwen3 on the CPU), while the cache serves most of the prompts. A
prompt of whole blocks, cached through its last token, computes that token alone and leaves the shared KV as
it was."""

from __future__ import annotations

import numpy as np
import pytest

from vt import LLM, SamplingParams

SYSTEM = list(range(20, 68))  # three full blocks shared by every prompt
GREEDY = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)


def generate(caching: bool) -> tuple[list[list[int]], LLM]:
    llm = LLM("tiny-qwen3", max_model_len=256, num_blocks=64, max_num_seqs=4, enable_prefix_caching=caching)
    prompts = [SYSTEM + [100 + i, 7, 8 + i] for i in range(6)] + [SYSTEM]  # the last: cached through its end
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



@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("blocks", [3, 20], ids=["piecewise-prefill", "whole-decode-step"])
def test_a_prompt_cached_through_its_last_token_computes_that_token_alone_and_writes_no_kv(
        blocks: int, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prompt of whole blocks, run twice: the second is served every block and computes one token for its
    logits (vLLM recomputes the last block: 16). That token's KV is in the cache already, and the block holding
    it is shared: a marker put in its slot (every layer's K and V) survives the hit's step, so the step wrote
    nothing there. Both of the runner's prefill routes: 3 blocks go through the prefill graphs, 20 (a token over
    a long context) run whole as a decode step; on CUDA, the kernels' slot -1."""
    llm = LLM("tiny-qwen3", backend=backend, max_model_len=512, num_blocks=64, max_num_seqs=4)
    engine, runner = llm.engine, llm.engine.runner
    prompt = [int(t) for t in np.random.default_rng(blocks).integers(3, engine.vocab_size, 16 * blocks)]
    llm.generate([prompt], GREEDY)
    kv, bs = engine.kv_manager, engine.cfg.block_size
    cached = [kv.cached.get(key) for key in kv.keys_of(prompt, len(prompt) // bs)]
    assert None not in cached, f"non-vacuous: every block of the prompt is cached ({cached})"
    last, slot = cached[-1], bs - 1  # the last token's block and its place in it
    caches = (*runner.kv.k, *runner.kv.v)
    for cache in caches:
        host = runner.backend.copy_d2h(cache)
        host[last, slot] = 7.0
        runner.backend.copy_h2d(cache, host)
    whole = []
    real = runner._prefill_whole
    monkeypatch.setattr(runner, "_prefill_whole", lambda *a: whole.append(1) or real(*a))
    before = engine.scheduler.prefill_tokens
    llm.generate([prompt], GREEDY)
    assert engine.scheduler.prefill_tokens - before == 1, (
        f"the hit computed {engine.scheduler.prefill_tokens - before} prompt tokens, not its last one alone")
    assert bool(whole) == (blocks == 20), "non-vacuous: the route the parameter names"
    written = [i for i, cache in enumerate(caches) if not np.all(runner.backend.copy_d2h(cache)[last, slot] == 7.0)]
    assert not written, f"the hit's step wrote its last token's KV into the shared block (caches {written})"


def test_each_output_says_how_many_prompt_tokens_the_cache_served() -> None:
    """RequestOutput.num_cached_tokens, vLLM's: none at first, all but the last token of a prompt sent again, the
    whole blocks of a longer one behind it."""
    llm = LLM("tiny-qwen3", backend="cpu", max_model_len=256, num_blocks=64, max_num_seqs=4)
    outs = [llm.generate([p], GREEDY)[0] for p in (SYSTEM, SYSTEM, SYSTEM + [5, 6, 7])]
    assert [o.num_cached_tokens for o in outs] == [0, len(SYSTEM) - 1, len(SYSTEM)]
