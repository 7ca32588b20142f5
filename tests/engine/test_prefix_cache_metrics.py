"""The prefix-cache counters (the engine's stats, fed to /metrics as vLLM's prefix_cache_queries / _hits) count what
vLLM v1 counts: each sample sequence's prompt once, on its first admission. A readmission after preemption is
counted apart (vLLM's preempted_queries / preempted_hits), and each of n > 1 samples queries its prompt, a forked
sample counting the leader's blocks it shares as hits (vLLM's later child requests find them cached)."""

from __future__ import annotations

from vt import LLM, SamplingParams

BS = 16


def test_a_readmission_after_preemption_is_not_counted_as_a_query() -> None:
    # 24 blocks of 16 cannot hold six 120-token sequences at once (6 * 8 blocks): decodes preempt
    llm = LLM("tiny-qwen3", backend="cpu", num_blocks=24, block_size=BS, max_model_len=128, max_num_seqs=8)
    prompts = [[(i * 37 + j) % 500 + 3 for j in range(20)] for i in range(6)]  # no two share a first block
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=100, ignore_eos=True), use_tqdm=False)
    assert sum(o.num_preemptions for o in outs) > 0, "non-vacuity: a request was preempted and readmitted"
    st = llm.engine.stats()
    assert (st["prefix_queries"], st["prefix_hits"]) == (sum(map(len, prompts)), 0), \
        "each prompt token queried once (no prompt shares a block with another), however often it was recomputed"
    assert st["prefix_preempted_queries"] > 0, "the readmissions' lookups are counted apart, as vLLM's are"


def test_each_of_n_samples_queries_its_prompt_and_a_fork_hits_the_blocks_it_shares() -> None:
    llm = LLM("tiny-qwen3", backend="cpu", num_blocks=64, block_size=BS, max_model_len=128, max_num_seqs=8)
    prompt, n = list(range(200, 240)), 3
    params = SamplingParams(temperature=0.8, seed=1, n=n, max_tokens=2, ignore_eos=True)
    before = llm.engine.scheduler.prefill_tokens
    outs = llm.generate([prompt], params, use_tqdm=False)
    assert len(outs[0].outputs) == n
    assert llm.engine.scheduler.prefill_tokens - before == len(prompt), \
        "non-vacuity: the samples shared one prefill (the later ones were forked from the first)"
    st = llm.engine.stats()
    shared = len(prompt) // BS * BS  # the first sample's full blocks, which each later one shares
    assert (st["prefix_queries"], st["prefix_hits"]) == (n * len(prompt), (n - 1) * shared), \
        "each sample queries the prompt; each fork hits the blocks it shares, as vLLM's later children do"
