"""One decoder family on a vt Backend, as the HF architectures define it: Qwen3ForCausalLM and
Qwen3MoeForCausalLM (q/k norm per head), Qwen2ForCausalLM (q/k/v bias, no q/k norm) and
LlamaForCausalLM (Llama 3.x: no norm, no bias, llama3 rope scaling). The config says which parts a
checkpoint has; `expected_tensors` is the manifest the loader checks before reading any weight.

Weights and the KV cache are long-lived (`Backend.empty`); every intermediate is a transient pool
tensor released as soon as it is dead, so a step's demand profile is what its capture needs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from backends.kernels import rows_attention
from backends.kernels.activation import pair_group
from backends.kernels.decode_attention import ROWS_A_BLOCK, num_partitions
from backends.kernels.moe import expert_rows
from backends.kernels.rows_attention import ROWS as ROWS_MMA
from models import kernels as K
from models.base import Carry, ForwardBatch, KVCache, make_kv_cache
from models.config import ModelConfig
from models.rope import rope_table
from vt.backend import Backend, Tensor
from vt.dtypes import STORAGE, to_storage, widen_host
from vt.env import flags

# A step of at most this many rows lets the GEMM that reads a norm compute it (VT_CONSUMER_NORM). H200, 0.6B
# (session 24): at one row the step replays 1.0342 / 1.0346 -> 0.9922 / 0.9944 ms (the skinny GEMM serves every
# projection and loses its o and down norm tails); at eight rows, where cuBLASLt serves them and the norm becomes a
# kernel of its own, 1.2577 / 1.2581 -> 1.3804 / 1.3783 ms.
CONSUMER_NORM_ROWS = 1

F32, I32 = np.float32, np.int32


def interleave_gate_up(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """The fused gate/up weight's rows [2 I, H]: gate's and up's alternating pair_group(I) rows at a time, so the
    decode GEMM's tile holds both halves of the outputs it activates (backends/kernels/skinny_gemm.py's SwiGLU)."""
    I, H = gate.shape
    g = pair_group(I)
    return np.stack([gate.reshape(I // g, g, H), up.reshape(I // g, g, H)], axis=1).reshape(2 * I, H)


def expected_tensors(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the config implies, with its shape (HF names)."""
    H, V, nh, nkv, hd = c.hidden_size, c.vocab_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,)}
    if not c.tie_word_embeddings:
        out["lm_head.weight"] = (V, H)
    for i in range(c.num_hidden_layers):
        p, a = f"model.layers.{i}.", f"model.layers.{i}.self_attn."
        out |= {p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
                a + "q_proj.weight": (nh * hd, H), a + "k_proj.weight": (nkv * hd, H),
                a + "v_proj.weight": (nkv * hd, H), a + "o_proj.weight": (H, nh * hd)}
        if c.has_qk_norm:
            out |= {a + "q_norm.weight": (hd,), a + "k_norm.weight": (hd,)}
        if c.has_qkv_bias:
            out |= {a + "q_proj.bias": (nh * hd,), a + "k_proj.bias": (nkv * hd,), a + "v_proj.bias": (nkv * hd,)}
        if c.has_o_bias:
            out[a + "o_proj.bias"] = (H,)
        if c.is_sparse_layer(i):
            out[p + "mlp.gate.weight"] = (c.num_experts, H)
            for e in range(c.num_experts):
                q, MI = f"{p}mlp.experts.{e}.", c.moe_intermediate_size
                out |= {q + "gate_proj.weight": (MI, H), q + "up_proj.weight": (MI, H), q + "down_proj.weight": (H, MI)}
        else:
            out |= {p + "mlp.gate_proj.weight": (c.intermediate_size, H), p + "mlp.up_proj.weight":
                    (c.intermediate_size, H), p + "mlp.down_proj.weight": (H, c.intermediate_size)}
    return out


# A step of few prefill tokens over a long context attends them with the decode kernel (each token its own query
# over keys 0..its position: the same attention), which splits the context across blocks. The tensor-core prefill
# kernel gives one block to each 64-query tile and head and walks the context serially: a prefix-cache hit's
# 16-token tail over 1,008 cached keys was 16 blocks on 132 SMs and 5.95 ms of TTFT on the H200, 3.5 ms on the
# decode kernel. Over a short context the prefill kernel is the faster (a 16-token prompt: 1.84 against 2.6 ms).
SHORT_PREFILL_TOKENS = 64
LONG_CONTEXT_KEYS = 256


def short_over_long_context(spans: Sequence[tuple[int, int]]) -> bool:
    """Whether prefill chunks, as (first position, tokens) each, are few tokens over a long context: the decode
    kernel attends them (and the engine runs such a step whole, as a captured decode step: vt/engine/worker)."""
    return (sum(n for _, n in spans) <= SHORT_PREFILL_TOKENS
            and max((p0 + n for p0, n in spans), default=0) > LONG_CONTEXT_KEYS)


def prefill_by_decode_kernel(fb: ForwardBatch) -> bool:
    return short_over_long_context([(p0, n) for _, n, p0, _ in fb.seqs[fb.num_decode:]])


class DecoderForCausalLM:
    """Dense or MoE by the config (Qwen3MoeForCausalLM has num_experts > 0).

    `dtype` is what every Linear weight, the embedding and the KV cache are held in (bfloat16 / float16
    round to nearest even as torch's cast does; a bf16 checkpoint's values are kept exactly). GEMMs take
    their left operand in that dtype and accumulate in float32; activations, norms, biases, softmax and
    rope stay float32. The same on both backends, so the CPU is the CUDA path's oracle."""

    def __init__(self, ckpt: Any, backend: Backend, dtype: str = "float32", group: Any = None) -> None:
        self.cfg: ModelConfig = ckpt.config  # a rank's share of the heads and widths (models/shard.py)
        self.group = group  # the tensor-parallel group (vt/parallel.py), None on one device
        start, rows = group.shard.vocab(self.cfg.vocab_size) if group else (0, 0)
        self.vocab_start: int = start  # this rank's slice of the vocabulary (embedding and LM head rows)
        self.vocab_rows: int = rows
        self.backend = backend
        self.pool = backend.pool
        self.dtype = dtype
        self.kv_dtype = STORAGE[dtype]
        self.operand_dtype = STORAGE[dtype]  # what a GEMM's activation operand is narrowed to as it is written
        self.w = self._load(ckpt.weights)
        self.rope_table = self._upload(rope_table(self.cfg))
        self.consumer_norm = flags().consumer_norm and group is None
        self.moe_consumer_norm = self.consumer_norm and flags().moe_consumer_norm
        self.rope_in_attention = flags().rope_in_attention
        self.rope_max_rows = flags().rope_max_rows
        self.rope_max_keys = flags().rope_max_keys
        self.rows_kernel = self._rows_kernel(flags().shared_rows_attention)
        self.decode_mma_from = self._decode_mma_from(flags().decode_mma_from)

    def _decode_mma_from(self, keys: int) -> int:
        """The table width (keys) from which a step's decode rows attend on tensor cores (VT_DECODE_MMA_FROM), 0 for
        never: the mma rows kernel's limits (a 16-bit cache, at most ROWS_MMA query heads a KV head) hold here too,
        and a model past them is said in one line."""
        group = self.cfg.num_attention_heads // self.cfg.num_key_value_heads
        if not keys or (self.kv_dtype != np.float32 and group <= ROWS_MMA):
            return keys
        logging.getLogger("vt").warning(
            "VT_DECODE_MMA_FROM=%d does not apply (%d query heads a KV head, %s cache); decode rows attend with the "
            "plain decode kernel", keys, group, self.dtype)
        return 0

    def _long_decode(self, block_tables: Tensor, kv: KVCache) -> str | None:
        """"mma" where decode rows over tables this wide attend with the tensor-core rows kernel (each token a run
        of its own: its G query heads of a block's rows), else None (the plain decode kernel)."""
        wide = self.decode_mma_from and block_tables.shape[1] * kv.block_size >= self.decode_mma_from
        return "mma" if wide else None

    def _rows_kernel(self, asked: str) -> str | None:
        """The kernel a step of rows sharing sequences attends with (VT_SHARED_ROWS_ATTENTION), None for the plain
        decode kernel: `rows` below ROWS_A_BLOCK query heads a KV head (its blocks serve one query head: a key is read
        once a head for ROWS_A_BLOCK rows, where the plain kernel reads it once a KV head a row), `mma` (and `auto`,
        the default) over a 16-bit cache (tensor cores take no float32) and at most ROWS_MMA query heads a KV head (a
        block's 64 rows)."""
        group = self.cfg.num_attention_heads // self.cfg.num_key_value_heads
        if asked == "rows" and group < ROWS_A_BLOCK:
            return "rows"
        if asked in ("mma", "auto") and self.kv_dtype != np.float32 and group <= ROWS_MMA:
            return "mma"
        if asked in ("rows", "mma"):  # asked by name for a kernel this model cannot take: said, not silent
            logging.getLogger("vt").warning(
                "VT_SHARED_ROWS_ATTENTION=%s does not apply (%d query heads a KV head, %s cache); rows sharing "
                "sequences attend with the plain decode kernel", asked, group, self.dtype)
        return None

    # ---- weights ----------------------------------------------------------------------------
    def _upload(self, a: np.ndarray) -> Tensor:
        t = self.backend.empty(a.shape, a.dtype)
        self.backend.copy_h2d(t, a)
        return t

    def _load(self, hf: Any) -> dict[str, Tensor]:
        """Each device weight is built and uploaded in turn: host memory holds one layer's pieces at a
        time, never the whole model in float32."""
        c, w = self.cfg, {}

        def get(name: str) -> np.ndarray:
            """The checkpoint's values rounded to the model dtype, in float32 (a bf16 model's norms are
            bf16 numbers too)."""
            return widen_host(to_storage(np.asarray(hf[name], dtype=F32), self.dtype))

        def low(name: str) -> np.ndarray:
            """A GEMM weight (or the embedding) in the model's storage dtype. A checkpoint tensor stored in
            that dtype is taken bit for bit from its memory map, with no float32 round trip (an 8B bf16
            checkpoint: 16 GB read once, not converted five times)."""
            raw = hf.raw(name) if hasattr(hf, "raw") else None
            if raw is not None and raw.dtype.itemsize == self.kv_dtype.itemsize and (
                    raw.dtype == self.kv_dtype or (raw.dtype.name == "bfloat16" and self.dtype == "bfloat16")):
                return raw.view(self.kv_dtype)
            return to_storage(get(name), self.dtype)

        def put(key: str, a: np.ndarray, low: bool = False) -> None:
            """low: a GEMM weight or the embedding, already in the model dtype (low() or to_storage)."""
            w[key] = self._upload(np.ascontiguousarray(a) if low else np.ascontiguousarray(a, dtype=F32))

        put("embed", low("model.embed_tokens.weight"), low=True)
        put("norm", get("model.norm.weight"))
        put("lm_head_t", low("model.embed_tokens.weight" if c.tie_word_embeddings else "lm_head.weight").T, low=True)
        for i in range(c.num_hidden_layers):
            p, a = f"model.layers.{i}.", f"model.layers.{i}.self_attn."
            put(f"{i}.ln1", get(p + "input_layernorm.weight"))
            put(f"{i}.ln2", get(p + "post_attention_layernorm.weight"))
            put(f"{i}.qkv_t", np.concatenate([low(a + f"{n}_proj.weight") for n in "qkv"]).T, low=True)
            if c.has_qkv_bias:
                put(f"{i}.qkv_b", np.concatenate([get(a + f"{n}_proj.bias") for n in "qkv"]))
            put(f"{i}.o_t", low(a + "o_proj.weight").T, low=True)
            if c.has_o_bias:
                put(f"{i}.o_b", get(a + "o_proj.bias"))
            put(f"{i}.qk_norm", self._qk_scale(get, a))
            if c.is_sparse_layer(i):
                ex = [f"{p}mlp.experts.{e}." for e in range(c.num_experts)]
                put(f"{i}.router_t", low(p + "mlp.gate.weight").T, low=True)
                # HF's Linear layout [E, out, in]: moe_gemm reads a weight row along K
                put(f"{i}.experts_gu", np.stack([np.concatenate([low(e + "gate_proj.weight"),
                                                                 low(e + "up_proj.weight")]) for e in ex]), low=True)
                put(f"{i}.experts_down", np.stack([low(e + "down_proj.weight") for e in ex]), low=True)
            else:
                put(f"{i}.gu_t", interleave_gate_up(low(p + "mlp.gate_proj.weight"), low(p + "mlp.up_proj.weight")).T,
                    low=True)
                put(f"{i}.down_t", low(p + "mlp.down_proj.weight").T, low=True)
        return w

    def _qk_scale(self, get: Any, a: str) -> np.ndarray:
        """Per-head weights for q then k, [nh + nkv, hd]: Qwen3's q_norm / k_norm, or ones where the model
        has no norm; q's row carries the attention scale (rope is linear)."""
        c = self.cfg
        ones = np.ones(c.head_dim, F32)
        q = (get(a + "q_norm.weight") if c.has_qk_norm else ones) * c.head_dim**-0.5
        k = get(a + "k_norm.weight") if c.has_qk_norm else ones
        return np.concatenate([np.tile(q, (c.num_attention_heads, 1)), np.tile(k, (c.num_key_value_heads, 1))])

    def make_kv_cache(self, num_blocks: int, block_size: int) -> KVCache:
        return make_kv_cache(self, num_blocks, block_size)

    # ---- forward ----------------------------------------------------------------------------
    def forward(self, fb: ForwardBatch, kv: KVCache, logits: Tensor, hidden: Tensor | None = None) -> None:
        """The Model protocol's forward (models/base.py): the pieces back to back, every tensor from the pool
        except `hidden`, which receives the final normed hidden states (decode)."""
        carry = Carry(self.pool, fixed=None if hidden is None else {"h": hidden})
        for piece in self.pieces(fb, kv, carry):
            piece()
        self.head(fb, carry, logits)

    def carry_shapes(self, T: int) -> dict[str, tuple[tuple[int, ...], Any]]:
        """What lives across an attention break, for T tokens: the residual stream x (float32), the normed
        input of the next GEMM h, the rotated queries q (float32) and the attention output o (both GEMM
        operands in the operand dtype)."""
        c, op = self.cfg, self.operand_dtype
        nh, hd = c.num_attention_heads, c.head_dim
        return {"x": ((T, c.hidden_size), F32), "h": ((T, c.hidden_size), op), "q": ((T, nh, hd), F32),
                "o": ((T, nh, hd), op)}

    def pieces(self, fb: ForwardBatch, kv: KVCache, carry: Carry) -> list[Callable[[], None]]:
        """The forward up to the final normed hidden states (carry h) as segment, attention, segment, ...,
        segment: attention is the only part whose shape depends on each sequence's length, so a piecewise
        graph captures the segments and runs the attentions eagerly. An attention reads fb's block tables and
        tiles when it runs: a replay attends over that step's sequences."""
        L = self.cfg.num_hidden_layers
        out: list[Callable[[], None]] = [partial(self._start, fb, kv, carry)]
        for i in range(L):
            out.append(partial(self._attend, i, fb, kv, carry))
            out.append(partial(self._between, i, fb, kv, carry, is_last=i == L - 1))
        return out

    def head(self, fb: ForwardBatch, carry: Carry, logits: Tensor) -> None:
        """The LM head on the logit rows of the final normed states (prefill: fb.logits_rows; decode: all)."""
        b, pool = self.backend, self.pool
        h = carry.get("h", ())
        rows = h
        if fb.is_prefill:
            assert fb.logits_rows is not None
            rows = pool.empty((fb.logits_rows.shape[0], h.shape[1]), h.dtype)
            b.launch(K.gather_rows, h, fb.logits_rows, rows)
        if self.group is None:
            b.gemm(rows, self.w["lm_head_t"], logits)
        else:
            self._parallel_lm_head(rows, logits)
        if fb.is_prefill:
            pool.release(rows)
        carry.put("h")

    def _parallel_lm_head(self, normed: Tensor, logits: Tensor) -> None:
        """Each rank's vocabulary slice of the logits, gathered on every rank (each samples the same ids)."""
        b, pool, n, g = self.backend, self.pool, normed.shape[0], self.group
        local = pool.empty((n, self.vocab_rows), F32)
        b.gemm(normed, self.w["lm_head_t"], local)
        full = pool.empty((n, self.vocab_rows * g.size), F32)
        g.all_gather(local, full)
        b.launch(K.copy_columns, full, logits)
        pool.release(local)
        pool.release(full)

    def _reduce(self, t: Tensor) -> None:
        """A row-parallel layer's partial sums, summed over the ranks (nothing on one device)."""
        if self.group is not None:
            self.group.all_reduce(t)

    def _start(self, fb: ForwardBatch, kv: KVCache, carry: Carry) -> None:
        """Embedding, layer 0's input norm, and layer 0 up to its attention."""
        b, c = self.backend, self.cfg
        T = fb.input_ids.shape[0]
        x = carry.get("x", (T, c.hidden_size))
        if self.group is None:
            b.embed(self.w["embed"], fb.input_ids, x)
        else:
            b.launch(K.embed_shard, self.w["embed"], fb.input_ids, x, start=self.vocab_start)
            self._reduce(x)
        b.add_rms_norm(x, None, self.w["0.ln1"], carry.get("h", (T, c.hidden_size), self.operand_dtype),
                       eps=c.rms_norm_eps)
        self._qkv(0, fb, kv, carry)

    def _qkv(self, i: int, fb: ForwardBatch, kv: KVCache, carry: Carry, norm_in: bool = False) -> None:
        """Layer i's q/k/v projection of its normed input h (norm_in: of x, its input norm computed by the GEMM),
        then q/k norm, rotary and the KV write in one op; or, where the attention runs them (_rope_in_attention),
        the projection alone, carried to it."""
        b, pool, c, w = self.backend, self.pool, self.cfg, self.w
        h = carry.get("h", ())
        T = h.shape[0]
        nh, nkv, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        carried = self._rope_in_attention(fb, kv)
        shape = (T, (nh + 2 * nkv) * hd)
        qkv = carry.get("qkv", shape) if carried else pool.empty(shape, F32)
        if norm_in:
            b.rms_norm_gemm(carry.get("x", ()), w[f"{i}.ln1"], h, w[f"{i}.qkv_t"], qkv, eps=c.rms_norm_eps)
        else:
            b.gemm(h, w[f"{i}.qkv_t"], qkv)
        if carried:
            carry.get("o", (T, nh, hd), self.operand_dtype)
            return
        b.qk_norm_rope_store(qkv, w[f"{i}.qk_norm"], self.rope_table, fb.positions, fb.slot_mapping, kv.k[i],
                             kv.v[i], carry.get("q", (T, nh, hd)), has_norm=c.has_qk_norm, eps=c.rms_norm_eps,
                             bias=w.get(f"{i}.qkv_b"))
        pool.release(qkv)
        carry.get("o", (T, nh, hd), self.operand_dtype)

    def _rope_in_attention(self, fb: ForwardBatch, kv: KVCache) -> bool:
        """Whether the decode attention runs the q/k norm, rotary and KV write in its prologue: a decode step of
        one token a sequence (the kernel's precondition: speculative verification's tokens share a sequence), of at
        most VT_ROPE_MAX_ROWS rows, over a table of one partition. Where the context is split, each of the many
        blocks would wait for its prologue before its first key load: H200, 0.6B at 8 x 8,192, the step took 3.77 ms
        against 3.17 (session 25)."""
        if not (not fb.is_prefill and fb.tokens_per_row == 1):
            return False
        assert fb.block_tables is not None
        rows, width = fb.block_tables.shape
        return self.attends_with_rope(rows, width, kv.block_size)

    def attends_with_rope(self, rows: int, width: int, block_size: int) -> bool:
        """Whether a decode step of this many rows (a graph's, padding included) over tables this wide takes the rope
        variant (given one token a sequence): the flag, at most VT_ROPE_MAX_ROWS rows, and a table of at most
        MIN_PARTITION keys, one partition at the default floor (under VT_DECODE_MIN_PARTITION it may be several: the
        lane's A/B then times the variant's prologue in each of them, as it pairs the flag with
        VT_ROPE_IN_ATTENTION=0). Measured faster there (H200: 1 and 8 rows at 128 keys); at 8 x 8,192 19% slower
        (session 25, under the rule of 1,024 blocks a launch: 16 partitions, each of 1,024 blocks waiting for its
        prologue before its first key load; 256 blocks since session 33, not measured with the variant), which many
        rows would repeat (c=128: 1,024 blocks). The graph driver asks it too: where it says yes, a short prefill run
        whole (rows sharing a sequence) needs a graph of its own."""
        return (self.rope_in_attention and rows <= self.rope_max_rows
                and width * block_size <= self.rope_max_keys)

    def _attend(self, i: int, fb: ForwardBatch, kv: KVCache, carry: Carry) -> None:
        assert fb.block_tables is not None and fb.token_row is not None
        if self._rope_in_attention(fb, kv):
            qkv, o = carry.get("qkv", ()), carry.get("o", ())
            self._decode_attention(i, None, o, fb.positions, fb.token_row, fb.block_tables, kv, carry,
                                   rope=(qkv, fb.slot_mapping))
            carry.put("qkv")
            return
        q, o = carry.get("q", ()), carry.get("o", ())
        if not fb.is_prefill:
            self._decode_attention(i, q, o, fb.positions, fb.token_row, fb.block_tables, kv, carry,
                                   rows=self.rows_kernel if fb.rows_share_sequences
                                   else self._long_decode(fb.block_tables, kv))
            return
        D = fb.num_decode  # a mixed step: its first D tokens are decoding requests' new tokens
        T, nh, hd = q.shape
        if D:
            self._decode_attention(i, q.view((D, nh, hd)), o.view((D, nh, hd)), fb.positions.view((D,)),
                                   fb.token_row.view((D,)), fb.block_tables, kv, None,
                                   rows=self._long_decode(fb.block_tables, kv))
        if prefill_by_decode_kernel(fb):  # the chunks' tokens (and the bucket's padding) as decode queries
            n, row = T - D, D * nh * hd
            # a chunk's tokens share its table row: the rows kernel's runs, as a short prefill run whole
            self._decode_attention(i, q.view((n, nh, hd), offset=row * q.dtype.itemsize),
                                   o.view((n, nh, hd), offset=row * o.dtype.itemsize),
                                   fb.positions.view((n,), offset=8 * D), fb.token_row.view((n,), offset=8 * D),
                                   fb.block_tables, kv, None, rows=self.rows_kernel)
            return
        self.backend.paged_prefill_attention(q, kv.k[i], kv.v[i], fb.block_tables, fb.tiles, fb.token_row,
                                             fb.positions, o)

    def _decode_attention(self, i: int, q: Tensor | None, o: Tensor, positions: Tensor, token_row: Tensor,
                          block_tables: Tensor, kv: KVCache, carry: Carry | None,
                          rope: tuple[Tensor, Tensor] | None = None, rows: str | None = None) -> None:
        """The decode kernel over o's tokens, from q (rows: a rows kernel, for rows that share sequences: `rows` or
        `mma`, as _rows_kernel chose); or (rope: the q/k/v projection and the slots) from the projection, the q/k
        norm, rotary and KV write in its prologue. Its partitions' scratch (as many as the kernel's own rule splits
        the table into) lives in the carry for a whole decode step, or (carry None: a mixed step's eager attention
        break) only for this launch: a break's pool block is dead before the bucket's next segment runs."""
        T, nh, hd = o.shape
        nkv, width = kv.k[i].shape[2], block_tables.shape[1]
        if rows == "mma":
            P = rows_attention.num_partitions(T, nkv, nh // nkv, width, kv.block_size)
        else:
            P = num_partitions(T, nkv, width, kv.block_size)
        if P == 1:
            parts: tuple = (None, None)
        elif carry is not None:
            parts = (carry.get("part_o", (T, nh, P, hd)), carry.get("part_ml", (T, nh, P, 2)))
        else:
            parts = (self.pool.empty((T, nh, P, hd), F32), self.pool.empty((T, nh, P, 2), F32))
        if rows == "mma":  # rows of one sequence read its keys together, on tensor cores (VT_SHARED_ROWS_ATTENTION)
            self.backend.paged_rows_attention(q, kv.k[i], kv.v[i], block_tables, token_row, positions, o, *parts)
        elif rows == "rows":  # ... on CUDA cores, a few rows a block
            self.backend.paged_decode_attention_rows(q, kv.k[i], kv.v[i], block_tables, token_row, positions, o,
                                                     *parts)
        elif rope is None:
            self.backend.paged_decode_attention(q, kv.k[i], kv.v[i], block_tables, token_row, positions, o, *parts)
        else:
            c = self.cfg
            self.backend.paged_decode_attention_rope(
                rope[0], self.w[f"{i}.qk_norm"], self.rope_table, positions, rope[1], kv.k[i], kv.v[i], block_tables,
                token_row, o, *parts, has_norm=c.has_qk_norm, eps=c.rms_norm_eps, bias=self.w.get(f"{i}.qkv_b"))
        if carry is None:
            for t in parts:
                if t is not None:
                    self.pool.release(t)

    def _between(self, i: int, fb: ForwardBatch, kv: KVCache, carry: Carry, is_last: bool) -> None:
        """Layer i after its attention (o projection, residual add + norm, MLP or MoE), then the residual add
        fused with the next norm: layer i + 1's input norm, or after the last layer the final norm."""
        b, pool, c, w = self.backend, self.pool, self.cfg, self.w
        x, o, h = carry.get("x", ()), carry.get("o", ()), carry.get("h", ())
        T, H = x.shape
        carry.put("q")
        out = pool.empty((T, H), F32)
        o2 = o.view((T, o.shape[1] * o.shape[2]))
        # the consumer's norm: o (and down) add into x, and gate/up (and the next q/k/v) compute the norm, where
        # the norm plan would run it in the GEMM's grid-wide tail
        dense = self.consumer_norm and T <= CONSUMER_NORM_ROWS and not c.is_sparse_layer(i)
        # a MoE layer's norm feeds the router and the routed gate/up, each of which norms the row itself (one token)
        sparse = self.moe_consumer_norm and T == 1 and c.is_sparse_layer(i)
        consumer = ((dense or sparse) and f"{i}.o_b" not in w
                    and b.fuses_norm(o2, w[f"{i}.o_t"], out, x, w[f"{i}.ln2"], h, eps=c.rms_norm_eps))
        if consumer:
            b.gemm_add(o2, w[f"{i}.o_t"], out, x)
            carry.put("o")
        elif self.group is None and f"{i}.o_b" not in w:  # one launch where the GEMM's plan allows (vt/ops.py)
            b.gemm_add_rms_norm(o2, w[f"{i}.o_t"], out, x, w[f"{i}.ln2"], h, eps=c.rms_norm_eps)
            carry.put("o")
        else:  # a shard's partial sum is reduced between the two
            b.gemm(o2, w[f"{i}.o_t"], out)
            self._reduce(out)
            carry.put("o")
            b.add_rms_norm(x, out, w[f"{i}.ln2"], h, eps=c.rms_norm_eps, bias=w.get(f"{i}.o_b"))
        pool.release(out)
        after = w["norm"] if is_last else w[f"{i + 1}.ln1"]  # the norm the layer's output feeds
        deferred = False  # whether the next q/k/v GEMM computes its input norm (the down GEMM left it)
        if self.group is not None:  # a shard's partial sum is reduced before the add
            mlp = self._combine(self._moe(i, h)) if c.is_sparse_layer(i) else self._mlp(i, h)[0]
            self._reduce(mlp)
            b.add_rms_norm(x, mlp, after, h, eps=c.rms_norm_eps)
            pool.release(mlp)
        elif c.is_sparse_layer(i):  # the combine adds into x and writes the next norm into h
            y, ids, weights = self._moe(i, h, norm_in=(x, w[f"{i}.ln2"]) if consumer else None)
            b.moe_combine_add_rms_norm(y, ids, weights, x, after, h, eps=c.rms_norm_eps)
            for t in (y, ids, weights):
                pool.release(t)
        else:
            mlp, deferred = self._mlp(i, h, (x, after), norm_in=w[f"{i}.ln2"] if consumer else None,
                                      may_defer=dense and not is_last)
            pool.release(mlp)
        if not is_last:
            self._qkv(i + 1, fb, kv, carry, norm_in=deferred)
        else:
            for name in ("x", "part_o", "part_ml"):
                carry.put(name)

    def _mlp(self, i: int, h: Tensor, residual: tuple[Tensor, Tensor] | None = None, norm_in: Tensor | None = None,
             may_defer: bool = False) -> tuple[Tensor, bool]:
        """The dense MLP of h, and whether the next norm was deferred. With residual (x, the next norm's weight), its
        down projection also adds into x and writes the next norm into h (gemm_add_rms_norm), or (may_defer, where
        that norm would run in the GEMM's tail: fuses_norm) only adds into x, the next q/k/v GEMM computing the
        norm. norm_in (with residual): h is RMSNorm(x) * norm_in, computed by the gate/up GEMM."""
        b, pool, c = self.backend, self.pool, self.cfg
        T = h.shape[0]
        gu = pool.empty((T, 2 * c.intermediate_size), F32)
        act = pool.empty((T, c.intermediate_size), self.operand_dtype)
        group = pair_group(c.intermediate_size)
        if norm_in is not None and residual is not None:
            b.rms_norm_gemm_silu_mul(residual[0], norm_in, h, self.w[f"{i}.gu_t"], gu, act, group=group,
                                     eps=c.rms_norm_eps)
        else:
            b.gemm_silu_mul(h, self.w[f"{i}.gu_t"], gu, act, group=group)
        pool.release(gu)
        out = pool.empty((T, c.hidden_size), F32)
        down = self.w[f"{i}.down_t"]
        defer = (residual is not None and may_defer
                 and b.fuses_norm(act, down, out, residual[0], residual[1], h, eps=c.rms_norm_eps))
        if residual is None:
            b.gemm(act, down, out)
        elif defer:
            b.gemm_add(act, down, out, residual[0])
        else:
            b.gemm_add_rms_norm(act, down, out, residual[0], residual[1], h, eps=c.rms_norm_eps)
        pool.release(act)
        return out, defer

    def _moe(self, i: int, h: Tensor, norm_in: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Routed MoE: only the experts each token chose run; returns the routed rows' outputs y [T k, H], ids and
        weights [T, k] for a combine. Every buffer is sized by T and top-k (T k routed rows), never by which experts
        were chosen, so the step captures. A step of one token routes inside its gate/up GEMM's launch, each routed
        row reading its expert from the routing (moe_route_gemm_rows, moe_gemm_rows: no grouping launch); more
        tokens group the rows by expert first, so an expert two tokens chose is read once. norm_in (x, the norm's
        weight; one token): h is RMSNorm(x) * weight, computed by the router GEMM and the routed gate/up GEMM."""
        b, pool, c = self.backend, self.pool, self.cfg
        T, E, k = h.shape[0], c.num_experts, c.num_experts_per_tok
        logits = pool.empty((T, E), F32)
        if norm_in is not None:
            b.rms_norm_gemm(*norm_in, h, self.w[f"{i}.router_t"], logits, eps=c.rms_norm_eps)
        else:
            b.gemm(h, self.w[f"{i}.router_t"], logits)
        ids, weights = pool.empty((T, k), I32), pool.empty((T, k), F32)
        gu, down = self.w[f"{i}.experts_gu"], self.w[f"{i}.experts_down"]
        if T == 1:  # routed inside the gate/up GEMM's launch, a routed row its own blocks: no launch between
            act = pool.empty((k, c.moe_intermediate_size), self.operand_dtype)
            if norm_in is not None:
                b.moe_norm_route_gemm_rows(logits, norm_in[0], norm_in[1], h, gu, ids, weights, act,
                                           norm_topk_prob=c.norm_topk_prob, eps=c.rms_norm_eps)
            else:
                b.moe_route_gemm_rows(logits, h, gu, ids, weights, act, norm_topk_prob=c.norm_topk_prob)
            pool.release(logits)
            y = pool.empty((k, c.hidden_size), F32)
            b.moe_gemm_rows(act, down, ids, y, row_div=1, swiglu=False)
            pool.release(act)
            return y, ids, weights
        b.moe_route(logits, ids, weights, norm_topk_prob=c.norm_topk_prob)
        pool.release(logits)
        act = pool.empty((T * k, c.moe_intermediate_size), self.operand_dtype)
        y = pool.empty((T * k, c.hidden_size), F32)
        plan = (pool.empty((E + 1,), I32), pool.empty((expert_rows(T, k, E),), I32), pool.empty((T * k,), I32))
        b.moe_group(ids, *plan)
        b.moe_gemm(h, gu, *plan, act, row_div=k, swiglu=True)
        b.moe_gemm(act, down, *plan, y, row_div=1, swiglu=False)
        for t in (act, *plan):
            pool.release(t)
        return y, ids, weights

    def _combine(self, routed: tuple[Tensor, Tensor, Tensor]) -> Tensor:
        """The MoE block's output [T, H] from _moe's routed rows (whose buffers it releases)."""
        y, ids, weights = routed
        out = self.pool.empty((ids.shape[0], self.cfg.hidden_size), F32)
        self.backend.moe_combine(y, ids, weights, out)
        for t in routed:
            self.pool.release(t)
        return out
