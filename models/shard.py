"""A rank's slice of a checkpoint, for tensor parallelism: the same HF files, read slice by slice.

The decoder is built from a `ShardedCheckpoint` as from any checkpoint: its config counts the rank's
heads and intermediate width, and its weights are the rank's slices (Megatron's layout): q/k/v and
gate/up split by output rows (column parallel), o and down by input columns (row parallel, summed by an
all-reduce), every expert's width split alike, the router and norms whole, the embedding and LM head
split by vocabulary rows (ceil(V / N) each, the last padded with zeros). KV heads are split when there
are at least as many as ranks, else each rank keeps the one its query heads read. A slice of the memory
map is all that is copied.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from vt.errors import ConfigError
from vt.parallel import Shard

F32 = np.float32


def check_divisible(c: Any, size: int) -> None:
    """Refuses, naming the field, a model that cannot be split over `size` ranks."""
    need = {"num_attention_heads": c.num_attention_heads}
    if any(not c.is_sparse_layer(i) for i in range(c.num_hidden_layers)):  # a dense layer's MLP width
        need["intermediate_size"] = c.intermediate_size
    if c.is_moe:
        need["moe_intermediate_size"] = c.moe_intermediate_size
    for name, value in need.items():
        if value % size:
            raise ConfigError(f"tensor_parallel_size={size}: the model's {name}={value} is not divisible by it")
    nkv = c.num_key_value_heads
    if nkv % size and size % nkv:
        raise ConfigError(f"tensor_parallel_size={size}: the model's num_key_value_heads={nkv} neither divides "
                          f"nor is divided by it")


def shard_config(c: Any, shard: Shard) -> Any:
    return dataclasses.replace(c, num_attention_heads=shard.heads(c.num_attention_heads)[1],
                               num_key_value_heads=shard.kv_heads(c.num_key_value_heads)[1],
                               intermediate_size=shard.rows(c.intermediate_size)[1],
                               moe_intermediate_size=shard.rows(c.moe_intermediate_size)[1] if c.is_moe else 0)


class ShardedWeights(Mapping[str, np.ndarray]):
    """name -> this rank's slice in float32, read from the full checkpoint's memory map."""

    def __init__(self, full: Any, c: Any, shard: Shard) -> None:
        self.full, self.c, self.shard = full, c, shard

    def _slice(self, name: str) -> tuple[int, int, int] | None:
        """(axis, start, count) of the rank's slice, or None for a whole tensor."""
        c, s, hd = self.c, self.shard, self.c.head_dim
        if re.search(r"\.q_proj\.(weight|bias)$", name):
            h0, n = s.heads(c.num_attention_heads)
            return 0, h0 * hd, n * hd
        if re.search(r"\.[kv]_proj\.(weight|bias)$", name):
            h0, n = s.kv_heads(c.num_key_value_heads)
            return 0, h0 * hd, n * hd
        if name.endswith("o_proj.weight"):
            h0, n = s.heads(c.num_attention_heads)
            return 1, h0 * hd, n * hd
        width = c.moe_intermediate_size if ".experts." in name else c.intermediate_size
        if re.search(r"\.(gate|up)_proj\.weight$", name):
            return (0, *s.rows(width))
        if name.endswith("down_proj.weight"):
            return (1, *s.rows(width))
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            return (0, *s.vocab(c.vocab_size))
        return None

    def __getitem__(self, name: str) -> np.ndarray:
        cut = self._slice(name)
        raw = self.full.raw(name)  # a view of the memory map: the slice below is all that is read
        if cut is None:
            return np.asarray(raw, dtype=F32)
        axis, start, count = cut
        part = np.asarray(raw[start : start + count] if axis == 0 else raw[:, start : start + count], dtype=F32)
        if part.shape[axis] < count:  # the vocabulary's last slice: zero rows past V
            pad = [(0, 0)] * part.ndim
            pad[axis] = (0, count - part.shape[axis])
            part = np.pad(part, pad)
        return part

    def __iter__(self) -> Iterator[str]:
        return iter(self.full)

    def __len__(self) -> int:
        return len(self.full)


@dataclasses.dataclass(slots=True)
class ShardedCheckpoint:
    """What the decoder reads: the rank's config and weights, and the full model's vocabulary size."""

    config: Any
    weights: ShardedWeights
    shard: Shard
    full_config: Any


def shard_checkpoint(ckpt: Any, shard: Shard) -> ShardedCheckpoint:
    """(The split was checked by check_divisible, once, before any rank started.)"""
    return ShardedCheckpoint(shard_config(ckpt.config, shard), ShardedWeights(ckpt.weights, ckpt.config, shard),
                             shard, ckpt.config)
