"""An engine error never takes down other requests silently; a fatal one prints the traceback and
the requests in flight."""

from __future__ import annotations

import numpy as np
import pytest

from seams.lanes import is_bypass_lane
from vt import LLM, SamplingParams


def test_a_request_with_non_finite_logits_fails_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """After its prefill, one request's KV blocks are poisoned with NaN: at its next decode step its logits
    are NaN (the device sampler returns -1 for that row) and it fails; its neighbours, in the same graph
    replay, never read those blocks and finish."""
    llm = LLM(model="tiny-qwen3", max_model_len=128, num_blocks=32, max_num_seqs=4)
    runner = llm.engine.runner
    real = runner._prefill
    victim = "req-1"

    def poisoned(reqs, out, *rest):
        res = real(reqs, out, *rest)
        if victim in [r.req_id for r in reqs]:
            b = runner.backend
            for cache in runner.kv.k:
                host = b.copy_d2h(cache)
                host[runner.batch.blocks(victim)] = np.nan
                b.copy_h2d(cache, host)
        return res

    monkeypatch.setattr(runner, "_prefill", poisoned)
    outs = llm.generate(["one", "two", "three"], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))
    assert outs[1].finish_reason == "error" and "non-finite" in (outs[1].error or "")
    assert len(outs[1].token_ids) == 1, "it failed at its first decode step"
    assert [o.finish_reason for o in (outs[0], outs[2])] == ["length", "length"]
    assert all(len(o.token_ids) == 6 for o in (outs[0], outs[2]))
    assert runner.decoder.num_replays > 0 or is_bypass_lane(), "non-vacuity: the decode steps were graph replays"
    assert llm.engine.kv_manager.num_free == llm.engine.cfg.num_blocks, "the failed request's blocks came back"


def test_a_fatal_error_prints_the_traceback_and_the_requests_in_flight(monkeypatch, capsys) -> None:
    # the CPU, pinned: `auto` picks CUDA on a GPU machine, whose asynchronous steps do not call runner.execute
    llm = LLM(model="tiny-qwen3", backend="cpu", max_model_len=128, num_blocks=32, max_num_seqs=4)
    e = llm.engine
    a = e.add_request("alpha", SamplingParams(temperature=0, max_tokens=4))
    b = e.add_request("beta", SamplingParams(temperature=0, max_tokens=4))

    def boom(out):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(e.runner, "execute", boom)
    with pytest.raises(RuntimeError, match="kernel exploded"):
        e.step()
    err = capsys.readouterr().err
    assert "Traceback" in err and "kernel exploded" in err
    assert "requests in flight" in err and a.id in err and b.id in err


def test_a_fatal_step_error_leaves_the_offline_llm_dead_with_its_cause_never_stuck(monkeypatch) -> None:
    """vLLM's rule: an engine step that raised leaves the engine's state unknown (its requests still queued), so
    the engine is dead: the call raises EngineDeadError naming the cause, and so does every later call, as the
    engine-process LLM does. (The failed requests used to stay queued: each later generate stepped them again
    into the same raw IndexError, or served them beside its own.)"""
    from tests.helpers import ends_within
    from vt.errors import EngineDeadError

    llm = LLM(model="tiny-qwen3", backend="cpu", max_model_len=128, num_blocks=32, max_num_seqs=4)
    sp = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    assert len(llm.generate("alpha", sp)[0].token_ids) == 4, "non-vacuity: it served before the fault"

    def boom(out):
        raise IndexError("index 600 is out of bounds for axis 1 with size 512")

    monkeypatch.setattr(llm.engine.runner, "execute", boom)
    with pytest.raises(EngineDeadError, match="fatal error: IndexError: index 600"):
        llm.generate(["beta", "gamma"], sp)
    monkeypatch.undo()  # the fault is gone; what it left behind is not known (stepped again, the two spin unsampled)
    for call in (lambda: llm.generate("delta", sp), llm.reset_prefix_cache):
        box = ends_within(call, 10)
        assert isinstance(box.get("error"), EngineDeadError) and "IndexError: index 600" in str(box["error"]), box


def _poison_token(llm: LLM, token: int) -> None:
    """Make one token's embedding NaN: any request that reads it produces NaN logits and KV."""
    w = llm.engine.model.w["embed"]
    row = w.view((w.shape[1],), offset=token * w.shape[1] * 4)
    llm.engine.backend.copy_h2d(row, np.full(w.shape[1], np.nan, np.float32))


@pytest.mark.parametrize("spec", [False, True], ids=["plain", "speculative"])
def test_a_failed_requests_garbage_kv_never_reaches_its_neighbours(spec: bool) -> None:
    """A fails with NaN KV; B then grows into A's recycled blocks (and, with speculation, shares the
    trash block A's padding tokens wrote). B must finish exactly as it would alone."""
    kw = dict(model="tiny-qwen3", max_model_len=64, num_blocks=4, max_num_seqs=2)
    if spec:  # the draft's KV draws on the same pool: twice the blocks for the same squeeze
        kw |= dict(speculative_model="tiny-qwen3-draft", num_speculative_tokens=4, num_blocks=8)
    clean = LLM(**kw).generate([[5, 6, 7, 8]], SamplingParams(temperature=0, max_tokens=40, ignore_eos=True))[0]
    llm = LLM(**kw)
    _poison_token(llm, 99)
    outs = llm.generate([[99] + list(range(10, 65)), [5, 6, 7, 8]],
                        SamplingParams(temperature=0, max_tokens=40, ignore_eos=True))
    assert outs[0].finish_reason == "error", "non-vacuity: the poisoned request really failed"
    assert outs[1].finish_reason == "length" and outs[1].token_ids == clean.token_ids


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("filters", ["checkpoint", "none"], ids=["checkpoint-filters", "no-filters"])
def test_a_penalty_that_overflows_its_logits_fails_its_request_alone(filters: str, backend: str) -> None:
    """repetition_penalty=1e-39 divides a positive logit of the history past float32's range: its mass is NaN (the
    API refuses a penalty under 0.01 since session 33, so it is set here past that check; the guard stays for a
    model's own non-finite logits). That request fails by name; its neighbour, in the same steps, finishes. With
    the checkpoint's top-k / top-p (its generation config) and with none: the sampler's two draws. On CUDA the
    prefill's one-block draw fails the row, and the decode graph's split sampler would at the next step (the H200
    showed it for the split guard: mutated alone, the request still failed by name)."""
    llm = LLM(model="tiny-qwen3", max_model_len=128, num_blocks=32, max_num_seqs=4, backend=backend)
    prompt = {"prompt_token_ids": list(range(3, 40))}  # a long history: some token of it has a positive logit
    # every field given: the LLM copies (and so checks again) params that leave one unset
    chosen = llm.get_default_sampling_params() if filters == "checkpoint" else SamplingParams(top_k=0, top_p=1.0,
                                                                                               min_p=0.0)
    assert filters == "none" or chosen.top_k > 0, "non-vacuity: the checkpoint's generation config has a top-k"
    given = dict(temperature=1.0, seed=1, max_tokens=6, ignore_eos=True, top_k=chosen.top_k, top_p=chosen.top_p,
                 min_p=chosen.min_p)
    params = [SamplingParams(**given, repetition_penalty=1.2),
              SamplingParams(**given | {"temperature": 0}, repetition_penalty=1.0)]
    params[0].repetition_penalty = 1e-39  # past the API's range check, as a model's overflowing logit would be
    try:
        outs = llm.generate([prompt, prompt], params)
    except Exception as e:  # noqa: BLE001 - one request's parameters may fail it, never the engine
        pytest.fail(f"one request's overflowing penalty took the engine down: {e!r}")
    assert outs[0].outputs[0].finish_reason == "error" and "non-finite" in (outs[0].error or ""), outs[0].error
    assert outs[1].outputs[0].finish_reason == "length" and len(outs[1].outputs[0].token_ids) == 6
