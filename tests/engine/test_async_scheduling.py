"""Async scheduling (vLLM's --async-scheduling): step N+1 (a decode step or a mixed one) is scheduled and launched
while step N runs, its decode rows' input tokens read on the device from the ids step N sampled (by request slot,
never by batch row), and the update step of N (stops, detokenization) overlaps it. Outputs equal the synchronous
engine's token for token, with stop strings, EOS, n > 1, logprobs, min_tokens, preemption and aborts; no race under
the stream simulator's schedules; most steps overlap, mixed ones too."""

from __future__ import annotations

import pytest

from backends.streams import in_order, seeded, side_streams_late
from vt import LLM, SamplingParams
from vt.errors import ConfigError, StreamRace

KW = dict(model="tiny-qwen3", max_model_len=160, max_num_seqs=8)
PROMPTS = [[5 + i, 17, 99, 3 * i + 1] * (2 + i % 3) for i in range(10)]


def mixed_params() -> list[SamplingParams]:
    """Every request ends at another step (rows condense under the steps in flight), some on a stop string or
    EOS, some sampled with seeds, one with logprobs, one held off EOS by min_tokens."""
    return [SamplingParams(max_tokens=5 + 3 * i, temperature=0.0 if i % 2 else 0.9, top_p=0.9, seed=i,
                           ignore_eos=i % 3 == 0, stop=[" the"] if i == 4 else [], logprobs=2 if i == 5 else None,
                           min_tokens=4 if i == 7 else 0) for i in range(len(PROMPTS))]


def outputs(llm: LLM, params: list[SamplingParams], prompts: list[list[int]] = PROMPTS) -> list[tuple]:
    res = llm.generate([{"prompt_token_ids": p} for p in prompts], params)
    return [(c.token_ids, c.text, c.finish_reason, c.logprobs and [sorted(d) for d in c.logprobs])
            for o in res for c in o.outputs]


@pytest.fixture(scope="module")
def sync_mixed() -> list[tuple]:
    return outputs(LLM(**KW, num_blocks=128), mixed_params())


def test_async_outputs_equal_the_synchronous_engines(sync_mixed) -> None:
    llm = LLM(**KW, num_blocks=128, async_scheduling=True)
    assert outputs(llm, mixed_params()) == sync_mixed
    e = llm.engine
    assert e.num_overlapped > e.num_steps // 2, (
        f"non-vacuity: {e.num_overlapped} of {e.num_steps} steps launched while the one before ran")
    assert e.kv_manager.num_used == 0 and not e.requests, "every block back, nothing left in flight"


def test_n_samples_and_preemption_under_async_scheduling() -> None:
    """n = 3 samples and a pool too small for all requests at once (preemption, recompute): same tokens."""
    params = [SamplingParams(n=3, max_tokens=40, temperature=0.8, seed=s, ignore_eos=True) for s in range(4)]
    prompts = [{"prompt_token_ids": p} for p in PROMPTS[:4]]
    want = LLM(**KW, num_blocks=24).generate(prompts, params)
    got = LLM(**KW, num_blocks=24, async_scheduling=True).generate(prompts, params)
    assert [[c.token_ids for c in o.outputs] for o in got] == [[c.token_ids for c in o.outputs] for o in want]
    assert sum(o.num_preemptions for o in got) > 0, "non-vacuity: the pool was tight enough to preempt"


def test_an_abort_while_a_step_is_in_flight_drops_its_token_and_frees_its_blocks() -> None:
    sp = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)
    sync = LLM(**KW, num_blocks=128).engine
    e = LLM(**KW, num_blocks=128, async_scheduling=True).engine
    reqs = {}
    for eng in (sync, e):
        reqs[eng] = [eng.add_request(PROMPTS[i], sp) for i in range(3)]
        for _ in range(6):
            eng.step()
    assert e._inflight is not None, "non-vacuity: a step is in flight when the abort comes"
    victim = reqs[e][1]
    held = len(victim.output_ids)
    e.abort(victim.id)
    sync.abort(reqs[sync][1].id)
    for eng in (sync, e):
        while eng.has_unfinished():
            eng.step()
    assert len(victim.output_ids) == held and victim.finish_reason == "abort"
    assert [r.output_ids for r in reqs[e]][::2] == [r.output_ids for r in reqs[sync]][::2]
    assert e.kv_manager.num_used == 0


def test_an_id_reused_while_its_aborted_request_is_in_flight_gets_none_of_its_tokens() -> None:
    """A request aborted while a step samples for it, its id at once given to a new request: the new one's tokens
    are its own (as alone), never the aborted one's in-flight token."""
    sp = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    alone = LLM(**KW, num_blocks=128).engine
    want = alone.add_request(PROMPTS[1], sp, request_id="x")
    while alone.has_unfinished():
        alone.step()
    e = LLM(**KW, num_blocks=128, async_scheduling=True).engine
    e.add_request(PROMPTS[0], sp, request_id="y")
    e.add_request(PROMPTS[2], sp, request_id="x")
    for _ in range(4):
        e.step()
    assert e._inflight is not None and "x" in e._inflight[0].num_scheduled_tokens, (
        "non-vacuity: a step that samples for the first x is in flight when it is aborted")
    e.abort("x")
    new = e.add_request(PROMPTS[1], sp, request_id="x")
    while e.has_unfinished():
        e.step()
    assert new.output_ids == want.output_ids, "the new x's tokens are its own"
    assert e.kv_manager.num_used == 0 and not e._left_inflight


POLICIES = {"in order": lambda s: in_order, "side streams late": side_streams_late,
            "seeded 5": lambda s: seeded(5, primary=s)}


@pytest.mark.parametrize("policy", list(POLICIES))
def test_async_scheduling_is_race_free_under_every_schedule(policy: str, sync_mixed) -> None:
    """Step N+1's sampler writes the buffers step N's ids are still being copied out of, unless it waits for that
    copy; its input tokens are step N's, read after N's sampler wrote them."""
    llm = LLM(**KW, num_blocks=128, async_scheduling=True)
    runner = llm.engine.runner
    order = runner.backend.simulate_streams(POLICIES[policy](runner.stream))
    try:
        got = outputs(llm, mixed_params())
    except StreamRace as race:
        pytest.fail(f"a race under async scheduling: {race}")
    assert got == sync_mixed
    assert order.done.get(runner.decoder.readback.stream.id, 0) > 0 and llm.engine.num_overlapped > 0, (
        "non-vacuity: copies ran on the read-back stream while steps overlapped")


# Few rows and a small token budget: requests join while others decode, and long prompts arrive in chunks, so most
# steps are mixed (decode rows and prefill chunks in one forward) and launched while the step before runs.
MIXED_KW = dict(KW, max_num_seqs=4, max_num_batched_tokens=16, num_blocks=128)
LONG_PROMPTS = [[7 + i, 40, 3 * i + 2, 11] * (3 + 2 * (i % 4)) for i in range(9)]


def staggered_params() -> list[SamplingParams]:
    return [SamplingParams(max_tokens=3 + 4 * (i % 3), temperature=0.0 if i % 2 else 0.8, top_k=40, seed=i,
                           ignore_eos=i % 3 != 1, stop=[" the"] if i == 4 else [], logprobs=1 if i == 6 else None,
                           n=2 if i == 5 else 1) for i in range(len(LONG_PROMPTS))]


@pytest.fixture(scope="module")
def sync_staggered() -> list[tuple]:
    return outputs(LLM(**MIXED_KW), staggered_params(), LONG_PROMPTS)


def test_mixed_steps_overlap_their_decode_rows_reading_tokens_on_the_device(sync_staggered) -> None:
    """A mixed step launched while the step before runs: its decode rows' last tokens (sampled by a decode step, or
    by the prefill that ended their prompt) are read on the device, by request slot; same tokens as synchronous."""
    llm = LLM(**MIXED_KW, async_scheduling=True)
    assert outputs(llm, staggered_params(), LONG_PROMPTS) == sync_staggered
    e = llm.engine
    assert e.runner.num_fed_mixed >= 5, (
        f"non-vacuity: {e.runner.num_fed_mixed} mixed steps read a decode row's token the host did not hold")
    assert e.num_overlapped > 0.8 * e.num_steps, f"{e.num_overlapped} of {e.num_steps} steps overlapped"
    assert e.kv_manager.num_used == 0 and not e.requests, "every block back, nothing left in flight"


@pytest.mark.parametrize("policy", list(POLICIES))
def test_overlapped_mixed_steps_are_race_free_under_every_schedule(policy: str, sync_staggered) -> None:
    """The prefill sampler's ids kept at their request slots before the next step's forward reads them; its read-
    back done before the next prefill sampler writes the same outputs."""
    llm = LLM(**MIXED_KW, async_scheduling=True)
    runner = llm.engine.runner
    runner.backend.simulate_streams(POLICIES[policy](runner.stream))
    try:
        got = outputs(llm, staggered_params(), LONG_PROMPTS)
    except StreamRace as race:
        pytest.fail(f"a race under async scheduling: {race}")
    assert got == sync_staggered
    assert runner.num_fed_mixed > 0, "non-vacuity: mixed steps fed decode rows on the device"


@pytest.mark.parametrize("kw", [{"speculative_model": "[ngram]", "num_speculative_tokens": 2},
                                {"tensor_parallel_size": 2}, {"async_scheduling": "yes"}],
                         ids=["speculation", "tensor-parallel", "not-a-bool"])
def test_what_async_scheduling_does_not_support_is_refused_by_name(kw: dict) -> None:
    from vt.engine.config import EngineConfig

    with pytest.raises(ConfigError, match="async_scheduling"):
        EngineConfig(**{**KW, "num_blocks": 64, "async_scheduling": True, **kw})


@pytest.mark.parametrize("kw, expect", [({"backend": "cuda"}, True), ({"backend": "cpu"}, False),
                                        ({"backend": "cuda", "speculative_model": "[ngram]",
                                          "num_speculative_tokens": 2}, False),
                                        ({"backend": "cuda", "tensor_parallel_size": 2}, False),
                                        ({"backend": "cuda", "async_scheduling": False}, False),
                                        ({"backend": "cpu", "async_scheduling": True}, True)],
                         ids=["cuda", "cpu", "cuda-speculating", "cuda-tp2", "cuda-asked-off", "cpu-asked-on"])
def test_async_scheduling_is_on_by_default_where_the_gpu_has_something_to_overlap(kw: dict, expect: bool) -> None:
    """Unset, it is on for CUDA where it applies (the host's update runs while the GPU computes the next step) and
    off on the CPU (its steps are the host's own work); an explicit choice is kept."""
    from vt.engine.config import EngineConfig

    assert EngineConfig(**{**KW, "num_blocks": 64, **kw}).async_scheduling is expect


@pytest.mark.gpu
def test_on_the_gpu_async_outputs_equal_the_synchronous_engines() -> None:
    """On CUDA the next step really runs beside the host's update: same tokens, most steps overlapped."""
    cuda = dict(KW, backend="cuda", num_blocks=128)
    want = outputs(LLM(**cuda), mixed_params())
    llm = LLM(**cuda, async_scheduling=True)
    assert outputs(llm, mixed_params()) == want
    assert llm.engine.num_overlapped > llm.engine.num_steps // 2


@pytest.mark.gpu
def test_on_the_gpu_overlapped_mixed_steps_equal_the_synchronous_engines() -> None:
    """On CUDA: the prefill sampler's kept ids and the mixed steps' device-fed decode rows (piecewise buckets), the
    same tokens as synchronous."""
    cuda = dict(MIXED_KW, backend="cuda")
    want = outputs(LLM(**cuda), staggered_params(), LONG_PROMPTS)
    llm = LLM(**cuda, async_scheduling=True)
    assert outputs(llm, staggered_params(), LONG_PROMPTS) == want
    assert llm.engine.runner.num_fed_mixed >= 5, "non-vacuity: mixed steps fed decode rows on the device"
