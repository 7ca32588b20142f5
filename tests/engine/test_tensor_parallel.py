"""Tensor parallelism on the CPU, across real processes (torch.distributed, gloo): TP = 2 generates the
tokens TP = 1 does (float32, greedy), for dense, MoE, q/k/v-bias, tied-embedding and one-KV-head
checkpoints written by transformers; a dead worker fails the engine within a bounded time, by name; a
model that cannot be split is refused before any process starts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vt.engine.front.llm import LLM
from vt.engine.sample.params import SamplingParams

pytest.importorskip("torch.distributed")

PROMPTS = [{"prompt_token_ids": [5 + i, 17, 99, 3 * i + 1] * (3 + i)} for i in range(4)]
GREEDY = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True, logprobs=1)
KW = dict(max_model_len=128, num_blocks=64, max_num_batched_tokens=32)  # chunked prefills and mixed steps too


@pytest.fixture(scope="module")
def hf_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hf-tp")


def _generate(model: str, tp: int) -> tuple[list[list[int]], list[float]]:
    llm = LLM(model, tensor_parallel_size=tp, **KW)
    try:
        outs = llm.generate(PROMPTS, GREEDY)
    finally:
        llm.engine.close()
    return [o.outputs[0].token_ids for o in outs], [o.outputs[0].cumulative_logprob for o in outs]


def _model(name: str, hf_root: Path) -> str:
    if name.startswith("tiny-"):
        return name
    from tests.models.hf_checkpoints import make

    return str(make(name, hf_root))


@pytest.mark.parametrize("name", ["tiny-qwen3", "tiny-qwen3-moe", "qwen2", "llama3", "qwen2-mqa"])
def test_tp2_generates_the_tokens_tp1_does(name: str, hf_root: Path) -> None:
    model = _model(name, hf_root)
    one, lp_one = _generate(model, 1)
    two, lp_two = _generate(model, 2)
    assert two == one, "TP = 2 and TP = 1 generate the same greedy tokens"
    np.testing.assert_allclose(lp_two, lp_one, rtol=0, atol=1e-3)
    assert len({tuple(t) for t in one}) == len(PROMPTS), "non-vacuity: the prompts generate different tokens"


def test_tp4_replicates_the_kv_heads_and_generates_the_tokens_tp1_does() -> None:
    """tiny-qwen3 has 2 KV heads for 4 query heads: over 4 ranks each rank keeps the KV head its query head
    reads (ranks 0 and 1 head 0, ranks 2 and 3 head 1)."""
    one, _ = _generate("tiny-qwen3", 1)
    four, _ = _generate("tiny-qwen3", 4)
    assert four == one, "TP = 4 and TP = 1 generate the same greedy tokens"
