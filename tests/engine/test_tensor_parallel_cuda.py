"""Tensor parallelism on two GPUs (NCCL through CuPy): the GPU lane runs these on a machine with two
H200s. In bf16 the first tokens of TP = 2 equal TP = 1's and the logit difference is reported; every
rank's decode capture after a drain allocates nothing."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from seams.ranks import first_failure, run_ranks

pytestmark = pytest.mark.gpu


def _gpus() -> int:
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # noqa: BLE001 - no CuPy or no driver: no GPU
        return 0


def _first_logprob(out) -> float:
    c = out.outputs[0]
    return float(c.logprobs[0][c.token_ids[0]].logprob)


needs_two = pytest.mark.skipif(_gpus() < 2, reason="needs two CUDA GPUs")


@needs_two
def test_tp2_on_two_gpus_generates_the_first_tokens_tp1_does_in_bf16() -> None:
    from vt.engine.front.llm import LLM
    from vt.engine.sample.params import SamplingParams

    prompts = [{"prompt_token_ids": [5 + i, 17, 99, 3 * i + 1] * 4} for i in range(4)]
    sp = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True, logprobs=1)
    outs = {}
    for tp in (1, 2):
        llm = LLM("tiny-qwen3", backend="cuda", dtype="bfloat16", tensor_parallel_size=tp, max_model_len=256,
                  num_blocks=128)
        try:
            outs[tp] = llm.generate(prompts, sp)
        finally:
            llm.engine.close()
    firsts = [(a.outputs[0].token_ids[0], b.outputs[0].token_ids[0]) for a, b in zip(outs[1], outs[2])]
    diff = max(abs(_first_logprob(a) - _first_logprob(b)) for a, b in zip(outs[1], outs[2]))
    print(f"TP=2 vs TP=1, bf16: first tokens {firsts}; largest first-token logprob difference {diff:.2e}")
    assert all(a == b for a, b in firsts), "the first tokens agree"
    assert np.isfinite(diff)


@needs_two
def test_the_decode_capture_allocates_nothing_on_every_gpu_rank() -> None:
    from vt.parallel import host_store

    store = host_store(2, 60.0)  # held here until both ranks are done
    results = run_ranks([[sys.executable, "-m", "seams.tp", "tiny-qwen3", str(r), "2", str(store.port), "cuda"]
                         for r in range(2)], timeout=240)
    assert all(r.ok for r in results), f"a rank failed: {first_failure(results)}"
    for r in (json.loads(res.stdout.strip().splitlines()[-1]) for res in results):
        assert r["first_collectives"]["failed"] is None, r
        assert r["freed"] > 0 and r["captured"] and r["allocs_in_step"] > 0, r
        assert r["allocs_in_capture"] == 0, r
