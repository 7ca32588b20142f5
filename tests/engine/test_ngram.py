"""The n-gram (prompt lookup) proposer: no second model, lossless, state keyed by request id."""

from __future__ import annotations

from vt import LLM, SamplingParams
from vt.engine.config import NGRAM, EngineConfig
from vt.engine.front.llm_engine import LLMEngine
from vt.engine.spec_decode.proposers import NgramIndex

K = 3


def engine(ngram: bool = True, **kw) -> LLMEngine:
    cfg = dict(model="tiny-qwen3", max_model_len=256, num_blocks=64, max_num_seqs=8) | kw
    if ngram:
        cfg |= dict(speculative_model=NGRAM, num_speculative_tokens=K)
    return LLMEngine(EngineConfig(**cfg))


def greedy(n: int) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)


# Repetitive prompts over disjoint token ranges: lookups hit, and a proposal drawn from another
# request's history is visible as tokens that request never had. The leaver's history is the longer,
# so state it left behind would outweigh the keeper's own.
LEAVER = [10, 11, 12, 13] * 10
KEEPER = [200, 201, 202, 203, 204, 205] * 2


def _drive(e: LLMEngine, prompts: list[tuple[list[int], int]]) -> dict[str, list[int]]:
    reqs = [e.add_request(p, greedy(n)) for p, n in prompts]
    while e.has_unfinished():
        e.step()
    return {r.id: r.all_ids for r in reqs}


def test_the_index_proposes_what_followed_the_latest_earlier_occurrence() -> None:
    idx = NgramIndex(n_max=3)
    idx.extend([1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3])
    assert idx.lookup(2, n_min=1) == [7, 5], "the latest earlier [1, 2, 3] was followed by 7, 5"
    idx.extend([4])
    assert idx.lookup(3, n_min=1) is None, "[... 3, 4] never occurred before"
    idx.extend([8, 8])
    assert idx.lookup(3, n_min=1) == [8, 8, 8], "a period-1 continuation repeats"


def test_ngram_greedy_with_speculation_equals_greedy_without() -> None:
    prompts = [(LEAVER, 12), (KEEPER, 40), ([7, 8, 9] * 6, 25), ([300 + i for i in range(20)], 30)]
    with_spec = engine()
    got = _drive(with_spec, prompts)
    assert list(got.values()) == list(_drive(engine(ngram=False), prompts).values())
    p = with_spec.runner.proposer
    assert p.num_accepted > 0 and p.num_proposed > p.num_accepted, "non-vacuity: some proposals accepted, some not"


def test_ngram_keepers_proposals_match_a_solo_run_through_row_moves() -> None:
    """The leaver finishes first and the keeper condenses into its row: the keeper's proposals must be
    the ones it makes alone."""
    e = engine()
    _drive(e, [(LEAVER, 3), (KEEPER, 30)])
    solo = engine()
    _drive(solo, [(KEEPER, 30)])
    together = [p for _, r, p in e.runner.proposer.trace if r == "req-1"]
    alone = [p for _, r, p in solo.runner.proposer.trace if r == "req-0"]
    assert together, "non-vacuity: the keeper proposed"
    assert together == alone


def test_ngram_proposals_are_the_lookup_over_the_requests_own_tokens() -> None:
    """Every answer the proposer gives a request (a proposal, or none) is the one a fresh index over that
    request's own tokens gives, whatever rows moved and whoever left before."""
    e = engine()
    proposer, calls = e.runner.proposer, []
    real = proposer.propose

    def spy(batch, reqs):
        out = real(batch, reqs)
        calls.extend((r.req_id, batch.tokens(r.req_id).tolist(), out.get(r.req_id)) for r in reqs)
        return out

    proposer.propose = spy
    _drive(e, [(LEAVER, 3), (KEEPER, 30), ([40, 41, 42] * 6, 20)])
    assert sum(got is not None for _, _, got in calls) >= 5, "non-vacuity: the proposer proposed"
    for rid, tokens, got in calls:
        own = NgramIndex(proposer.n_max)
        own.extend(tokens)
        want = own.lookup(K, proposer.n_min)
        assert (got.tokens if got else None) == want, f"{rid} at {len(tokens)} tokens: {got} != {want}"


def test_ngram_sampling_is_reproducible() -> None:
    sp = [SamplingParams(temperature=0.8, max_tokens=24, seed=i, ignore_eos=True) for i in range(3)]
    prompts = [LEAVER, KEEPER, [40, 41, 42] * 6]
    kw = dict(model="tiny-qwen3", max_model_len=128, num_blocks=32, speculative_model=NGRAM, num_speculative_tokens=K)
    a = [o.token_ids for o in LLM(**kw).generate(prompts, sp)]
    llm = LLM(**kw)
    b = [o.token_ids for o in llm.generate(prompts, sp)]
    assert a == b and all(len(t) == 24 for t in a)
    assert llm.engine.runner.proposer.num_proposed > 0, "non-vacuity: sampled requests speculated"


def test_sampled_requests_draw_the_same_tokens_with_and_without_ngram_speculation() -> None:
    """Verification samples each position with the request's own (seed, output position) draw and accepts a
    proposal only where it equals that draw: speculation changes how many steps a request takes, never
    its tokens, and so never its distribution."""
    sp = [SamplingParams(temperature=0.9, top_k=40, max_tokens=24, seed=i, ignore_eos=True) for i in range(3)]
    prompts = [LEAVER, KEEPER, [40, 41, 42] * 6]
    kw = dict(model="tiny-qwen3", max_model_len=128, num_blocks=32)
    plain = [o.token_ids for o in LLM(**kw).generate(prompts, sp)]
    llm = LLM(**kw, speculative_model=NGRAM, num_speculative_tokens=K)
    spec = [o.token_ids for o in llm.generate(prompts, sp)]
    assert spec == plain
    p = llm.engine.runner.proposer
    assert p.num_accepted > 0 and p.num_accepted < p.num_proposed, "non-vacuity: some accepted, some rejected"
