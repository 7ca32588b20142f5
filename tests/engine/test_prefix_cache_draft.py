"""Prefix caching with a draft model: the draft's KV group is cached beside the target's, so a request that
speculates starts both models behind the shared prefix; the draft proposes exactly what it proposes without the
cache (its KV for the prefix is the same), and the draft prefills only the tail."""

from __future__ import annotations

import numpy as np

from vt import LLM, SamplingParams
from vt.engine.core.kv_manager import DRAFT, TARGET, KVCacheManager

KW = dict(model="tiny-qwen3", backend="cpu", speculative_model="tiny-qwen3-draft", num_speculative_tokens=3,
          max_model_len=512, num_blocks=256, max_num_seqs=4)
GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


def run(caching: bool, prompts: list[list[int]]) -> tuple[list[list[int]], list, int, list[int]]:
    """Prompts one after another: their tokens, the proposal trace, the accepted count, and the tokens the draft
    prefilled for each."""
    llm = LLM(**KW, enable_prefix_caching=caching)
    proposer = llm.engine.runner.proposer
    prefilled: list[int] = []
    prefill = proposer.driver.prefill

    def counting(seqs, *a, **kw):  # type: ignore[no-untyped-def]
        prefilled.append(sum(len(s[0]) for s in seqs))
        return prefill(seqs, *a, **kw)

    proposer.driver.prefill = counting
    tokens = [llm.generate([p], GREEDY)[0].outputs[0].token_ids for p in prompts]
    trace = [tuple(t[2]) for t in proposer.trace]
    return tokens, trace, proposer.num_accepted, prefilled


def test_a_hit_starts_the_draft_behind_the_prefix_and_it_proposes_what_it_does_uncached() -> None:
    rng = np.random.default_rng(0)
    system = [int(t) for t in rng.integers(3, 500, 160)]
    prompts = [system + [int(t) for t in rng.integers(3, 500, 9)] for _ in range(3)]
    cached, plain = run(True, prompts), run(False, prompts)
    assert plain[3] == [169, 169, 169], "non-vacuity: uncached, the draft prefills every prompt whole"
    assert cached[3] == [169, 9, 9], "a hit's draft prefills only the tail behind the 160 cached tokens"
    assert cached[0] == plain[0], "the tokens"
    assert cached[2] > 0 and cached[1] == plain[1] and cached[2] == plain[2], (
        "the draft proposes (and has accepted) exactly what it does without the cache")


def test_a_speculating_request_is_served_only_as_far_as_the_drafts_group_is_cached() -> None:
    kv = KVCacheManager(num_blocks=16, block_size=4, max_blocks_per_seq=8, num_groups=2, enable_caching=True)
    prompt = list(range(1, 14))  # three full blocks and one token
    kv.allocate("a", [13, 13])
    kv.cache_full_blocks("a", prompt, 13, draft_computed=13)
    target, draft = kv.lookup_groups(prompt + [99], draft=True)
    assert target == kv.block_ids("a", TARGET)[:3] and draft == kv.block_ids("a", DRAFT)[:3]
    kv.allocate("b", [8, 0])  # b did not speculate: its draft group holds nothing
    kv.cache_full_blocks("b", [50, 51, 52, 53, 54, 55, 56, 57], 8, draft_computed=0)
    target, draft = kv.lookup_groups([50, 51, 52, 53, 54, 55, 56, 57, 1], draft=True)
    assert (target, draft) == ([], []), "a prefix without the draft's KV serves a speculating request nothing"
    target, draft = kv.lookup_groups([50, 51, 52, 53, 54, 55, 56, 57, 1], draft=False)
    assert target == kv.block_ids("b", TARGET)[:2] and draft == [], "non-vacuity: the target's is cached"


def test_a_prompt_cached_through_its_last_token_leaves_the_draft_nothing_to_prefill() -> None:
    """A prompt of whole blocks, run twice: the second finds both groups' KV cached through its last token, so the
    target computes that token alone and the draft prefills nothing, and both propose and accept as uncached."""
    system = [int(t) for t in np.random.default_rng(1).integers(3, 500, 160)]  # ten whole blocks
    cached, plain = run(True, [system, system]), run(False, [system, system])
    assert plain[3] == [160, 160], "non-vacuity: uncached, the draft prefills each prompt whole"
    assert cached[3] == [160], f"the second prompt's draft prefilled {cached[3][1:]} tokens, not none"
    assert cached[0] == plain[0], "the tokens"
    assert cached[2] > 0 and cached[1] == plain[1] and cached[2] == plain[2], (
        "the draft proposes (and has accepted) exactly what it does without the cache")
