"""Tensor parallelism on the CPU, across real processes (torch.distributed, gloo): TP = 2 generates the
tokens TP = 1 does (float32, greedy), for dense, MoE, q/k/v-bias, tied-embedding and one-KV-head
checkpoints written by transformers; a dead worker fails the engine within a bounded time, by name; a
model that cannot be split is refused before any process starts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.engine.tp_rig import PROMPTS
from tests.engine.tp_rig import generate as _generate

pytest.importorskip("torch.distributed")


@pytest.fixture(scope="module")
def hf_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hf-tp")


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
