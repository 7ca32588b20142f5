"""What every model shares with the engine: the Model protocol, the neutral ForwardBatch it runs, the
paged KV cache it writes, and one prefill mechanism written over `forward` (so no model carries its own).

The engine (runner, graph driver, proposers) sees a model only through this module: a new architecture
implements `forward` over a ForwardBatch and registers its HF architecture name in models/registry.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from models.config import ModelConfig
from vt.backend import Backend, Tensor

I64, F32 = np.int64, np.float32


@dataclass(slots=True)
class ForwardBatch:
    """One step's inputs. Device tensors, plus host metadata for the eager prefill path."""

    input_ids: Tensor  # [T] int64
    positions: Tensor  # [T] int64
    slot_mapping: Tensor  # [T] int64; -1 = padding row, writes nothing
    is_prefill: bool
    # decode: each token's block-table row and the tables (static shapes, capturable)
    token_row: Tensor | None = None  # [T] int64
    block_tables: Tensor | None = None  # [R, W] int64
    # prefill: (first row, num tokens, first position, block table) per sequence (host); on the device the
    # sequences' block tables (block_tables), each token's row in them (token_row) and the attention's tiles
    seqs: list[tuple[int, int, int, list[int]]] = field(default_factory=list)
    tiles: Tensor | None = None  # [n, 4] int32 (backends/kernels/prefill_attention.py)
    # decode: each sequence's tokens in the step (1, or speculative verification's q); 0 where unknown (prefill)
    tokens_per_row: int = 0
    rows_share_sequences: bool = False  # decode: a short prefill run whole, a row a token (the driver's apart graphs)
    num_decode: int = 0  # prefill batches: the first num_decode tokens are decoding requests' (one-token chunks)
    logits_rows: Tensor | None = None  # [N] int64: which rows get logits (prefill: each seq's last)


@dataclass(slots=True)
class KVCache:
    k: list[Tensor]  # per layer [num_blocks + 1, block_size, nkv, hd]; the last block is the trash block
    v: list[Tensor]
    num_blocks: int
    block_size: int

    @property
    def trash_slot(self) -> int:
        return self.num_blocks * self.block_size

    def slot(self, block_ids: list[int] | np.ndarray, position: int) -> int:
        """The flat KV slot of a token: its block (from the block table) and its offset in it."""
        return int(block_ids[position // self.block_size]) * self.block_size + position % self.block_size


class Carry:
    """The tensors that cross an attention break, by name. Fixed ones (a piecewise graph's persistent views,
    a decode slot's retained hidden states) are the caller's and never released; the rest are drawn from the
    pool where the forward first needs them and released where it puts them back."""

    def __init__(self, pool: Any, fixed: dict[str, Tensor] | None = None) -> None:
        self.pool, self.fixed = pool, fixed or {}
        self.live: dict[str, Tensor] = {}

    def get(self, name: str, shape: tuple[int, ...], dtype: Any = np.float32) -> Tensor:
        """The named tensor; drawn from the pool (of this shape) the first time, while it is not live."""
        if name in self.fixed:
            return self.fixed[name]
        if name not in self.live:
            self.live[name] = self.pool.empty(shape, dtype)
        return self.live[name]

    def put(self, name: str) -> None:
        if name in self.live:
            self.pool.release(self.live.pop(name))


class Model(Protocol):
    """A causal LM on a vt Backend: long-lived weights, a paged KV layout, and one forward."""

    cfg: ModelConfig
    backend: Backend
    kv_dtype: np.dtype  # the KV cache's storage dtype (vt/dtypes.py)
    operand_dtype: np.dtype  # the GEMMs' activation operands (the final hidden states included)

    def make_kv_cache(self, num_blocks: int, block_size: int) -> KVCache: ...

    def forward(self, fb: ForwardBatch, kv: KVCache, logits: Tensor, hidden: Tensor | None = None) -> None:
        """Writes logits [N, vocab] for fb's logit rows (prefill) or for every token (decode), and (decode) the
        final normed hidden states [T, H] into `hidden` (operand_dtype) when given."""
        ...

    # The same forward in pieces, for piecewise graphs: `pieces` runs it up to the final normed hidden
    # states (carry "h") as segment, attention, segment, ..., segment, with what crosses an attention in the
    # carry (named and shaped by `carry_shapes`); `head` then writes the logits of fb's logit rows.
    def carry_shapes(self, num_tokens: int) -> dict[str, tuple[tuple[int, ...], Any]]: ...

    def pieces(self, fb: ForwardBatch, kv: KVCache, carry: Carry) -> list[Callable[[], None]]: ...

    def head(self, fb: ForwardBatch, carry: Carry, logits: Tensor) -> None: ...


def make_kv_cache(model: Model, num_blocks: int, block_size: int) -> KVCache:
    """Per layer K and V of [num_blocks + 1, block_size, kv heads, head_dim] (the last block is trash)."""
    c, b = model.cfg, model.backend
    shape = (num_blocks + 1, block_size, c.num_key_value_heads, c.head_dim)
    dtype = model.kv_dtype
    zeros = np.zeros(shape, dtype)

    def upload() -> Tensor:
        t = b.empty(shape, dtype)
        b.copy_h2d(t, zeros)
        return t

    return KVCache([upload() for _ in range(c.num_hidden_layers)], [upload() for _ in range(c.num_hidden_layers)],
                   num_blocks, block_size)


def prefill(model: Model, seqs: Sequence[tuple[list[int], list[int] | np.ndarray]], kv: KVCache) -> np.ndarray:
    """Eager prefill of whole sequences, given as (tokens, block ids); writes their KV and returns each
    sequence's last-token logits on the host, one row per sequence (tests and tools; the engine samples
    on the device from `prefill_logits`)."""
    logits = prefill_logits(model, seqs, kv)
    out = model.backend.copy_d2h(logits)
    model.backend.pool.release(logits)
    return out


def prefill_inputs(seqs: Sequence[tuple], kv: KVCache, all_rows: Sequence[int] = ()) -> tuple[
        np.ndarray, np.ndarray, np.ndarray, list[tuple[int, int, int, list[int]]], np.ndarray]:
    """A prefill step's host inputs: token ids, positions and KV slots (one per token), the attention's
    per-sequence metadata (first row, length, first position, block table) and the logit rows (each
    sequence's last, or all of its rows for the sequences named in all_rows). A sequence is (tokens,
    block ids) or, for a chunk over KV already in the cache, (tokens, block ids, first position), and a fourth
    item where the cache holds its first tokens' KV too: the position before which its tokens write none (slot -1).
    Array work per sequence, none per token: a serving step stages thousands of tokens."""
    bs = kv.block_size
    ids, pos, slots = [], [], []
    meta: list[tuple[int, int, int, list[int]]] = []
    row = 0
    for seq in seqs:
        toks, pos0 = seq[0], (seq[2] if len(seq) > 2 else 0)
        blocks = np.asarray(seq[1], I64)
        p = np.arange(pos0, pos0 + len(toks), dtype=I64)
        meta.append((row, len(toks), pos0, blocks.tolist()))
        ids.append(np.asarray(toks, I64))
        pos.append(p)
        held = seq[3] if len(seq) > 3 else 0
        slots.append(np.where(p < held, -1, blocks[p // bs] * bs + p % bs))
        row += len(toks)
    ends = np.cumsum([m[1] for m in meta])
    last = np.concatenate([np.arange(e - m[1], e) if i in all_rows else [e - 1]
                           for i, (e, m) in enumerate(zip(ends, meta))]).astype(I64)
    return _cat(ids), _cat(pos), _cat(slots), meta, last


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, I64)


def prefill_meta(meta: Sequence[tuple[int, int, int, list[int]]], num_tokens: int, tile_capacity: int = 0,
                 num_decode: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A prefill step's attention inputs on the host: the sequences' block tables [S, W] (padded with block 0),
    each of num_tokens tokens' row in them (padding tokens: row 0), and the prefill kernel's tiles for every
    sequence after the first num_decode (one-token decode rows, which the decode kernel attends), padded with
    empty tiles up to tile_capacity."""
    from backends.kernels.prefill_attention import prefill_tiles

    width = max((len(m[3]) for m in meta), default=1) or 1
    tables = np.zeros((max(len(meta), 1), width), I64)
    token_row = np.zeros(num_tokens, I64)
    for i, (row0, n, _, table) in enumerate(meta):
        tables[i, : len(table)] = table
        token_row[row0 : row0 + n] = i
    chunks = [(row0, n, p0, i) for i, (row0, n, p0, _) in enumerate(meta) if i >= num_decode]
    return tables, token_row, prefill_tiles(chunks, tile_capacity)


def stage_prefill_meta(backend: Backend, fb: ForwardBatch, meta: Sequence[tuple[int, int, int, list[int]]],
                       num_decode: int = 0, empty: Callable[..., Tensor] | None = None) -> list[Tensor]:
    """Stages prefill_meta on fb (block_tables, token_row, tiles) in pool tensors; returns them for the caller
    to release once the step is launched. Pool, not driver, memory: a driver free waits for the whole device,
    so an eager step that freed its own metadata would stall the host behind its forward (on the H200, ~26 ms
    of an 8k-token step). `empty` makes them (the pool's, unless given)."""
    host = prefill_meta(meta, fb.input_ids.shape[0], num_decode=num_decode)
    staged = [(empty or backend.pool.empty)(a.shape, a.dtype) for a in host]
    for t, a in zip(staged, host):
        backend.copy_h2d(t, a)
    fb.block_tables, fb.token_row, fb.tiles = staged
    fb.seqs, fb.num_decode = list(meta), num_decode
    return staged


def prefill_logits(model: Model, seqs: Sequence[tuple], kv: KVCache, all_rows: Sequence[int] = (),
                   num_decode: int = 0) -> Tensor:
    """As `prefill`, leaving the logits on the device in a pool tensor the caller releases: one row per
    sequence, or every position's row for the sequences named in all_rows (prompt logprobs), in order.
    Unpadded and eager (the engine's prefill goes through the graph driver's token buckets)."""
    return run_prefill(model, kv, prefill_inputs(seqs, kv, all_rows), num_decode)


def run_prefill(model: Model, kv: KVCache, inputs: tuple, num_decode: int = 0,
                before: Callable[[Tensor], None] | None = None) -> Tensor:
    """prefill_logits on inputs prefill_inputs made; `before` sees the uploaded token ids first (the graph
    driver's device feed of decode rows' tokens)."""
    b, pool = model.backend, model.backend.pool
    ids, pos, slots, meta, last = inputs
    staged = []
    for host in (ids, pos, slots, last):
        t = pool.empty((len(host),), I64)
        b.copy_h2d(t, np.asarray(host, I64))
        staged.append(t)
    if before is not None:
        before(staged[0])
    logits = pool.empty((len(last), model.cfg.vocab_size), F32)
    fb = ForwardBatch(staged[0], staged[1], staged[2], True, logits_rows=staged[3])
    own = stage_prefill_meta(b, fb, meta, num_decode, pool.empty)
    model.forward(fb, kv, logits)
    for t in (*staged, *own):
        pool.release(t)  # stream-ordered: whatever draws them next runs after this step's kernels
    return logits
