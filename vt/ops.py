"""The operations models launch, by name: the Backend protocol's kernel surface.

A model never picks a kernel body or touches CuPy: it calls these, and the backend launches the kernel
library's op (backends/kernels/), whose NumPy twin runs on the CPU backend and whose CUDA kernel runs on
the CUDA backend. Every op writes only outputs its caller preallocated (nothing is allocated inside, so
every op captures), and launch shapes depend on tensor shapes only. Storage dtypes: float32, bf16 (as
uint16 bits) or fp16; what an op writes for a GEMM to read is narrowed to the weights' dtype as it is
written.
"""

from __future__ import annotations

from typing import Any


class Ops:
    """Mixed into Backend; a backend sets `kernels` to the library's op table (backends/kernels/library.py)."""

    kernels: Any = None
    # the decode attention's merge counters (backends/kernels/decode_attention.py MERGE_COUNTERS zeroed uint32): the
    # CUDA backend's device pointer; None: the reduce kernel merges a split context's partitions
    decode_merge_counters: Any = None

    def launch(self, kernel: Any, *args: Any, stream: Any = None, **kw: Any) -> None:
        raise NotImplementedError("need launch")

    def embed(self, table: Any, ids: Any, out: Any) -> None:
        """out [T, H] float32 = table[ids] (the table in its storage dtype)."""
        self.launch(self.kernels.embed, table, ids, out)

    def add_rms_norm(self, x: Any, delta: Any, w: Any, out: Any, *, eps: float, bias: Any = None) -> None:
        """The residual stream x [T, H] float32 += delta (+ bias), in place; then out = RMSNorm(x) * w in
        out's dtype. delta None: the norm alone."""
        self.launch(self.kernels.add_rms_norm, x, delta, bias, w, out, eps=eps)

    def qk_norm_rope_store(self, qkv: Any, w: Any, rope: Any, positions: Any, slots: Any, k_cache: Any, v_cache: Any,
                           q_out: Any, *, has_norm: bool, eps: float, bias: Any = None) -> None:
        """From the fused projection qkv [T, (nh + 2 nkv) hd] float32 (+ bias): q and k per-head RMSNorm (w
        [nh + nkv, hd], q's rows carrying the attention scale; or w alone without has_norm), rotary from the
        rope table [positions, 2 hd] (cos, signed sin); q into q_out [T, nh, hd] float32, k and v into the
        paged caches at each token's slot (slot -1: nothing written)."""
        self.launch(self.kernels.qk_norm_rope_store, qkv, bias, w, rope, positions, slots, k_cache, v_cache, q_out,
                    has_norm=has_norm, eps=eps)

    def feed_tokens(self, tokens: Any, src: Any, last: Any) -> None:
        """tokens[i] = last[src[i]] where src[i] >= 0 (int64): a decode step's inputs sampled by the step before,
        read on the device (async scheduling)."""
        self.launch(self.kernels.feed_tokens, tokens, src, last)

    def keep_sampled(self, ids: Any, dst: Any, last: Any) -> None:
        """last[dst[i]] = ids[i] where dst[i] >= 0 (int64): each row's sampled id kept at its request's slot."""
        self.launch(self.kernels.keep_sampled, ids, dst, last)

    def mask_tokens(self, logits: Any, mask: Any) -> None:
        """logits [n, V] float32: each token whose bit is clear in mask [n, ceil(V / 32)] int32 (token t: bit t % 32
        of word t / 32) to -1e30 (backends/kernels/tokens.py MASKED_LOGIT), in place: a structured output's grammar,
        before the sampler reads the row."""
        self.launch(self.kernels.mask_tokens, logits, mask)

    def gemm_silu_mul(self, a: Any, b: Any, gate_up: Any, act: Any, *, group: int) -> None:
        """The MLP's gate/up projection and its activation: gate_up [T, 2 I] float32 = a @ b, whose columns are gate's
        and up's `group` at a time (models/decoder.py), then act [T, I] = SiLU(gate) * up in act's dtype. On CUDA one
        launch where the shape's plan picked the skinny GEMM's SwiGLU epilogue (gate_up is then not written)."""
        self.launch(self.kernels.gemm_silu_mul, a, b, gate_up, act, group=group)

    def paged_decode_attention(self, q: Any, k_cache: Any, v_cache: Any, block_tables: Any, token_row: Any,
                               positions: Any, out: Any, part_o: Any = None, part_ml: Any = None) -> None:
        """Each token t (query heads q [T, nh, hd], pre-scaled) attends keys 0..positions[t] of its sequence,
        read through block_tables[token_row[t]]; out [T, nh, hd] in its dtype. A table wider than one
        partition needs the partials' scratch part_o [T, nh, P, hd] and part_ml [T, nh, P, 2] float32."""
        self.launch(self.kernels.paged_decode_attention, q, k_cache, v_cache, block_tables, token_row, positions,
                    out, part_o, part_ml)

    def paged_decode_attention_rows(self, q: Any, k_cache: Any, v_cache: Any, block_tables: Any, token_row: Any,
                                    positions: Any, out: Any, part_o: Any = None, part_ml: Any = None) -> None:
        """paged_decode_attention (the same arguments, the same output) for a step whose rows share sequences (a
        short prefill run whole, a row a token): on CUDA a block serves a few consecutive rows, and those of one
        sequence read each key once between them."""
        self.launch(self.kernels.paged_decode_attention_rows, q, k_cache, v_cache, block_tables, token_row,
                    positions, out, part_o, part_ml)

    def paged_rows_attention(self, q: Any, k_cache: Any, v_cache: Any, block_tables: Any, token_row: Any,
                             positions: Any, out: Any, part_o: Any = None, part_ml: Any = None) -> None:
        """paged_decode_attention's arguments and output (within its bound: q and P rounded to the 16-bit cache's
        dtype) for a step whose rows share sequences, on tensor cores: a block serves one KV head for 64 query rows,
        a sequence's keys read once for its rows in the block. Partials as many as rows_attention.num_partitions."""
        self.launch(self.kernels.paged_rows_attention, q, k_cache, v_cache, block_tables, token_row, positions, out,
                    part_o, part_ml)

    def paged_decode_attention_rope(self, qkv: Any, w: Any, rope: Any, positions: Any, slots: Any, k_cache: Any,
                                    v_cache: Any, block_tables: Any, token_row: Any, out: Any, part_o: Any = None,
                                    part_ml: Any = None, *, has_norm: bool, eps: float, bias: Any = None) -> None:
        """qk_norm_rope_store(qkv, ...) then paged_decode_attention of its q, in one launch (the q/k norm, rotary
        and KV write in the attention's prologue; q never leaves the kernel). For one token a sequence only: each
        token that writes the cache has its own block_tables row (the CPU twin refuses anything else)."""
        merge = {} if self.decode_merge_counters is None else {"merge_counters": self.decode_merge_counters}
        self.launch(self.kernels.paged_decode_attention_rope, qkv, bias, w, rope, slots, k_cache, v_cache,
                    block_tables, token_row, positions, out, part_o, part_ml, has_norm=has_norm, eps=eps, **merge)

    def paged_prefill_attention(self, q: Any, k_cache: Any, v_cache: Any, block_tables: Any, tiles: Any,
                                token_row: Any, positions: Any, out: Any) -> None:
        """Causal attention for a step's prefill chunks, one launch for all of them: tiles [n, 4] int32 name each
        tile's block-table row, first token, query count and first position; each query attends keys 0..its
        position through its table (earlier chunks' keys already in the cache). token_row / positions per token
        serve the float32-cache path, which runs the decode kernel per token."""
        self.launch(self.kernels.paged_prefill_attention, q, k_cache, v_cache, block_tables, tiles, token_row,
                    positions, out)

    def moe_route(self, logits: Any, ids: Any, weights: Any, *, norm_topk_prob: bool) -> None:
        """From router logits [T, E] float32: each token's top-k experts ids [T, k] int32 (descending logit, a tie to
        the lower expert) and weights [T, k] float32 (the softmax over all experts at those, renormalized over
        the k when norm_topk_prob)."""
        self.launch(self.kernels.moe_route, logits, ids, weights, norm_topk_prob=norm_topk_prob)

    def moe_group(self, ids: Any, offsets: Any, experts: Any, slots: Any) -> None:
        """The routed rows t k + j grouped by expert: expert e's are slots[offsets[e] .. offsets[e + 1]) (offsets
        [E + 1], slots [T k] int32); experts [min(E, T k)] lists the experts with rows, ascending, then -1."""
        self.launch(self.kernels.moe_group, ids, offsets, experts, slots)

    def moe_gemm(self, x: Any, w: Any, offsets: Any, experts: Any, slots: Any, out: Any, *, row_div: int,
                 swiglu: bool) -> None:
        """Every routed row's expert GEMM in one launch: out[s] = x[s // row_div] @ w[e]^T for each slot s of
        expert e (w [E, rows, K] in HF's Linear layout, x in its dtype, float32 accumulation). swiglu: w's rows
        are gate then up, out = SiLU(gate) * up in out's dtype; else out float32."""
        self.launch(self.kernels.moe_gemm, x, w, offsets, experts, slots, out, row_div=row_div, swiglu=swiglu)

    def moe_gemm_rows(self, x: Any, w: Any, ids: Any, out: Any, *, row_div: int, swiglu: bool) -> None:
        """moe_gemm without the grouping: out[r] = x[r // row_div] @ w[ids.flat[r]]^T for every routed row r, a
        row's expert read from ids. For a step of one token (its k experts are distinct, so no expert's weights
        are read twice)."""
        self.launch(self.kernels.moe_gemm_rows, x, w, ids, out, row_div=row_div, swiglu=swiglu)

    def moe_route_gemm_rows(self, logits: Any, x: Any, w: Any, ids: Any, weights: Any, out: Any, *,
                            norm_topk_prob: bool) -> None:
        """moe_route(logits, ids, weights), then moe_gemm_rows(x, w, ids, out, row_div=k, swiglu=True), in one
        launch: a step of one token routes and runs its experts' gate/up GEMMs with no launch between."""
        self.launch(self.kernels.moe_route_gemm_rows, logits, x, w, ids, weights, out, norm_topk_prob=norm_topk_prob)

    def moe_norm_route_gemm_rows(self, logits: Any, x: Any, ln: Any, h: Any, w: Any, ids: Any, weights: Any,
                                 out: Any, *, norm_topk_prob: bool, eps: float) -> None:
        """add_rms_norm(x, None, ln, h), then moe_route_gemm_rows(logits, h, w, ids, weights, out): the routed
        gate/up GEMM of the residual stream's norm (the consumer's norm). On CUDA one launch whose blocks norm the
        token's row themselves, h unwritten, the same bits the o projection's norm epilogue would have written."""
        self.launch(self.kernels.moe_norm_route_gemm_rows, logits, x, ln, h, w, ids, weights, out,
                    norm_topk_prob=norm_topk_prob, eps=eps)

    def moe_combine_add_rms_norm(self, y: Any, ids: Any, weights: Any, x: Any, w: Any, h: Any, *,
                                 eps: float) -> None:
        """moe_combine(y, ids, weights, out), then add_rms_norm(x, out, w, h), with no out: the MoE block's output
        joining the residual stream and the norm after it, in one launch."""
        self.launch(self.kernels.moe_combine_add_rms_norm, y, ids, weights, x, w, h, eps=eps)

    def moe_combine(self, y: Any, ids: Any, weights: Any, out: Any) -> None:
        """out [T, H] float32 = the sum over each token's k routed rows y [T k, H] float32 of weight * row, in
        ascending expert order."""
        self.launch(self.kernels.moe_combine, y, ids, weights, out)

    def gemm(self, a: Any, b: Any, out: Any) -> None:
        """out = a @ b, float32 out: cuBLAS on CUDA, with a low-precision b (weights) taking a in its dtype and
        accumulating in float32."""
        self.launch(self.kernels.gemm, a, b, out)

    def fuses_norm(self, a: Any, b: Any, out: Any, x: Any, w: Any, h: Any, *, eps: float) -> bool:
        """Whether gemm_add_rms_norm(a, b, out, x, w, h) runs the norm inside its GEMM (the skinny kernel's
        epilogue: a grid-wide tail, which the consumer's norm, gemm_add then rms_norm_gemm, takes away). On CUDA the
        shape's norm plan answers (planned, and timed while tuning, now if new, as the op itself would plan it);
        where the GEMM and the norm are separate kernels, moving the norm to its consumer only adds kernels. Here,
        with no such tail to weigh, yes: the CPU runs the ops CUDA runs where the answer is yes."""
        return True

    def gemm_add(self, a: Any, b: Any, out: Any, x: Any) -> None:
        """gemm(a, b, out), then x += out: a projection joining the residual stream whose next norm its consumer
        computes (rms_norm_gemm). On CUDA one launch where the shape's tuned GEMM is the skinny kernel, which leaves
        out unwritten."""
        self.launch(self.kernels.gemm_add, a, b, out, x)

    def rms_norm_gemm(self, x: Any, w: Any, h: Any, b: Any, out: Any, *, eps: float) -> None:
        """add_rms_norm(x, None, w, h), then gemm(h, b, out): a projection of the residual stream's next norm. On
        CUDA one launch where the shape's tuned GEMM is the skinny kernel, which computes h in every block and
        leaves h unwritten."""
        self.launch(self.kernels.rms_norm_gemm, x, w, h, b, out, eps=eps)

    def rms_norm_gemm_silu_mul(self, x: Any, w: Any, h: Any, b: Any, gate_up: Any, act: Any, *, group: int,
                               eps: float) -> None:
        """add_rms_norm(x, None, w, h), then gemm_silu_mul(h, b, gate_up, act, group): the MLP's gate/up projection
        of the residual stream's norm, in one launch where the skinny kernel serves it (h, gate_up unwritten)."""
        self.launch(self.kernels.rms_norm_gemm_silu_mul, x, w, h, b, gate_up, act, group=group, eps=eps)

    def gemm_add_rms_norm(self, a: Any, b: Any, out: Any, x: Any, w: Any, h: Any, *, eps: float) -> None:
        """gemm(a, b, out), then add_rms_norm(x, out, w, h): a projection joining the residual stream and the norm
        after it. On CUDA one launch where the shape's tuned GEMM is the skinny kernel (a decode step's few rows,
        backends/kernels/skinny_gemm.py); out is written either way."""
        self.launch(self.kernels.gemm_add_rms_norm, a, b, out, x, w, h, eps=eps)
