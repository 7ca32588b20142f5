"""One decoder family on a vt Backend, as the HF architectures define it: Qwen3ForCausalLM and
Qwen3MoeForCausalLM (q/k norm per head), Qwen2ForCausalLM (q/k/v bias, no q/k norm) and
LlamaForCausalLM (Llama 3.x: no norm, no bias, llama3 rope scaling). The config says which parts a
checkpoint has; `expected_tensors` is the manifest the loader checks before reading any weight.

Weights and the KV cache are long-lived (`Backend.empty`); every intermediate is a transient pool
tensor released as soon as it is dead, so a step's demand profile is what its capture needs.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from backends.kernels.convert import widen
from models import kernels as K
from models.base import Carry, ForwardBatch, KVCache, make_kv_cache
from models.config import ModelConfig
from models.rope import rope_table
from vt.backend import Backend, Tensor
from vt.dtypes import STORAGE, to_storage

F32 = np.float32


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
        self.w = self._load(ckpt.weights)
        self.rope_table = self._upload(rope_table(self.cfg))

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
            return widen(np, to_storage(np.asarray(hf[name], dtype=F32), self.dtype))

        def put(key: str, a: np.ndarray, low: bool = False) -> None:
            """low: a GEMM weight or the embedding, held in the model dtype (exactly: get rounded it)."""
            w[key] = self._upload(to_storage(a, self.dtype) if low else np.ascontiguousarray(a, dtype=F32))

        put("embed", get("model.embed_tokens.weight"), low=True)
        put("norm", get("model.norm.weight"))
        put("lm_head_t", (get("model.embed_tokens.weight") if c.tie_word_embeddings else get("lm_head.weight")).T,
            low=True)
        for i in range(c.num_hidden_layers):
            p, a = f"model.layers.{i}.", f"model.layers.{i}.self_attn."
            put(f"{i}.ln1", get(p + "input_layernorm.weight"))
            put(f"{i}.ln2", get(p + "post_attention_layernorm.weight"))
            put(f"{i}.qkv_t", np.concatenate([get(a + f"{n}_proj.weight") for n in "qkv"]).T, low=True)
            if c.has_qkv_bias:
                put(f"{i}.qkv_b", np.concatenate([get(a + f"{n}_proj.bias") for n in "qkv"]))
            put(f"{i}.o_t", get(a + "o_proj.weight").T, low=True)
            if c.has_o_bias:
                put(f"{i}.o_b", get(a + "o_proj.bias"))
            put(f"{i}.qk_norm", self._qk_scale(get, a))
            if c.is_sparse_layer(i):
                ex = [f"{p}mlp.experts.{e}." for e in range(c.num_experts)]
                put(f"{i}.router_t", get(p + "mlp.gate.weight").T, low=True)
                put(f"{i}.experts_gu", np.stack([np.concatenate([get(e + "gate_proj.weight"),
                                                                 get(e + "up_proj.weight")]).T for e in ex]), low=True)
                put(f"{i}.experts_down", np.stack([get(e + "down_proj.weight").T for e in ex]), low=True)
            else:
                put(f"{i}.gu_t", np.concatenate([get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")]).T,
                    low=True)
                put(f"{i}.down_t", get(p + "mlp.down_proj.weight").T, low=True)
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
        """The Model protocol's forward (models/base.py): the pieces back to back, every tensor from the pool."""
        carry = Carry(self.pool)
        for piece in self.pieces(fb, kv, carry):
            piece()
        self.head(fb, carry, logits, hidden)

    def carry_shapes(self, T: int) -> dict[str, tuple[tuple[int, ...], Any]]:
        """What lives across an attention break, for T tokens: the residual stream x, the layer's normed
        input h, its rotated q/k and attention output o, and the step's rope rows and KV write slots."""
        c = self.cfg
        nh, nkv, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        return {"x": ((T, c.hidden_size), F32), "h": ((T, c.hidden_size), F32), "qk": ((T, nh + nkv, hd), F32),
                "o": ((T, nh, hd), F32), "rope": ((T, 2 * hd), F32), "write_slots": ((T,), np.int64)}

    def pieces(self, fb: ForwardBatch, kv: KVCache, carry: Carry) -> list[Callable[[], None]]:
        """The forward up to the final hidden states (carry x) as segment, attention, segment, ...,
        segment: attention is the only part whose shape depends on each sequence's length, so a piecewise
        graph captures the segments and runs the attentions eagerly. An attention reads fb.seqs when it
        runs: a replay attends over that step's sequences. Tensors are drawn and released in the order
        of the unsplit forward (the H200 pool traces were recorded from it)."""
        L = self.cfg.num_hidden_layers
        out: list[Callable[[], None]] = [partial(self._start, fb, kv, carry)]
        for i in range(L):
            out.append(partial(self._attend, i, fb, kv, carry))
            out.append(partial(self._between, i, kv, carry, is_last=i == L - 1))
        return out

    def head(self, fb: ForwardBatch, carry: Carry, logits: Tensor, hidden: Tensor | None = None) -> None:
        """Final norm and LM head on the logit rows (prefill: fb.logits_rows; decode: every token)."""
        b, pool, c = self.backend, self.pool, self.cfg
        x = carry.get("x", ())
        if fb.is_prefill:
            assert fb.logits_rows is not None
            last = pool.empty((fb.logits_rows.shape[0], c.hidden_size), F32)
            b.launch(K.gather_rows, x, fb.logits_rows, last)
            carry.put("x")
            x = last
        normed = hidden if hidden is not None else pool.empty(x.shape, F32)
        b.launch(K.rmsnorm, x, self.w["norm"], normed, eps=c.rms_norm_eps)
        if self.group is None:
            b.launch(K.matmul, normed, self.w["lm_head_t"], logits)
        else:
            self._parallel_lm_head(normed, logits)
        if fb.is_prefill:
            pool.release(x)
        else:
            carry.put("x")
        if hidden is None:
            pool.release(normed)

    def _parallel_lm_head(self, normed: Tensor, logits: Tensor) -> None:
        """Each rank's vocabulary slice of the logits, gathered on every rank (each samples the same ids)."""
        b, pool, n, g = self.backend, self.pool, normed.shape[0], self.group
        local = pool.empty((n, self.vocab_rows), F32)
        b.launch(K.matmul, normed, self.w["lm_head_t"], local)
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
        """Embedding; what every layer reads, computed once per step (rope rows and KV write slots; for
        decode, each token's key rows in the cache and their visibility); layer 0 up to its attention."""
        b, c = self.backend, self.cfg
        T, hd = fb.input_ids.shape[0], c.head_dim
        x = carry.get("x", (T, c.hidden_size))
        if self.group is None:
            b.launch(K.embed, self.w["embed"], fb.input_ids, x)
        else:
            b.launch(K.embed_shard, self.w["embed"], fb.input_ids, x, start=self.vocab_start)
            self._reduce(x)
        rope, slots = carry.get("rope", (T, 2 * hd)), carry.get("write_slots", (T,), np.int64)
        b.launch(K.step_meta, self.rope_table, fb.positions, fb.slot_mapping, rope, slots, trash_slot=kv.trash_slot)
        if not fb.is_prefill:
            assert fb.block_tables is not None and fb.token_row is not None
            L = fb.block_tables.shape[1] * kv.block_size
            index = carry.get("kv_index", (T, c.num_key_value_heads, L), np.int64)
            visible = carry.get("visible", (T, L), np.bool_)
            b.launch(K.decode_meta, fb.block_tables, fb.token_row, fb.positions, index, visible,
                     block_size=kv.block_size)
        self._qkv(0, kv, carry)

    def _qkv(self, i: int, kv: KVCache, carry: Carry) -> None:
        """Layer i's input norm (into h, kept for its second norm), q/k/v projection, q/k norm and rope
        (into qk) and its KV store."""
        b, pool, c, w = self.backend, self.pool, self.cfg, self.w
        x = carry.get("x", ())
        T, H = x.shape
        nh, nkv, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        h = carry.get("h", (T, H))
        b.launch(K.rmsnorm, x, w[f"{i}.ln1"], h, eps=c.rms_norm_eps)
        qkv = pool.empty((T, (nh + 2 * nkv) * hd), F32)
        b.launch(K.matmul, h, w[f"{i}.qkv_t"], qkv)
        if c.has_qkv_bias:
            b.launch(K.add, qkv, w[f"{i}.qkv_b"], qkv)
        qk = carry.get("qk", (T, nh + nkv, hd))
        b.launch(K.qk_norm_rope, qkv, w[f"{i}.qk_norm"], carry.get("rope", ()), qk, eps=c.rms_norm_eps,
                 norm=c.has_qk_norm)
        b.launch(K.store_kv, qkv, qk, kv.k[i], kv.v[i], carry.get("write_slots", ()))
        pool.release(qkv)
        carry.get("o", (T, nh, hd))

    def _attend(self, i: int, fb: ForwardBatch, kv: KVCache, carry: Carry) -> None:
        qk, o = carry.get("qk", ()), carry.get("o", ())
        if fb.is_prefill:
            self.backend.launch(K.attention_prefill, qk, kv.k[i], kv.v[i], o, seqs=fb.seqs)
        else:
            self.backend.launch(K.attention_decode, qk, kv.k[i], kv.v[i], carry.get("kv_index", ()),
                                carry.get("visible", ()), o)

    def _between(self, i: int, kv: KVCache, carry: Carry, is_last: bool) -> None:
        """Layer i after its attention (o projection, residual, MLP or MoE, residual), then layer i + 1 up
        to its attention (or, after the last layer, the step's metadata released)."""
        b, pool, c, w = self.backend, self.pool, self.cfg, self.w
        x, o, h = carry.get("x", ()), carry.get("o", ()), carry.get("h", ())
        T, H = x.shape
        carry.put("qk")
        out = pool.empty((T, H), F32)
        b.launch(K.matmul, o.view((T, o.shape[1] * o.shape[2])), w[f"{i}.o_t"], out)
        self._reduce(out)
        if c.has_o_bias:
            b.launch(K.add, out, w[f"{i}.o_b"], out)
        carry.put("o")
        b.launch(K.add, x, out, x)
        pool.release(out)
        b.launch(K.rmsnorm, x, w[f"{i}.ln2"], h, eps=c.rms_norm_eps)
        mlp = self._moe(i, h) if c.is_sparse_layer(i) else self._mlp(i, h)
        self._reduce(mlp)
        b.launch(K.add, x, mlp, x)
        pool.release(mlp)
        carry.put("h")
        if not is_last:
            self._qkv(i + 1, kv, carry)
        else:
            for name in ("rope", "write_slots", "kv_index", "visible"):
                carry.put(name)

    def _mlp(self, i: int, h: Tensor) -> Tensor:
        b, pool, c = self.backend, self.pool, self.cfg
        T = h.shape[0]
        gu = pool.empty((T, 2 * c.intermediate_size), F32)
        b.launch(K.matmul, h, self.w[f"{i}.gu_t"], gu)
        act = pool.empty((T, c.intermediate_size), F32)
        b.launch(K.silu_mul, gu, act)
        pool.release(gu)
        out = pool.empty((T, c.hidden_size), F32)
        b.launch(K.matmul, act, self.w[f"{i}.down_t"], out)
        pool.release(act)
        return out

    def _moe(self, i: int, h: Tensor) -> Tensor:
        b, pool, c = self.backend, self.pool, self.cfg
        T = h.shape[0]
        logits = pool.empty((T, c.num_experts), F32)
        b.launch(K.matmul, h, self.w[f"{i}.router_t"], logits)
        route = pool.empty((T, c.num_experts), F32)
        b.launch(K.moe_route, logits, route, top_k=c.num_experts_per_tok, norm_topk_prob=c.norm_topk_prob)
        pool.release(logits)
        out = pool.empty((T, c.hidden_size), F32)
        b.launch(K.moe_experts, h, self.w[f"{i}.experts_gu"], self.w[f"{i}.experts_down"], route, out)
        pool.release(route)
        return out

