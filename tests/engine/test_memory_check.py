"""A KV pool that cannot fit is refused before anything is allocated (vt/engine/memory.py): one line with what
it needs, what is available and how many blocks would fit."""

from __future__ import annotations

import pytest

from vt import LLM
from vt.engine.memory import check_fits, kv_bytes_per_block
from vt.errors import ConfigError


def test_a_billion_blocks_are_refused_before_anything_is_allocated() -> None:
    with pytest.raises(ConfigError, match=r"num_blocks=1000000000: the KV cache needs .* available on this host; "
                                          r"at most \d+ blocks fit"):
        LLM("tiny-qwen3", max_model_len=128, num_blocks=10**9)
    assert LLM("tiny-qwen3", max_model_len=128, num_blocks=64).generate("Hi")[0].token_ids, "non-vacuous: 64 fit"


def test_the_boundary_is_exact_and_counts_the_weights() -> None:
    per, weights, available = 1000, 5000, 105_000
    check_fits(100, per, weights, available, "here")  # 100 blocks + the weights: exactly what is there
    with pytest.raises(ConfigError, match="at most 100 blocks fit"):
        check_fits(101, per, weights, available, "here")


def test_a_block_holds_k_and_v_of_every_layer_for_one_ranks_heads() -> None:
    class Cfg:
        num_hidden_layers, num_key_value_heads, head_dim = 28, 8, 128

    assert kv_bytes_per_block(Cfg, 16, 2) == 2 * 28 * 16 * 8 * 128 * 2  # 0.6B in bf16: 112 KiB a block
    assert kv_bytes_per_block(Cfg, 16, 2, tp=2) == kv_bytes_per_block(Cfg, 16, 2) // 2
