"""A step of few prefill tokens over a long context (a prefix-cache hit's tail, a late chunk beside decode rows) runs
whole as one captured decode step, a row a token, instead of a piecewise graph with an eager attention between
every two layers (28 launches from the host for a 0.6B model); it generates what the prefill path generates."""

from __future__ import annotations

import numpy as np
import pytest

from vt import LLM, SamplingParams
from vt.engine.worker.runner import ModelRunner

TAIL = 16


def prompts(rng: np.random.Generator, vocab: int) -> tuple[list[int], list[list[int]]]:
    """A 624-token shared prefix and three prompts that add a 16-token tail of their own to it."""
    prefix = [int(t) for t in rng.integers(3, vocab, 624)]
    return prefix, [prefix + [int(t) for t in rng.integers(3, vocab, TAIL)] for _ in range(3)]


def prefill_runs(llm: LLM) -> tuple[int, int]:
    """(piecewise prefill steps run, short steps run whole) so far."""
    d = llm.engine.runner.decoder
    return d.num_prefill_eager + d.num_prefill_captures + d.num_prefill_replays, llm.engine.runner.num_whole_prefills


def test_a_hits_tail_runs_as_one_decode_step_with_no_piecewise_prefill() -> None:
    llm = LLM("tiny-qwen3", backend="cpu", max_model_len=1024, num_blocks=256, max_num_seqs=4)
    prefix, hits = prompts(np.random.default_rng(0), llm.engine.vocab_size)
    greedy = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)
    llm.generate([prefix], greedy)
    before = prefill_runs(llm)
    assert before[0] >= 1, "non-vacuity: the miss ran the piecewise prefill"
    for i, prompt in enumerate(hits):  # cold, then captured, then replayed
        llm.generate([prompt], greedy)
        assert prefill_runs(llm) == (before[0], before[1] + i + 1), f"hit {i}: its tail ran as a prefill step"
    assert llm.engine.kv_manager.hits >= 3 * len(prefix), "non-vacuity: the three prompts were hits"
    driver = llm.engine.runner.decoder
    slot = driver.slots[(TAIL, 1, False, 64, driver._apart(TAIL, 64), False)]  # the tail's rung, 640 tokens' width
    if driver.is_enabled:  # graphs are off in the pool-bypass lane: there the slot runs eagerly every step
        assert slot.is_captured and slot.num_replays >= 1, "the 16-row decode slot was captured and replayed"


@pytest.mark.parametrize("params", [SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, logprobs=2),
                                    SamplingParams(temperature=1.0, seed=7, max_tokens=6, ignore_eos=True,
                                                   logprobs=2, top_k=40)], ids=["greedy", "seeded"])
def test_hits_run_whole_generate_what_the_prefill_path_generates(params: SamplingParams, monkeypatch) -> None:
    """The hits together (one of them admitted while the others decode: a mixed step) against the same prompts with
    caching off, every token computed by the prefill kernel: the same tokens, the same log-probabilities."""
    mixed = []  # the decode rows of each step run whole
    whole = ModelRunner._prefill_whole

    def recording(self, chunks, ends, num_decode):  # type: ignore[no-untyped-def]
        mixed.append(num_decode)
        return whole(self, chunks, ends, num_decode)

    monkeypatch.setattr(ModelRunner, "_prefill_whole", recording)
    runs = {}
    for caching in (False, True):
        llm = LLM("tiny-qwen3", backend="cpu", max_model_len=1024, num_blocks=256, max_num_seqs=4,
                  enable_prefix_caching=caching)
        engine = llm.engine
        prefix, hits = prompts(np.random.default_rng(1), engine.vocab_size)
        llm.generate([prefix], SamplingParams(temperature=0, max_tokens=1))
        first = engine.add_request(hits[0], params)
        while not first.output_ids:
            engine.step()
        late = [engine.add_request(p, params) for p in hits[1:]]  # admitted beside the first's decode row
        while engine.has_unfinished():
            engine.step()
        runs[caching] = ([(r.output_ids, r.cumulative_logprob) for r in (first, *late)], prefill_runs(llm)[1])
    (cold, whole_off), (warm, whole_on) = runs[False], runs[True]
    assert whole_off == 0 and whole_on >= 2, f"non-vacuity: {whole_on} steps ran whole with caching"
    assert max(mixed) >= 1, f"non-vacuity: a step ran whole beside a decode row ({mixed})"
    assert len({tuple(ids) for ids, _ in cold}) == len(cold), "non-vacuity: each prompt generates its own"
    assert [ids for ids, _ in warm] == [ids for ids, _ in cold]
    assert [lp for _, lp in warm] == pytest.approx([lp for _, lp in cold], abs=1e-4)
