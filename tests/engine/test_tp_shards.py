"""Tensor parallelism's shards, no rank spawned: each rank's slices tile every checkpoint tensor (a replicated KV
head is the one its query heads read). Apart from test_tensor_parallel.py, whose TP runs take a minute; the
refusals of a model that cannot be split are in test_tp_refusals.py (their mutants need no checkpoint built)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="module")
def hf_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hf-tp")


def _model(name: str, hf_root: Path) -> str:
    if name.startswith("tiny-"):
        return name
    from tests.models.hf_checkpoints import make

    return str(make(name, hf_root))


@pytest.mark.parametrize("name, size", [("tiny-qwen3-moe", 2), ("qwen2", 2), ("qwen2-mqa", 2), ("tiny-qwen3", 4)])
def test_the_ranks_slices_tile_every_tensor(name: str, size: int, hf_root: Path) -> None:
    """Each rank reads its slice from the memory map: put back together along the split axis, the slices
    are the checkpoint's tensor (the vocabulary's padding past V is zeros); a replicated KV head is the one
    its rank's query heads read; everything else is whole on every rank."""
    from models.loader import load_checkpoint, resolve_model
    from models.shard import ShardedWeights
    from vt.parallel import Shard

    ckpt = load_checkpoint(resolve_model(_model(name, hf_root)))
    c, full = ckpt.config, ckpt.weights
    ranks = [ShardedWeights(full, c, Shard(r, size)) for r in range(size)]
    split = 0
    for key in full:
        want, parts = full[key], [w[key] for w in ranks]
        kv = any(p in key for p in (".k_proj.", ".v_proj."))
        if kv and c.num_key_value_heads < size:  # replicated: the KV head of the rank's first query head
            hd, group = c.head_dim, c.num_attention_heads // c.num_key_value_heads  # query heads per KV head
            for r, p in enumerate(parts):
                h = (r * c.num_attention_heads // size) // group
                np.testing.assert_array_equal(p, want[h * hd : (h + 1) * hd], err_msg=f"{key} rank {r}")
            continue
        if all(p.shape == want.shape for p in parts) and size > 1 and key not in ("model.embed_tokens.weight",
                                                                                   "lm_head.weight"):
            for p in parts:
                np.testing.assert_array_equal(p, want, err_msg=f"{key}: whole on every rank")
            continue
        axis = 1 if key.endswith(("o_proj.weight", "down_proj.weight")) else 0
        tiled = np.concatenate(parts, axis=axis)
        np.testing.assert_array_equal(np.take(tiled, range(want.shape[axis]), axis=axis), want, err_msg=key)
        assert not np.take(tiled, range(want.shape[axis], tiled.shape[axis]), axis=axis).any(), f"{key}: padding"
        split += 1
    assert split >= 4 * c.num_hidden_layers, f"non-vacuity: {split} tensors were split"
