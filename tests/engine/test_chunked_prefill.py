"""Chunked prefill and mixed batches: each step computes at most max_num_batched_tokens tokens, decodes
first, then the next chunk of every unfinished prefill, then new requests; a prompt longer than the
budget is split across steps over the KV of its earlier chunks. Tokens, logprobs and prompt logprobs
are those of the unchunked run."""

from __future__ import annotations

import pytest

from vt import LLM, SamplingParams
from vt.engine.config import EngineConfig
from vt.engine.front.llm_engine import LLMEngine
from vt.errors import ConfigError

PROMPTS = [list(range(3, 3 + n)) for n in (90, 17, 200, 41, 5)]
SP = [SamplingParams(temperature=0 if i % 2 else 0.9, seed=i, max_tokens=12, ignore_eos=True, logprobs=2)
      for i in range(len(PROMPTS))]


def engine(budget: int, **kw) -> LLMEngine:
    return LLMEngine(EngineConfig(**({"model": "tiny-qwen3", "max_model_len": 256, "num_blocks": 128,
                                      "max_num_seqs": 4, "max_num_batched_tokens": budget} | kw)))


def drive(e: LLMEngine, plan: dict[int, list[int]]) -> tuple[list, list[dict]]:
    """Adds PROMPTS[i] at the steps plan names; returns the requests and each step's scheduler output."""
    reqs, steps, i = [], [], 0
    real = e.scheduler.schedule

    def spy():
        out = real()
        steps.append({"tokens": sum(out.num_scheduled_tokens.values()), "chunks": dict(out.prefill_chunks),
                      "decodes": [r for r in out.num_scheduled_tokens if r not in out.prefill_chunks]})
        return out

    e.scheduler.schedule = spy
    while i <= max(plan) or e.has_unfinished():
        for j in plan.get(i, []):
            reqs.append(e.add_request(PROMPTS[j], SP[j]))
        e.step()
        i += 1
    return reqs, steps


@pytest.fixture(scope="module")
def unchunked():
    reqs, _ = drive(engine(8192), {0: [0, 1], 2: [2, 3, 4]})
    return [(r.output_ids, r.logprobs) for r in reqs]


@pytest.mark.parametrize("budget", [16, 33, 64])
def test_chunked_runs_generate_what_the_unchunked_run_does(budget: int, unchunked) -> None:
    reqs, steps = drive(engine(budget), {0: [0, 1], 2: [2, 3, 4]})
    got = [(r.output_ids, r.logprobs) for r in reqs]
    assert [g[0] for g in got] == [u[0] for u in unchunked]
    for (_, lp), (_, want) in zip(got, unchunked):
        assert all(abs(a[t] - b[t]) < 1e-4 for a, b in zip(lp, want) for t in a)
    assert any(start > 0 for s in steps for start in s["chunks"].values()), "non-vacuity: prompts were split"
    assert all(s["tokens"] <= budget for s in steps), "no step computes more than the budget"
    assert any(s["tokens"] == budget for s in steps), "non-vacuity: steps filled the budget"


def test_decodes_go_first_and_are_never_starved_by_a_long_prompt() -> None:
    """A short request decodes from step 1 to its 12th token; a 200-token prompt arrives at step 3 and is
    prefilled in chunks meanwhile. The short request gets its token in every one of those steps."""
    reqs, steps = drive(engine(24), {0: [4], 3: [2]})
    short, long = reqs[0].id, reqs[1].id
    decoding = range(1, len(reqs[0].output_ids))
    assert all(short in steps[k]["decodes"] for k in decoding), "a decode skipped for a prefill chunk"
    mixed = [k for k in decoding if long in steps[k]["chunks"]]
    assert len(mixed) >= 3, f"non-vacuity: steps {mixed} mixed the decode with chunks of the long prompt"


def test_a_mixed_step_is_one_forward_and_one_sampler_launch() -> None:
    """A step with decodes and prefill chunks runs one forward over all their tokens (the decode rows first,
    as one-token chunks the decode kernel attends) and samples every row in one launch: the decode graph is
    never launched in a step that also prefills, and the tokens are the unchunked run's."""
    e = engine(24)
    forwards: list[tuple[str, int]] = []
    real_prefill, real_step = e.runner.decoder.prefill, e.runner.decoder.step_async
    real_sample = e.runner._sample_eager

    def prefill(seqs, all_rows=(), num_decode=0, feed=None):
        forwards.append(("prefill", num_decode))
        return real_prefill(seqs, all_rows, num_decode, feed)

    def step_async(inp, spec=False):
        forwards.append(("decode", 0))
        return real_step(inp, spec)

    samples: list[int] = []

    def sample(logits, rows, keep=None):
        samples.append(len(forwards))
        return real_sample(logits, rows, keep)

    e.runner.decoder.prefill, e.runner.decoder.step_async, e.runner._sample_eager = prefill, step_async, sample
    reqs, steps = drive(e, {0: [4], 3: [2]})
    mixed = [k for k, s in enumerate(steps) if s["decodes"] and s["chunks"]]
    assert len(mixed) >= 3, "non-vacuity: steps mixed decodes with chunks"
    mixed_forwards = [f for f in forwards if f[0] == "prefill" and f[1] > 0]
    assert len(mixed_forwards) == len(mixed), f"{len(mixed)} mixed steps, {len(mixed_forwards)} mixed forwards"
    assert len(forwards) == len(steps) - sum(1 for s in steps if not s["tokens"]), "one forward per step"
    assert len(samples) == sum(1 for f in forwards if f[0] == "prefill"), "one sampler launch per prefill forward"


def test_prompt_logprobs_come_chunk_by_chunk() -> None:
    sp = SamplingParams(temperature=0, max_tokens=2, prompt_logprobs=3)
    whole = LLM("tiny-qwen3", max_model_len=256, num_blocks=64).generate([PROMPTS[0]], sp)[0].prompt_logprobs
    chunked = LLM("tiny-qwen3", max_model_len=256, num_blocks=64, max_num_batched_tokens=16).generate(
        [PROMPTS[0]], sp)[0].prompt_logprobs
    assert len(PROMPTS[0]) > 16, "non-vacuity: the prompt is longer than the budget, so it is split"
    assert whole is not None and chunked is not None and len(chunked) == len(whole) == len(PROMPTS[0])
    assert whole[0] is None and chunked[0] is None
    for a, b in zip(whole[1:], chunked[1:]):
        assert a.keys() == b.keys() and all(abs(a[t].logprob - b[t].logprob) < 1e-4 for t in a)


def test_a_preempted_chunked_prefill_recomputes_to_the_same_tokens_and_prompt_logprobs() -> None:
    """A 200-token prompt asking for prompt logprobs arrives while a long request decodes in a small pool:
    it is preempted in the middle of its chunked prefill (before its first token), recomputed, and ends
    with the tokens and the 200 prompt logprobs of a run with room to spare."""
    long = [3 + (i * 7) % 400 for i in range(100)]
    sp = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    asks = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True, prompt_logprobs=1)

    def run(e: LLMEngine) -> tuple[list, list[tuple[int, int]]]:
        mid_prefill: list[tuple[int, int]] = []
        real = e.scheduler._preempt

        def preempt(req, out):
            if not req.output_ids:
                mid_prefill.append((req.num_computed, req.num_prefill))
            real(req, out)

        e.scheduler._preempt = preempt
        reqs, i = [e.add_request(long, sp)], 0
        while e.has_unfinished() or i <= 8:
            if i == 8:
                reqs.append(e.add_request(PROMPTS[2], asks))
            e.step()
            i += 1
        return reqs, mid_prefill

    tight, cut = run(engine(16, num_blocks=17))
    roomy, _ = run(engine(16))
    assert cut and all(0 < done < total for done, total in cut), f"non-vacuity: preempted mid-prefill {cut}"
    assert [r.output_ids for r in tight] == [r.output_ids for r in roomy]
    got, want = tight[1].prompt_logprobs, roomy[1].prompt_logprobs
    assert got is not None and want is not None and len(got) == len(want) == len(PROMPTS[2]) and got[0] is None
    assert all(a.keys() == b.keys() and all(abs(a[t] - b[t]) < 1e-4 for t in a) for a, b in zip(got[1:], want[1:]))


def test_a_one_token_prompt_gets_prompt_logprobs_of_none() -> None:
    out = LLM("tiny-qwen3", max_model_len=64, num_blocks=16).generate([[7]], SamplingParams(
        temperature=0, max_tokens=2, prompt_logprobs=2))[0]
    assert out.prompt_logprobs == [None] and len(out.token_ids) == 2


def test_the_budget_must_hold_every_running_requests_decode_tokens() -> None:
    with pytest.raises(ConfigError, match="max_num_batched_tokens"):
        EngineConfig(model="tiny-qwen3", max_model_len=256, num_blocks=64, max_num_seqs=8, max_num_batched_tokens=7)
    EngineConfig(model="tiny-qwen3", max_model_len=256, num_blocks=64, max_num_seqs=8, max_num_batched_tokens=8)


def test_speculation_still_needs_a_budget_for_a_whole_prompt() -> None:
    with pytest.raises(ConfigError, match="max_num_batched_tokens"):
        EngineConfig(model="tiny-qwen3", max_model_len=256, num_blocks=64, max_num_batched_tokens=64,
                     speculative_model="[ngram]", num_speculative_tokens=2)
