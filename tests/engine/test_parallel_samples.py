"""n > 1: parallel samples of one prompt share its KV blocks through reference counts (not n copies), and
each sample is exactly the request it would be alone with its own seed (seed + index)."""

from __future__ import annotations

import pytest

from vt import LLM, SamplingParams
from vt.errors import ConfigError

PROMPT = list(range(40, 80))  # 40 tokens: two full blocks of 16 shared, a partial third copied per sample


def sp(**kw) -> SamplingParams:
    """Every sampling field given: LLM.generate and LLMEngine.add_request then draw alike (the engine fills an
    unset one from the checkpoint, as the API server; the offline LLM leaves it neutral, as vLLM's)."""
    given = {"temperature": 0.9, "max_tokens": 12, "ignore_eos": True, "seed": 5, "top_k": 0, "top_p": 1.0,
             "min_p": 0.0, "repetition_penalty": 1.0}
    return SamplingParams(**(given | kw))


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM("tiny-qwen3", max_model_len=128, num_blocks=64, max_num_seqs=8)


def test_each_sample_is_the_request_it_would_be_alone(llm: LLM) -> None:
    out = llm.generate([PROMPT], sp(n=4))[0]
    assert [c.index for c in out.outputs] == [0, 1, 2, 3] and out.finished
    alone = [llm.generate([PROMPT], sp(seed=5 + i))[0].token_ids for i in range(4)]
    assert [c.token_ids for c in out.outputs] == alone
    assert len({tuple(t) for t in alone}) == 4, "non-vacuity: the samples differ"


def test_the_samples_share_the_prompts_full_blocks(llm: LLM) -> None:
    e = llm.engine
    e.add_request(PROMPT, sp(n=4, max_tokens=3))
    e.step()  # the prefill step: one computed, three forked
    ids = sorted(e.requests)
    tables = [e.kv_manager.block_ids(r) for r in ids]
    assert len(tables) == 4 and all(t[:2] == tables[0][:2] for t in tables), "the two full blocks are shared"
    assert len({t[2] for t in tables}) == 4, "each sample owns its partial block"
    assert e.kv_manager.num_used == 2 + 4, f"{e.kv_manager.num_used} blocks in use; n copies would hold 12"
    while e.has_unfinished():
        e.step()
    assert e.kv_manager.num_used == 0, "every reference let go"


def test_a_sample_that_finishes_early_leaves_the_shared_blocks_to_the_others(llm: LLM) -> None:
    """The first sample stops at its first token (a stop id); new requests then take the freed blocks.
    The other samples still read their shared prompt intact."""
    first = llm.generate([PROMPT], sp(seed=5, max_tokens=1))[0].token_ids[0]
    mixed = llm.engine
    r = mixed.add_request(PROMPT, sp(n=3, stop_token_ids=[first]))
    filler = None
    kv = mixed.kv_manager
    while mixed.has_unfinished():
        mixed.step()
        if r.is_finished and filler is None:
            live = {b for rid in mixed.requests for b in kv.block_ids(rid)}
            assert set(kv.block_ids(r.siblings[1].id)[:2]) <= live and kv.num_used == len(live), (
                "the shared blocks stay out of the pool while a sibling holds them")
            filler = mixed.add_request(list(range(200, 260)), sp(seed=9, max_tokens=4))
    assert r.output_ids == [first] and r.finish_reason == "stop", "sample 0 stopped at once"
    assert filler is not None, "non-vacuity: a new request took blocks while the other samples ran"
    alone = [llm.generate([PROMPT], sp(seed=5 + i, stop_token_ids=[first]))[0].token_ids for i in (1, 2)]
    assert [s.output_ids for s in r.siblings[1:]] == alone


def test_n_is_validated() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="n="):
            SamplingParams(n=bad)


def test_an_abort_takes_the_requests_own_samples_never_an_id_that_merely_starts_like_them() -> None:
    """Samples of "x" are found by their head, not by the "x#" prefix of their ids: a user's own request
    "x#1" survives an abort of "x"; aborting "y" (n=2) takes both its samples."""
    from vt.engine.config import EngineConfig
    from vt.engine.front.llm_engine import LLMEngine

    e = LLMEngine(EngineConfig(model="tiny-qwen3", max_model_len=64, num_blocks=32))
    long = dict(max_tokens=30, ignore_eos=True, temperature=0)
    x = e.add_request([5, 6, 7], SamplingParams(**long), request_id="x")
    own = e.add_request([5, 6, 8], SamplingParams(**long), request_id="x#1")
    y = e.add_request([5, 6, 9], SamplingParams(n=2, **long), request_id="y")
    e.step()
    assert {r.id for r in e.abort("x")} == {"x"}, "the user's own x#1 is no sample of x: it carries on"
    assert x.finish_reason == "abort" and not own.is_finished
    assert {r.id for r in e.abort("y")} == {"y", "y#1"}, "non-vacuity: y's two samples both go"
    assert y.siblings is not None and all(s.finish_reason == "abort" for s in y.siblings)
    while e.has_unfinished():
        e.step()
    assert own.finish_reason == "length" and len(own.output_ids) == 30
