"""Piecewise graphs for prefill and mixed steps: the forward split at attention, per token-count bucket.

Attention is the only part of a prefill whose shape depends on each sequence's length, so a bucket of T
padded tokens captures everything else (L + 1 segments) and runs the L attentions eagerly between them
(vt/capture.py's BreakableGraph). Buckets go up to 2,048 tokens; a larger step runs eagerly, unsplit. The
graph driver owns the buckets and gives each the decode slots' discipline: a cold eager step records the
demand profile, the driver's one pre-grow runs before every segment's capture, and the segments'
temporaries are pinned for the graph's life.

What lives across an attention break (the residual stream, q/k, the attention output, rope rows and
KV write slots) sits in persistent buffers: views of one set the driver allocates for its largest
bucket, since buckets replay one at a time on one stream. Padding rows (position 0, KV slot -1) write
only the trash block and attend to nothing; their rows are never read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from backends.kernels.prefill_attention import max_tiles
from models.base import Carry, ForwardBatch, prefill_meta
from vt.backend import Tensor
from vt.capture import BreakableGraph

I64 = np.int64


# Larger steps run the unsplit forward eagerly. On the H200 an eager 1,024-token step of the 0.6B shape was
# launch-bound (14.7 ms TTFT where its kernels take a few ms), so serving's mixed steps (a decode batch and a
# prefill chunk, 1-2k tokens) need graphs; from about 8k tokens the kernels outlast the launches.
MAX_GRAPH_TOKENS = 2048


def token_ladder(max_tokens: int) -> list[int]:
    """Powers of two from 16 up to min(max_tokens, MAX_GRAPH_TOKENS): at most eight buckets, so the graphs'
    pinned temporaries stay bounded whatever the context length."""
    top = min(max_tokens, MAX_GRAPH_TOKENS)
    return [*(t for t in (16, 32, 64, 128, 256, 512, 1024) if t < top), top]


def carry_buffers(backend: Any, model: Any, max_tokens: int) -> dict[str, Tensor]:
    """The persistent carry of the largest bucket, zeroed (a padding row must never hold NaN bits)."""
    out = {}
    for name, (shape, dtype) in model.carry_shapes(max_tokens).items():
        t = backend.empty(shape, dtype)
        backend.copy_h2d(t, np.zeros(shape, dtype))
        out[name] = t
    return out


class Bucket:
    """A token-count bucket: persistent inputs, the carry views, the forward's pieces and their graph."""

    def __init__(self, driver: Any, num_tokens: int) -> None:
        b, model = driver.backend, driver.model
        self.num_tokens = T = num_tokens
        self.staged = np.zeros(3 * T, I64)  # token ids | positions | KV slots, staged in one copy
        self.inputs = b.empty((3 * T,), I64)
        ids, positions, slots = (self.inputs.view((T,), offset=8 * i * T) for i in range(3))
        self.carry = Carry(driver.pool, fixed={name: driver.carry[name].view(shape)
                                               for name, (shape, _) in model.carry_shapes(T).items()})
        self.fb = ForwardBatch(ids, positions, slots, True)  # its seqs change every step; the breaks read them
        # The attention's block tables, token rows and tiles: the bucket's own buffers (never pool blocks, which
        # a segment's temporaries could alias while a break reads them), the tables' width grown as needed.
        self.token_row = b.empty((T,), I64)
        self.tiles = b.empty((max_tiles(T, T), 4), np.int32)
        self.tables: Tensor | None = None
        self.fb.token_row, self.fb.tiles = self.token_row, self.tiles
        self.pieces = model.pieces(self.fb, driver.kv, self.carry)
        self.graph: BreakableGraph | None = None
        self.demand: dict[int, int] | None = None
        self.pinned: set = set()
        self.num_replays = 0

    @property
    def is_captured(self) -> bool:
        return self.graph is not None

    def stage(self, backend: Any, ids: Any, positions: Any, slots: Any,
              seqs: list[tuple[int, int, int, list[int]]], num_decode: int = 0) -> None:
        T, n = self.num_tokens, len(ids)
        tok, pos, slot = self.staged.reshape(3, T)
        tok[:n], tok[n:] = ids, 0
        pos[:n], pos[n:] = positions, 0
        slot[:n], slot[n:] = slots, -1
        backend.copy_h2d(self.inputs, self.staged)
        self.fb.seqs, self.fb.num_decode = seqs, num_decode
        tables, token_row, tiles = prefill_meta(seqs, T, self.tiles.shape[0], num_decode)
        if self.tables is None or self.tables.shape[1] < tables.shape[1]:
            if self.tables is not None:
                backend.free(self.tables.buffer)
            self.tables = backend.empty((T, max(tables.shape[1], 2 * (self.tables.shape[1] if self.tables else 0))),
                                        I64)
            self.fb.block_tables = self.tables
        padded = np.zeros(self.tables.shape, I64)
        padded[: tables.shape[0], : tables.shape[1]] = tables
        backend.copy_h2d(self.tables, padded)
        backend.copy_h2d(self.token_row, token_row)
        backend.copy_h2d(self.tiles, tiles)

    def run_eager(self) -> None:
        for piece in self.pieces:
            piece()
