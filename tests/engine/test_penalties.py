"""Repetition, presence and frequency penalties, applied by the batched sampler kernel on each backend:
repetition against transformers' own logits processor, presence and frequency against OpenAI's
definition; and in the engine, on the tokens they should touch."""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine.sampler_rig import BACKENDS, run_sampler
from vt import LLM, SamplingParams
from vt.engine.sample.sampler import RowSpec
from vt.errors import ConfigError, RequestError

V = 64
RNG = np.random.default_rng(0)
PROMPT = RNG.integers(0, V, 12)
OUTPUT = np.array([3, 3, 3, 7, 9, 9, 12, 40, 63])  # repeats: presence and frequency differ on them
LOGITS = RNG.standard_normal(V).astype(np.float32) * 3


def penalized(backend: str, **kw) -> np.ndarray:
    """The logits after the sampler's penalty pass (greedy, so nothing else touches them)."""
    spec = RowSpec(temperature=0.0, history=np.concatenate([PROMPT, OUTPUT]), num_prompt=PROMPT.size, **kw)
    return run_sampler(backend, LOGITS[None], [spec]).logits[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_repetition_penalty_matches_transformers(backend: str) -> None:
    import torch
    from transformers import RepetitionPenaltyLogitsProcessor

    got = penalized(backend, repetition=1.7)
    ids = torch.from_numpy(np.concatenate([PROMPT, OUTPUT])[None])
    want = RepetitionPenaltyLogitsProcessor(1.7)(ids, torch.from_numpy(LOGITS[None]).double())[0].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert not np.allclose(got, LOGITS), "non-vacuity: the penalty changed something"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("presence, frequency", [(0.8, 0.0), (0.0, 0.5), (-0.4, 1.3)])
def test_presence_and_frequency_follow_openai_on_output_tokens_only(presence: float, frequency: float,
                                                                     backend: str) -> None:
    got = penalized(backend, presence=presence, frequency=frequency)
    want = LOGITS.astype(np.float64).copy()
    for t in range(V):  # mu[j] - c[j] * alpha_frequency - float(c[j] > 0) * alpha_presence
        c = int((OUTPUT == t).sum())
        want[t] -= c * frequency + (c > 0) * presence
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert np.bincount(OUTPUT).max() > 1, "non-vacuity: a token repeats in the output"
    only_prompt = sorted(set(PROMPT) - set(OUTPUT))
    assert only_prompt and np.array_equal(got[only_prompt], LOGITS[only_prompt]), "prompt tokens untouched"


def test_a_strong_repetition_penalty_changes_greedy_output_in_the_engine() -> None:
    llm = LLM("tiny-qwen3", max_model_len=128, num_blocks=32)
    plain = llm.generate("the the the the the", SamplingParams(temperature=0, max_tokens=16, ignore_eos=True))[0]
    hard = llm.generate("the the the the the", SamplingParams(temperature=0, max_tokens=16, ignore_eos=True,
                                                              repetition_penalty=50.0))[0]
    assert plain.token_ids != hard.token_ids
    assert len(set(hard.token_ids)) > len(set(plain.token_ids)), "fewer repeats under the penalty"


def test_bad_penalties_are_refused_by_name() -> None:
    for kw in ({"repetition_penalty": 0.0}, {"repetition_penalty": 1e-38}, {"repetition_penalty": 0.009},
               {"presence_penalty": 3.0}, {"frequency_penalty": "x"}):
        with pytest.raises(ConfigError, match=next(iter(kw))):
            SamplingParams(**kw)
    assert SamplingParams(repetition_penalty=0.01).repetition_penalty == 0.01, "non-vacuity: the floor itself is taken"
    spec = LLM("tiny-qwen3", max_model_len=64, num_blocks=16, speculative_model="[ngram]", num_speculative_tokens=2)
    with pytest.raises(RequestError, match="not supported with speculative decoding"):
        spec.generate("hi", SamplingParams(repetition_penalty=1.2))
