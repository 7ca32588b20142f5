"""OpenAI's `logit_bias` and vLLM's `allowed_token_ids`, applied by the sampler kernel itself (one launch, on the
device: the NumPy twin on the CPU, the CUDA kernel in the GPU lane) in vLLM's order: allowed tokens, then the
bias, both before penalties and the filters. Logprobs stay the model's (the raw log-softmax)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine.sampler_rig import BACKENDS, run_sampler
from vt import LLM, SamplingParams
from vt.engine.sample.sampler import RowSpec
from vt.errors import ConfigError, RequestError

V = 64
LOGITS = (np.random.default_rng(11).standard_normal(V) * 2).astype(np.float32)
ORDER = np.argsort(-LOGITS, kind="stable")  # token ids, most likely first
LOW = int(ORDER[-3])  # an unlikely token
NUM_DRAWS = 2000


def draws(backend: str, **kw) -> np.ndarray:
    """NUM_DRAWS draws of one row: the same logits in every row, each row its own output position."""
    specs = [RowSpec(**kw, seed=5, counter=i) for i in range(NUM_DRAWS)]
    return run_sampler(backend, np.tile(LOGITS, (NUM_DRAWS, 1)), specs).ids


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_bias_is_added_before_the_filters(backend: str) -> None:
    """top-k 1 keeps the largest biased logit: an unlikely token raised past the top is drawn every time.
    Filtered first and biased after, it would never be drawn."""
    lift = float(LOGITS[ORDER[0]] - LOGITS[LOW]) + 1.0
    ids = draws(backend, temperature=1.0, top_k=1, bias=((LOW, lift),))
    assert set(ids.tolist()) == {LOW}
    plain = draws(backend, temperature=1.0, top_k=1)
    assert set(plain.tolist()) == {int(ORDER[0])}, "non-vacuity: without the bias top-k 1 draws the top token"


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_follows_the_bias_both_ways(backend: str) -> None:
    top, second = int(ORDER[0]), int(ORDER[1])
    specs = [RowSpec(0.0, bias=((top, -100.0),)), RowSpec(0.0, bias=((LOW, 100.0),)), RowSpec(0.0)]
    ids = run_sampler(backend, np.tile(LOGITS, (3, 1)), specs).ids.tolist()
    assert ids == [second, LOW, top], "-100 takes the top token out, +100 puts an unlikely one on top"


@pytest.mark.parametrize("backend", BACKENDS)
def test_allowed_token_ids_are_the_whole_support(backend: str) -> None:
    """Only the allowed tokens are drawn, every one of them (a bias on one of them counts)."""
    allowed = sorted({int(ORDER[0]), LOW, int(ORDER[-1]), int(ORDER[V // 2])})
    bias = tuple((t, 3.0 if t == int(ORDER[-1]) else 0.0) for t in allowed)
    ids = draws(backend, temperature=1.0, bias=bias, allowed=True)
    assert set(ids.tolist()) == set(allowed), "draws from the allowed tokens, and from all of them"
    free = draws(backend, temperature=1.0)
    assert not set(free.tolist()) <= set(allowed), "non-vacuity: unrestricted draws leave that set"


@pytest.mark.parametrize("backend", BACKENDS)
def test_logprobs_are_the_models_whatever_the_bias(backend: str) -> None:
    """The sampled token's logprob and the top-n are the raw log-softmax (vLLM's default), also for a token the
    bias made likely and for a forced row (prompt logprobs), which the bias does not touch."""
    raw = LOGITS.astype(np.float64) - np.log(np.exp(LOGITS.astype(np.float64)).sum())
    specs = [RowSpec(0.0, num_logprobs=3, bias=((LOW, 100.0),)),
             RowSpec(1.0, num_logprobs=3, bias=((LOW, 5.0), (int(ORDER[2]), 1.0)), allowed=True, seed=3),
             RowSpec(0.0, num_logprobs=3, bias=((LOW, 100.0),), forced=int(ORDER[1]))]
    out = run_sampler(backend, np.tile(LOGITS, (3, 1)), specs)
    assert out.ids[0] == LOW and out.ids[2] == ORDER[1], "non-vacuity: the bias moved row 0's draw"
    for i in range(3):
        tok = int(out.lp_ids[i, -1])
        assert tok == out.ids[i]
        np.testing.assert_allclose(out.lp_vals[i, -1], raw[tok], atol=1e-5)
        assert out.lp_ids[i, :2].tolist() == ORDER[:2].tolist()
        np.testing.assert_allclose(out.lp_vals[i, :2], raw[ORDER[:2]], atol=1e-5)


@pytest.mark.gpu
def test_the_cuda_sampler_biases_as_the_numpy_reference_at_a_real_vocabulary() -> None:
    """16 rows of a 151,936-token vocabulary: biases of every sign, allowed sets of 1 to 1,024 tokens, with
    Qwen3's filters, penalties and logprobs: the same tokens and logprobs on both backends."""
    Vr, rng = 151_936, np.random.default_rng(9)
    logits = (rng.standard_normal((16, Vr)) * 3).astype(np.float32)
    hist = rng.integers(0, Vr, 200)
    specs = []
    for i in range(16):
        n = [1, 7, 300, 1024][i % 4]
        toks = rng.choice(Vr, n, replace=False)
        bias = tuple((int(t), float(rng.uniform(-100, 100))) for t in toks)
        specs.append(RowSpec(temperature=[0.0, 0.7][i % 2], top_k=20 * (i % 3 == 0), top_p=0.95 if i % 3 else 1.0,
                             seed=50 + i, counter=i, bias=bias, allowed=i % 4 in (0, 1), num_logprobs=4,
                             history=hist if i % 5 == 0 else None, num_prompt=150,
                             repetition=1.2 if i % 5 == 0 else 1.0))
    cpu, gpu = run_sampler("cpu", logits, specs), run_sampler("cuda", logits, specs)
    same = cpu.ids == gpu.ids
    assert same.sum() >= 15, f"rows that differ: {np.flatnonzero(~same).tolist()}"
    written = [0, 1, 2, -1]  # num_logprobs=4: the top 3 and the sampled token's slot (the rest is never written)
    np.testing.assert_allclose(gpu.lp_vals[same][:, written], cpu.lp_vals[same][:, written], atol=1e-4)
    allowed_rows = [i for i, s in enumerate(specs) if s.allowed]
    assert all(int(gpu.ids[i]) in {t for t, _ in specs[i].bias} for i in allowed_rows)


# ---- through the engine ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM("tiny-qwen3", max_model_len=128, num_blocks=64)


def test_a_greedy_request_with_a_large_bias_emits_that_token_every_step(llm: LLM) -> None:
    """The first token comes from the prefill's sampler, the rest from the decode graph's: both biased."""
    plain = llm.generate("Hello there", SamplingParams(temperature=0, max_tokens=6))[0].outputs[0].token_ids
    tok = next(t for t in range(100, 200) if t not in plain)
    out = llm.generate("Hello there", SamplingParams(temperature=0, max_tokens=6, logit_bias={tok: 100.0}))
    assert out[0].outputs[0].token_ids == [tok] * 6
    assert plain != [tok] * 6, "non-vacuity"


def test_allowed_token_ids_bound_every_sampled_token(llm: LLM) -> None:
    """A bias on a token that is not allowed changes nothing: it is still never drawn."""
    allowed = [7, 42, 99, 123]
    sp = SamplingParams(temperature=1.0, max_tokens=24, seed=4, allowed_token_ids=allowed, ignore_eos=True,
                        logit_bias={5: 100.0, 42: 1.0})
    toks = llm.generate("Once upon a time", sp)[0].outputs[0].token_ids
    assert set(toks) <= set(allowed) and len(set(toks)) > 1, toks


def test_speculation_keeps_the_bias() -> None:
    """Verified positions sample with the request's bias too: greedy output equals the plain engine's."""
    sp = SamplingParams(temperature=0, max_tokens=12, logit_bias={371: 0.1, 51: 0.3, 23: -50.0})
    plain = LLM("tiny-qwen3", max_model_len=128, num_blocks=64)
    want = plain.generate("a b a b a b", sp)[0].outputs[0].token_ids
    spec = LLM("tiny-qwen3", max_model_len=128, num_blocks=64, speculative_model="[ngram]", num_speculative_tokens=3)
    assert spec.generate("a b a b a b", sp)[0].outputs[0].token_ids == want
    unbiased = plain.generate("a b a b a b", SamplingParams(temperature=0, max_tokens=12))[0].outputs[0].token_ids
    assert unbiased != want, "non-vacuity: the bias changes the output"


@pytest.mark.parametrize("kw", [{"logit_bias": {5: float("nan")}}, {"logit_bias": {-1: 1.0}}, {"logit_bias": [5]},
                                {"logit_bias": {5: 1e39}}, {"logit_bias": {5: -100.5}},
                                {"allowed_token_ids": []}, {"allowed_token_ids": [True]},
                                {"allowed_token_ids": list(range(1025))}],
                         ids=["nan", "negative-id", "not-a-dict", "past-float32", "past-openai-range", "empty", "bool",
                              "too-many"])
def test_bad_bias_parameters_are_refused_by_name(kw: dict) -> None:
    with pytest.raises(ConfigError, match=next(iter(kw))):
        SamplingParams(**kw)


def test_a_bias_outside_the_vocabulary_is_refused_and_queues_nothing(llm: LLM) -> None:
    for kw in ({"logit_bias": {10**6: 1.0}}, {"allowed_token_ids": [3, 10**6]}):
        with pytest.raises(RequestError, match=f"{next(iter(kw))}.*outside the vocabulary"):
            llm.generate("Hi", SamplingParams(max_tokens=2, **kw))
    assert not llm.engine.requests and not llm.engine.scheduler.waiting
