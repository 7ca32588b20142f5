"""Tensor parallelism's refusals, no rank spawned: a model that cannot be split, or a size out of range, is
refused by name before any process starts. Apart from test_tp_shards.py, whose slicing tests build checkpoints
with transformers that these mutants need not."""

from __future__ import annotations

import pytest

from vt.engine.front.llm import LLM
from vt.errors import ConfigError

KW = dict(max_model_len=128, num_blocks=64, max_num_batched_tokens=32)


def test_a_model_that_cannot_be_split_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="num_attention_heads=4 is not divisible"):
        LLM("tiny-qwen3", tensor_parallel_size=3, **KW)
    with pytest.raises(ConfigError, match=r"tensor_parallel_size=9: must be an int in \[1, 8\]"):
        LLM("tiny-qwen3", tensor_parallel_size=9, **KW)


def test_a_model_the_backend_refuses_is_refused_before_any_rank_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend's own refusal (the CUDA backend's head dims) comes from rank 0 before the workers start, not from a
    worker that died of it while rank 0 waited for the group."""
    from backends.cpu import CpuBackend
    from vt.engine.worker import tp
    from vt.errors import CheckpointError, VtError

    def refuse(cls, config) -> None:
        raise CheckpointError(f"refused head_dim {config.head_dim}")

    started: list = []

    def workers(*a, **kw):
        started.append(a)
        raise ConfigError("the test stops the workers here")

    monkeypatch.setattr(CpuBackend, "check_model", classmethod(refuse))
    monkeypatch.setattr(tp, "Workers", workers)
    with pytest.raises(VtError) as refused:
        LLM("tiny-qwen3", tensor_parallel_size=2, **KW)
    assert not started, "workers started before the backend's check of the model"
    assert "refused head_dim 16" in str(refused.value)
