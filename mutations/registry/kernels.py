"""The kernel library (issue 25): each decode-kernel defect named twice, in the NumPy twin (killed on the CPU
by the twin-against-dense-attention gate) and in the CUDA kernel (killed in the GPU lane by the
kernel-against-twin gate); the rope variant, which lives in the table the fused op reads, against
transformers on both lanes."""

from __future__ import annotations

import dataclasses
from typing import Any

from backends.kernels import skinny_gemm, skinny_mma
from mutations.model import Mutation
from mutations.registry.gates import ARCH

KERNELS = "tests/backends/test_kernels.py"
DECODE_TWIN = f"{KERNELS}::test_paged_decode_twin_equals_dense_attention"
DECODE_CUDA = f"{KERNELS}::test_cuda_paged_decode_equals_its_twin"
TWIN = "backends/kernels/decode_attention.py"
CU = "backends/kernels/decode_attention.cu"
SKINNY = "tests/backends/test_skinny_gemm.py"
# test_skinny_gemm.py's NORM_SHAPES (the 30B-A3B's and 8B's rows added in session 24)
NORM_TWIN_SHAPES = [(1, 1024, 2048), (1, 1024, 3072), (8, 1024, 3072), (3, 2048, 1024), (2, 512, 96), (1, 2048, 4096),
                    (8, 4096, 4096)]
SKINNY_SHAPES = [(1, 1024, 1024), (3, 4096, 1024), (8, 5120, 2048), (2, 1000, 96), (1, 128, 2048), (5, 8, 4096)]
SKINNY_PLAN = f"{SKINNY}::test_a_decode_shapes_plan_times_the_skinny_gemm_and_every_candidate_is_right"
# The (shape, configuration) cases split along K, by the test's ids: only those have partials and counters.
SKINNY_SPLIT = [f"{m}-{n}-{k}-{d}-tc{c.tc}u{c.unroll}x{c.per_sm}" for m, n, k in SKINNY_SHAPES
                for d in ("bfloat16", "float16") for c in skinny_gemm.CONFIGS if skinny_gemm.split(m, n, k, c)[1] > 1]
SKINNY_CONFIGS = tuple(f"tc{c.tc}u{c.unroll}x{c.per_sm}" for c in skinny_gemm.CONFIGS)
CLUSTER = "tests/backends/test_skinny_cluster.py"
CLUSTER_SHAPES = [*SKINNY_SHAPES, (1, 64, 10)]  # the test's shapes and its short K
CLUSTER_IDS = tuple(f"tc{c.tc}u{c.unroll}" for c in skinny_gemm.CLUSTER_CONFIGS)


def cases(test: str, names: tuple[str, ...], dtypes: tuple[str, ...] = ("float32", "bfloat16")) -> tuple[str, ...]:
    return tuple(f"{test}[{n}-{d}]" for n in names for d in dtypes)


# A float32 cache has no tensor-core prefill: the prefill kernel's CUDA body runs the decode kernel over every token
# (backends/kernels/prefill_attention.py), so its twin test's float32 cases fail too when the decode kernel is broken
# (the H200, session 12).
PREFILL_BY_DECODE = "tests/backends/test_kernels.py::test_cuda_paged_prefill_equals_its_twin"
# The twin at a lowered partition floor (VT_DECODE_MIN_PARTITION, session 26): a broken twin fails it too.
FLOOR_TWIN = tuple(f"tests/backends/test_kernels.py::test_a_lowered_partition_floor_splits_a_short_context_and_"
                   f"keeps_its_numbers[{f}]" for f in (64, 128))

ENTRIES: list[Mutation] = [
    Mutation(
        id="decode-twin-reads-a-block-past-the-table",
        description="the decode twin reads keys up to one block past each token's context",
        file=TWIN, old="        valid = pos[None, :] < end[:, None]  # [T, tile]\n",
        new="        valid = pos[None, :] < end[:, None] + bs  # [T, tile]\n",
        gates=(*cases(DECODE_TWIN, ("one-token-gqa1", "block-edges-gqa2", "tiles-gqa4", "partitions-gqa8", "full-width-mqa", "verify-q4-gqa2")), *FLOOR_TWIN),
    ),
    Mutation(
        id="cuda-decode-reads-a-block-past-the-table",
        description="the decode kernel reads keys up to one block past each token's context",
        file=CU, old="        end = min(ctx, start + partition);\n",
        new="        end = min(ctx + block_size, start + partition);\n",
        gates=(*cases(DECODE_CUDA, ("one-token-gqa1", "block-edges-gqa2", "tiles-gqa4", "partitions-gqa8", "full-width-mqa", "verify-q4-gqa2"), ("float32", "bfloat16", "float16")), PREFILL_BY_DECODE),
        needs_gpu=True,
    ),
    Mutation(
        id="decode-twin-drops-the-online-rescale",
        description="the decode twin adds a tile's values without rescaling the running output to the new max",
        file=TWIN, old="        acc = acc * alpha[..., None] + np.matmul(e, v.transpose(0, 2, 1, 3))",
        new="        acc = acc + np.matmul(e, v.transpose(0, 2, 1, 3))",
        gates=cases(DECODE_TWIN, ("tiles-gqa4", "partitions-gqa8", "verify-q4-gqa2")),
    ),
    Mutation(
        id="cuda-decode-drops-the-online-rescale",
        description="the decode kernel adds a tile's values without rescaling its accumulators to the new max",
        file=CU, old="for (int i = 0; i < L::DPT; i++) acc[h][i] *= a;  // the online-softmax rescale",
        new="for (int i = 0; i < L::DPT; i++) acc[h][i] *= 1.0f;  // the online-softmax rescale",
        gates=(*cases(DECODE_CUDA, ("tiles-gqa4", "partitions-gqa8", "full-width-mqa", "verify-q4-gqa2"),
                      ("float32", "bfloat16", "float16")), PREFILL_BY_DECODE),
        needs_gpu=True,
    ),
    Mutation(
        id="decode-twin-wrong-kv-head",
        description="the decode twin pairs query head h with KV head h % nkv instead of h // (nh / nkv)",
        file=TWIN, old="    qg = q.reshape(T, nkv, nh // nkv, hd)  # query head h reads KV head h // (nh // nkv)\n",
        new="    qg = q.reshape(T, nh // nkv, nkv, hd).transpose(0, 2, 1, 3)\n",
        gates=(*cases(DECODE_TWIN, ("block-edges-gqa2", "tiles-gqa4", "partitions-gqa8", "verify-q4-gqa2")), *FLOOR_TWIN),
    ),
    Mutation(
        id="decode-launch-never-splits-a-kv-heads-query-heads",
        description="head_split keeps every KV head's query heads in one block, however few blocks the launch has",
        file=TWIN, old="    while split < group and group % (2 * split) == 0",
        new="    while False and split < group and group % (2 * split) == 0",
        gates=("tests/backends/test_kernels.py::test_a_small_decode_launch_deals_a_kv_heads_query_heads_to_more_blocks",
               "tests/backends/test_kernels.py::test_decode_cases_reach_every_path"),
    ),
    Mutation(
        id="cuda-decode-split-blocks-read-the-wrong-kv-head",
        description="a launch whose KV heads' query heads are dealt to several blocks reads KV head blockIdx % nkv, "
                    "not the block's own",
        file=CU, old="        kvh = blockIdx.x / (gridDim.x / nkv);",
        new="        kvh = blockIdx.x % nkv;",
        gates=cases(DECODE_CUDA, ("block-edges-gqa2", "tiles-gqa4"), ("float32", "bfloat16", "float16")),
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-decode-wrong-kv-head",
        description="the decode kernel serves KV head kvh's block with query heads h * nkv + kvh (interleaved)",
        file=CU, old="        const float* qh = q + (at.t * at.nh + at.head0 + h) * HD + dg * L::DPT;\n",
        new="        const float* qh = q + (at.t * at.nh + h * nkv + at.kvh) * HD + dg * L::DPT;\n",
        # full-width-mqa: its launch deals its one KV head's four query heads to four blocks (head_split), and
        # interleaving gives every one of them query head 0
        gates=(*cases(DECODE_CUDA, ("block-edges-gqa2", "tiles-gqa4", "partitions-gqa8", "verify-q4-gqa2",
                                    "full-width-mqa"),
                      ("float32", "bfloat16", "float16")), PREFILL_BY_DECODE),
        needs_gpu=True,
    ),
    Mutation(
        id="decode-splits-past-the-reduce-kernels-partitions",
        description="partition_size splits a context twice as often as TARGET_BLOCKS allows: a long context's "
                    "launch then has more partitions than the reduce kernel keeps weights for",
        file=TWIN, old="    splits = max(1, TARGET_BLOCKS // max(1, num_tokens * num_kv_heads))\n",
        new="    splits = max(1, 2 * TARGET_BLOCKS // max(1, num_tokens * num_kv_heads))\n",
        gates=(f"{KERNELS}::test_a_launch_never_splits_a_context_more_often_than_the_reduce_kernel_holds",
               *(f"{KERNELS}::test_no_decode_or_rows_launch_splits_past_the_reduce_kernels_partitions[{f}]"
                 for f in ("256", "128", "64"))),
    ),
    Mutation(
        id="rows-target-choice-past-the-reduce-kernels-partitions",
        description="VT_ROWS_TARGET_BLOCKS offers 512: a one-token rows launch over a long table would split into "
                    "more partitions than the reduce kernel keeps weights for, and raise in a step",
        file="vt/env.py", old='ROWS_TARGET_BLOCKS = ("256", "32", "16", "8")\n',
        new='ROWS_TARGET_BLOCKS = ("256", "32", "16", "8", "512")\n',
        gates=tuple(f"{KERNELS}::test_no_decode_or_rows_launch_splits_past_the_reduce_kernels_partitions[{f}]"
                    for f in ("256", "128", "64")),
        expect="VT_ROWS_TARGET_BLOCKS=512",
    ),
    Mutation(
        id="cuda-decode-warp-merge-ignores-the-max",
        description="the decode kernel merges its warps' partial sums at equal weight, not each at the block's max "
                    "(the twin has no warps: its partition merge is the twin mutant below)",
        file=CU, old="                const float f = exp2_ftz(wm[w][h] - M);  // a warp's weight at the block's max\n",
        new="                const float f = wm[w][h] > neg_inf() ? 1.0f : 0.0f;\n",
        gates=(*cases(DECODE_CUDA, ("block-edges-gqa2", "tiles-gqa4", "partitions-gqa8", "full-width-mqa",
                                    "verify-q4-gqa2"), ("float32", "bfloat16", "float16")), PREFILL_BY_DECODE),
        needs_gpu=True,
    ),
    Mutation(
        id="decode-twin-reduction-sums-unrescaled-parts",
        description="the twin combines a long context's partitions by their sums alone, each at its own max",
        file=TWIN, old="        share = np.where(lsum > 0, np.exp(m - np.where(np.isinf(M), 0, M)) * lsum, 0)  # at the common max\n",
        new="        share = np.where(lsum > 0, lsum, 0)\n",
        gates=(*cases(DECODE_TWIN, ("tiles-gqa4", "partitions-gqa8", "verify-q4-gqa2")), *FLOOR_TWIN),
    ),
    Mutation(
        id="cuda-decode-reduction-sums-unrescaled-parts",
        description="the partitions' merge (the reduce kernel's, and the rope kernel's last block's) weights each "
                    "partition by its sum alone, at its own max, not the common one",
        file=CU, old="        const float share = expf(ml(2 * p) - M) * ml(2 * p + 1);  // a part's weight\n",
        new="        const float share = ml(2 * p + 1);\n",
        gates=cases(DECODE_CUDA, ("tiles-gqa4", "partitions-gqa8", "verify-q4-gqa2"), ("float32", "bfloat16", "float16")),
        needs_gpu=True,
    ),
    Mutation(
        id="rope-variant-ignored-by-the-fused-op",
        description="the fused q/k norm + rotary + KV write reads a plain-RoPE table whatever the checkpoint's variant",
        file="models/decoder.py", old="        self.rope_table = self._upload(rope_table(self.cfg))\n",
        new="        self.rope_table = self._upload(rope_table(__import__('dataclasses').replace(self.cfg, "
            "rope_type='default')))\n",
        gates=(*(f"{ARCH}::{t}[{a}]" for a in ("qwen3-yarn", "llama3") for t in (
                   "test_greedy_tokens_and_logits_match_transformers", "test_a_bf16_checkpoint_widens_exactly")),
               f"{ARCH}::test_dtype_bfloat16_computes_as_transformers_bf16_does[qwen3-yarn]"),
    ),
    Mutation(
        id="cuda-rope-variant-ignored-by-the-fused-op",
        description="on CUDA, the fused rotary reads a plain-RoPE table whatever the checkpoint's variant",
        file="models/decoder.py", old="        self.rope_table = self._upload(rope_table(self.cfg))\n",
        new="        self.rope_table = self._upload(rope_table(__import__('dataclasses').replace(self.cfg, "
            "rope_type='default')))\n",
        gates=(*(f"{ARCH}::{t}[{a}]" for a in ("qwen3-yarn", "llama3") for t in (
                   "test_cuda_greedy_tokens_and_logits_match_transformers",
                   "test_greedy_tokens_and_logits_match_transformers", "test_a_bf16_checkpoint_widens_exactly")),
               f"{ARCH}::test_dtype_bfloat16_computes_as_transformers_bf16_does[qwen3-yarn]"),
        needs_gpu=True,
    ),
]

PREFILL_TWIN = f"{KERNELS}::test_paged_prefill_twin_equals_causal_attention"
PREFILL_CUDA = f"{KERNELS}::test_cuda_paged_prefill_equals_its_twin"
# The two-heads-a-block variant shares the prefill kernel's body and the tensor-core tile: what breaks them breaks it
# (the H200, session 30: three prefill mutants were Overreach on it)
PREFILL_HPB = f"{KERNELS}::test_cuda_paged_prefill_two_heads_a_block_equals_its_twin"
# The warpgroup kernel (prefill_wgmma.cu) runs tensor_core.cuh's softmax_tile too: what breaks the tile's softmax
# breaks it
PREFILL_WGMMA = f"{KERNELS}::test_cuda_paged_prefill_wgmma_equals_its_twin"
PWG = "backends/kernels/prefill_wgmma.cu"
# The CPU tests that call the prefill binding with the CUDA backend's namespace and an sm_90 stand-in
WGMMA_LAUNCHES = (f"{KERNELS}::test_the_wgmma_binding_takes_the_backends_namespace",
                  f"{KERNELS}::test_the_wgmma_binding_counts_a_graph_buckets_tiles_by_its_tokens",
                  f"{KERNELS}::test_heads_a_block_is_said_not_to_apply_where_the_wgmma_kernel_serves")
PREFILL_CASES = ("one-prompt", "chunks-over-earlier-kv", "tile-edges", "long-over-earlier-kv")
PTWIN = "backends/kernels/prefill_attention.py"
PCU = "backends/kernels/prefill_attention.cu"
TCU = "backends/kernels/tensor_core.cuh"
RA = "tests/backends/test_rows_attention.py"
ROWS_CUDA = f"{RA}::test_cuda_rows_attention_equals_its_twin"
# The hit at each VT_ROWS_TARGET_BLOCKS partition count and over 8,192 keys (session 30; not yet run on a GPU): the
# same file, so a rows mutant that breaks them is named here or reads as Overreach
ROWS_HIT_CUDA = (f"{RA}::test_cuda_rows_attention_at_every_target_equals_its_twin",
                 f"{RA}::test_cuda_rows_attention_over_a_long_hit_equals_its_twin")
# The hit at one key tile a partition (VT_ROWS_MIN_PARTITION=64, session 41; not yet run on a GPU): broken by the
# mutants that break every partition (the mask, the partials' units, the KV head), not by a dropped rescale between
# a partition's tiles, which has one
ROWS_ONE_TILE_CUDA = f"{RA}::test_cuda_rows_attention_in_one_tile_partitions_equals_its_twin"
ROWS_CASES = ("prefix-hit-16x1024", "three-chunks-gqa4", "runs-cross-blocks-gqa8", "mha-partition-edges",
              "decode-rows-beside-a-tail", "block-128-gqa3", "one-partition-of-80-keys", "mha-run-of-70")
ROWS_SPLIT = tuple(c for c in ROWS_CASES if c != "one-partition-of-80-keys")  # the cases of several partitions
LOW = ("bfloat16", "float16")

ENTRIES += [
    Mutation(
        id="prefill-twin-causal-mask-off-by-one",
        description="the prefill twin lets each query see the key one position after its own",
        file=PTWIN, old="s = np.where(keys[None, None, :] > qpos[None, :, None], -np.inf, s)",
        new="s = np.where(keys[None, None, :] > qpos[None, :, None] + 1, -np.inf, s)",
        gates=cases(PREFILL_TWIN, PREFILL_CASES),
    ),
    Mutation(
        id="cuda-prefill-causal-mask-off-by-one",
        description="the tensor-core tile (tensor_core.cuh: the prefill and rows kernels) lets each query see the key "
                    "one position after its own",
        file=TCU, old="                if (8 * n + (e & 1) > reach[e >> 1]) sc[n][e] = neg_inf();",
        new="                if (8 * n + (e & 1) > reach[e >> 1] + 1) sc[n][e] = neg_inf();",
        # float32: the decode kernel; in every rows case a row would see the key past its own (a later row's, or a
        # zero-filled one past the segment's reach, which would weigh exp(-max))
        gates=cases(PREFILL_CUDA, PREFILL_CASES, ("bfloat16", "float16")) + cases(ROWS_CUDA, ROWS_CASES, LOW)
        + (PREFILL_HPB,) + ROWS_HIT_CUDA + (ROWS_ONE_TILE_CUDA,) + cases(PREFILL_WGMMA, PREFILL_CASES, LOW),
        needs_gpu=True,
    ),
    Mutation(
        id="prefill-twin-chunk-blind-to-earlier-kv",
        description="the prefill twin attends only to keys from its own tile's first position on, not earlier chunks'",
        file=PTWIN, old="s = np.where(keys[None, None, :] > qpos[None, :, None], -np.inf, s)",
        new="s = np.where((keys[None, None, :] > qpos[None, :, None]) | (keys[None, None, :] < p0), -np.inf, s)",
        gates=cases(PREFILL_TWIN, ("chunks-over-earlier-kv", "tile-edges", "long-over-earlier-kv")),
    ),
    Mutation(
        id="cuda-prefill-chunk-blind-to-earlier-kv",
        description="the prefill kernel skips the key tiles wholly before its first query (earlier chunks' keys), "
                    "computing its first tile's keys in their place",
        file=PCU, old="    for (; k0 + PREFILL_BN - 1 <= p0; k0 += PREFILL_BN) tile_step(k0, Bool<false>{});\n",
        # each gate case has a chunk whose first position is past its first key tile
        new="    k0 = p0 / PREFILL_BN * PREFILL_BN;\n",
        gates=cases(PREFILL_CUDA, ("chunks-over-earlier-kv", "tile-edges", "long-over-earlier-kv"),
                    ("bfloat16", "float16")) + (PREFILL_HPB,),
        needs_gpu=True,
    ),
]

CHUNKED = "tests/engine/test_chunked_prefill.py"

ENTRIES += [
    Mutation(
        id="mixed-step-decode-rows-read-prefill-positions",
        description="in a mixed step the decode attention reads the positions of the batch's last tokens (the prefill "
                    "rows'), not the decode rows' own",
        file="models/decoder.py",
        old="            self._decode_attention(i, q.view((D, nh, hd)), o.view((D, nh, hd)), fb.positions.view((D,)),\n",
        new="            self._decode_attention(i, q.view((D, nh, hd)), o.view((D, nh, hd)),\n"
            "                                   fb.positions.view((D,), offset=8 * (T - D)),\n",
        gates=(*(f"{CHUNKED}::test_chunked_runs_generate_what_the_unchunked_run_does[{b}]" for b in (16, 33, 64)),
               f"{CHUNKED}::test_a_preempted_chunked_prefill_recomputes_to_the_same_tokens_and_prompt_logprobs"),
    ),
    Mutation(
        id="mixed-step-runs-two-forwards",
        description="a step with decodes and prefill chunks runs the decode graph and the prefill as two forwards",
        file="vt/engine/worker/runner.py",
        old="            if chunks and decodes and not speculating:",
        new="            if False:",
        gates=(f"{CHUNKED}::test_a_mixed_step_is_one_forward_and_one_sampler_launch",),
    ),
    Mutation(
        id="skinny-twin-drops-a-k-slice",
        description="the skinny GEMM's twin adds every K slice's partial product but the last",
        file="backends/kernels/skinny_gemm.py", old="    for i in range(s):\n", new="    for i in range(s - 1):\n",
        gates=(*(f"{SKINNY}::test_twin_equals_the_product[{m}-{n}-{k}-{d}-{c}]" for m, n, k in SKINNY_SHAPES
                 for d in ("bfloat16", "float16") for c in SKINNY_CONFIGS),
               f"{SKINNY}::test_the_swiglu_twin_activates_each_interleaved_pair",  # the SwiGLU twin's GEMM is it
               *(f"{SKINNY}::test_the_norm_twin_adds_the_product_into_x_and_norms_it[{m}-{n}-{k}]"  # and the norm's
                 for m, n, k in NORM_TWIN_SHAPES)),
    ),
    Mutation(
        id="cuda-skinny-drops-a-k-slice-partial",
        description="the skinny GEMM's last block adds the K slices' partials from the second on",
        file="backends/kernels/skinny_gemm.cu", old="for (int s = 0; s < S; s++) v +=",
        new="for (int s = 1; s < S; s++) v +=",
        # the norm epilogue's C comes from this sum (its shapes split K): killed on the H200 (session 23, run1)
        gates=(*(f"{SKINNY}::test_cuda_skinny_gemm_equals_its_twin_twice_on_one_scratch[{case}]"
                 for case in SKINNY_SPLIT), SKINNY_PLAN,
               f"{SKINNY}::test_cuda_skinny_gemm_with_the_norm_epilogue_equals_its_twin_on_one_scratch"),
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-skinny-cluster-adds-its-own-slice-only",
        description="the cluster's first block writes its own slice's partial tile as the column tile's sum, never "
                    "reading the other blocks' shared memory",
        file="backends/kernels/skinny_gemm.cu",
        old="                    for (int r = 0; r < S; r++) v += cluster_load(&slice_tile[m][col], r);\n",
        new="                    for (int r = 0; r < 1; r++) v += cluster_load(&slice_tile[m][col], r);\n",
        gates=(*(f"{CLUSTER}::test_cuda_cluster_skinny_gemm_equals_its_twin[{m}-{n}-{k}-{d}-{c}]"
                 for m, n, k in CLUSTER_SHAPES for d in ("bfloat16", "float16") for c in CLUSTER_IDS),
               *(f"{CLUSTER}::test_cuda_cluster_skinny_gemm_with_the_norm_epilogue_equals_its_twin[{m}-{n}-{k}-{c}]"
                 for m, n, k in [*NORM_TWIN_SHAPES, (1, 256, 10)] for c in CLUSTER_IDS),  # the test's CLUSTER_NORM_SHAPES
               f"{CLUSTER}::test_under_the_flag_a_decode_plan_times_the_cluster_configurations_and_each_is_right"),
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-skinny-cluster-swiglu-adds-its-own-slice-only",
        description="with the SwiGLU epilogue, the cluster's first block activates its own slice's gate and up sums "
                    "alone",
        file="backends/kernels/skinny_gemm.cu",
        old="                    for (int r = 0; r < S; r++) {\n                        g += cluster_load(",
        new="                    for (int r = 0; r < 1; r++) {\n                        g += cluster_load(",
        gates=tuple(f"{CLUSTER}::test_cuda_cluster_skinny_gemm_with_the_swiglu_epilogue_equals_its_twin[{m}-{n}-{k}-{c}]"
                    for m, n, k in [(1, 6144, 1024), (8, 6144, 1024), (1, 24576, 4096), (3, 1040, 96),
                                    (2, 256, 2048), (1, 256, 10)] for c in CLUSTER_IDS),
        needs_gpu=True,
    ),
    Mutation(
        id="skinny-norm-twin-norms-without-the-add",
        description="the norm epilogue's twin norms the residual stream as it was, never adding the GEMM's output",
        file="backends/kernels/skinny_gemm.py", old="    add_rms_norm(np, x, out, None, w, h, eps=eps)\n",
        new="    add_rms_norm(np, x, None, None, w, h, eps=eps)\n",
        gates=tuple(f"{SKINNY}::test_the_norm_twin_adds_the_product_into_x_and_norms_it[{m}-{n}-{k}]"
                    for m, n, k in NORM_TWIN_SHAPES),
    ),
    Mutation(
        id="skinny-cluster-flag-ignored",
        description="the tuner never times the cluster configurations, VT_SKINNY_CLUSTER=1 or not",
        file="backends/kernels/skinny_gemm.py",
        old="    return CONFIGS + CLUSTER_CONFIGS if flags().skinny_cluster else CONFIGS\n",
        new="    return CONFIGS\n",
        gates=(f"{CLUSTER}::test_the_tuner_times_the_cluster_configurations_only_under_the_flag",),
    ),
    Mutation(
        id="skinny-cluster-split-one-slice-short",
        description="a cluster configuration's K goes to one slice fewer than the cluster's blocks",
        file="backends/kernels/skinny_gemm.py",
        old="        return -(-k // CLUSTER), CLUSTER\n", new="        return -(-k // CLUSTER), CLUSTER - 1\n",
        # the short K: seven slices of two rows still cover its ten, so its product stays right
        gates=(*(f"{CLUSTER}::test_a_cluster_configuration_covers_k_in_the_clusters_slices[{m}-{n}-{k}-{c}]"
                 for m, n, k in CLUSTER_SHAPES for c in CLUSTER_IDS),
               *(f"{CLUSTER}::test_the_twin_of_a_cluster_configuration_equals_the_product[{m}-{n}-{k}-{d}-{c}]"
                 for m, n, k in SKINNY_SHAPES for d in ("bfloat16", "float16") for c in CLUSTER_IDS)),
    ),
    Mutation(
        id="cuda-skinny-counters-left-raised",
        description="the skinny GEMM's last block leaves its tile counter raised: the next call's tiles never "
                    "see their last slice",
        file="backends/kernels/skinny_gemm.cu", old="    if (threadIdx.x == 0) counters[blockIdx.x] = 0;\n",
        new="",
        # every epilogue's split tiles share the counters, and their tests reuse one scratch; a decode step's
        # captured GEMMs share it too (H200, session 21: the step test failed beside the listed ones)
        gates=(*(f"{SKINNY}::test_cuda_skinny_gemm_equals_its_twin_twice_on_one_scratch[{case}]"
                 for case in SKINNY_SPLIT), SKINNY_PLAN,
               f"{SKINNY}::test_cuda_skinny_gemm_with_the_norm_epilogue_equals_its_twin_on_one_scratch",
               f"{SKINNY}::test_cuda_skinny_gemm_with_the_swiglu_epilogue_equals_its_twin_on_one_scratch",
               f"{SKINNY}::test_on_the_gpu_a_decode_step_on_skinny_plans_norms_inside_its_gemms_and_computes_the_same"),
        needs_gpu=True,
    ),
]

WHOLE = "tests/engine/test_whole_short_steps.py"
WHOLE_OUTPUTS = tuple(f"{WHOLE}::test_hits_run_whole_generate_what_the_prefill_path_generates[{p}]"
                      for p in ("greedy", "seeded"))
SHORT = "tests/engine/test_short_prefill.py"
SHORT_ROUTE = "test_a_hits_tail_takes_the_decode_kernel_a_miss_and_a_short_prompt_the_prefill_kernel"

ENTRIES += [
    Mutation(
        id="short-prefill-takes-the-prefill-kernel",
        description="a step of few prefill tokens (a prefix hit's tail) attends with the tensor-core prefill kernel, "
                    "whose one block per tile and head walks the whole cached context serially",
        file="models/decoder.py",
        old="    return (sum(n for _, n in spans) <= SHORT_PREFILL_TOKENS",
        new="    return (sum(n for _, n in spans) <= 0",
        gates=(f"{SHORT}::{SHORT_ROUTE}",),
    ),
    Mutation(
        id="short-prefill-ignores-the-context",
        description="every step of few prefill tokens attends with the decode kernel, a fresh short prompt's too "
                    "(two launches a layer where the prefill kernel's one is faster)",
        file="models/decoder.py",
        old="            and max((p0 + n for p0, n in spans), default=0) > LONG_CONTEXT_KEYS)",
        new="            and max((p0 + n for p0, n in spans), default=0) >= 0)",
        gates=(f"{SHORT}::{SHORT_ROUTE}",),
    ),
    Mutation(
        id="short-step-runs-piecewise",
        description="a prefix hit's tail runs through the piecewise prefill graph, an eager attention launch between "
                    "every two layers, not whole as one captured decode step",
        file="vt/engine/worker/runner.py",
        old="        if self._runs_whole(chunks, scored, num_decode):\n",
        new="        if False:\n",
        gates=(f"{WHOLE}::test_a_hits_tail_runs_as_one_decode_step_with_no_piecewise_prefill", *WHOLE_OUTPUTS),
    ),
    Mutation(
        id="whole-step-samples-a-chunks-first-row",
        description="a short step run whole keeps the sample of each ending chunk's first token row, not its last",
        file="vt/engine/worker/runner.py",
        old="        at = np.fromiter((firsts[index[id(c)]] + c.length - 1 for c in ends), I64, len(ends))",
        new="        at = np.fromiter((firsts[index[id(c)]] for c in ends), I64, len(ends))",
        gates=WHOLE_OUTPUTS,
    ),
    Mutation(
        id="whole-step-positions-from-the-chunk-start",
        description="every token row of a chunk run whole takes the chunk's first position: each attends the "
                    "same keys and writes one KV slot",
        file="vt/engine/worker/runner.py",
        old="        positions = starts[owner] + np.arange(len(owner)) - firsts[owner]\n",
        new="        positions = starts[owner]\n",
        gates=WHOLE_OUTPUTS,
    ),
    Mutation(
        id="short-prefill-reads-the-decode-rows-positions",
        description="in a mixed step whose chunks the decode kernel attends, the chunks' tokens read the positions "
                    "of the decode rows before them",
        file="models/decoder.py",
        old="                                   fb.positions.view((n,), offset=8 * D), fb.token_row.view((n,), offset=8 * D),",
        new="                                   fb.positions.view((n,)), fb.token_row.view((n,), offset=8 * D),",
        gates=(f"{SHORT}::test_short_and_long_prefills_generate_the_same_tokens_through_either_kernel[piecewise]",),
    ),
]

# Programmatic dependent launch (backends/kernels/launch.py): only a kernel whose first statement waits for the kernel
# ahead may start early; otherwise it could read that kernel's output half-written.
LAUNCH = "tests/backends/test_launch.py"
ROUTE = f"{LAUNCH}::test_a_kernel_launches_programmatically_only_when_it_waits_while_capturing"
CONSUMER = "tests/backends/test_consumer_norm.py"
RULE = f"{LAUNCH}::test_only_a_kernel_whose_first_statement_is_the_wait_may_launch_programmatically"
ENTRIES += [
    Mutation(
        id="pdl-launches-a-kernel-that-never-waits",
        description="a captured kernel is launched programmatically whether or not its source waits first",
        file="backends/kernels/build.py",
        old="        stream = _capturing_stream() if self.waits and _programmatic() else None\n",
        new="        stream = _capturing_stream() if _programmatic() else None\n",
        gates=(f"{ROUTE}[pdl-capturing-reads-first]",),
    ),
    Mutation(
        id="pdl-rule-takes-a-wait-anywhere-in-the-body",
        description="a kernel counts as waiting first when its body holds the wait anywhere, after a read, a write "
                    "or inside a branch",
        file="backends/kernels/build.py",
        old="    return rest.startswith((PDL_ENTRY, PDL_WAIT))\n",
        new="    return PDL_ENTRY in rest or PDL_WAIT in rest\n",
        gates=(f"{RULE}[read-before]", f"{RULE}[write-before]", f"{RULE}[conditional]",
               f"{RULE}[signature-in-a-comment]", f"{RULE}[wait-alone-after-a-read]", f"{RULE}[other-call-before]"),
    ),
    Mutation(
        id="pdl-rule-trusts-any-prefetch-argument",
        description="an L2 prefetch before the wait is taken whatever its arguments read: an index into memory, a "
                    "dereference, a call, a global",
        file="backends/kernels/build.py",
        old="        if not _reads_nothing(call[1], pointers, scalars):\n            return False\n",
        new="",
        gates=(f"{RULE}[prefetch-indexes-memory]", f"{RULE}[prefetch-dereferences]", f"{RULE}[prefetch-calls]",
               f"{RULE}[prefetch-of-a-global]", f"{RULE}[prefetch-casts-a-dereference]",
               f"{RULE}[prefetch-of-a-global-x]", f"{RULE}[prefetch-calls-a-functor]",
               f"{RULE}[prefetch-of-a-scalar-base]"),
    ),
    Mutation(
        id="pdl-rule-lets-a-prefetch-dereference",
        description="a prefetch argument may use a pointer parameter as an operand (`*n`): it reads memory before "
                    "the wait",
        file="backends/kernels/build.py",
        old='                ok = t in scalars and after not in ("(", "[", ".")\n',
        new='                ok = (t in scalars or t in pointers) and after not in ("(", "[", ".")\n',
        gates=(f"{RULE}[prefetch-dereferences]",),
    ),
    Mutation(
        id="pdl-rule-takes-a-bare-coordinate-name",
        description="a bare x, y or z counts as a thread coordinate (session 23's rule): a global or a macro so "
                    "named reads memory before the wait",
        file="backends/kernels/build.py",
        old='                ok = t in scalars and after not in ("(", "[", ".")\n',
        new='                ok = (t in scalars or t in ("x", "y", "z")) and after not in ("(", "[", ".")\n',
        gates=(f"{RULE}[prefetch-of-a-global-x]",),
    ),
    Mutation(
        id="pdl-rule-takes-any-prefetch-base",
        description="a prefetch's base need not be a pointer parameter by name",
        file="backends/kernels/build.py",
        old="    if len(parts) != PREFETCH_ARGS or parts[0] not in pointers:\n",
        new="    if len(parts) != PREFETCH_ARGS:\n",
        gates=(f"{RULE}[prefetch-of-a-scalar-base]",),
    ),
    Mutation(
        id="pdl-rule-skips-any-call-before-the-wait",
        description="any vt:: call before the wait is passed over as if it were a prefetch (a fill, a copy)",
        file="backends/kernels/build.py",
        old='PDL_PREFETCH = re.compile(r"vt::pdl_prefetch_l2\\s*\\(',
        new='PDL_PREFETCH = re.compile(r"vt::(?!pdl_entry|pdl_wait)\\w+\\s*\\(',
        gates=(f"{RULE}[other-call-before]",),
    ),
    Mutation(
        id="pdl-rule-trusts-the-declared-reads",
        description="a kernel that declares what it reads before its wait (VT_READS_BEFORE_WAIT) may read any pointer "
                    "parameter there, the kernel ahead's output too",
        file="backends/kernels/build.py",
        old="    if words & (pointers - names) or _WRITE.search(head) or not top_level:\n",
        new="    if _WRITE.search(head) or not top_level:\n",
        gates=(f"{RULE}[declared-reads-an-undeclared-pointer]", f"{RULE}[declared-aliases-an-undeclared-pointer]"),
    ),
    Mutation(
        id="pdl-rule-lets-the-declared-prologue-write",
        description="the code before a declared kernel's wait may write through a declared pointer (a race with the "
                    "kernel ahead, which may still read it)",
        file="backends/kernels/build.py",
        old="    if words & (pointers - names) or _WRITE.search(head) or not top_level:\n",
        new="    if words & (pointers - names) or not top_level:\n",
        gates=(f"{RULE}[declared-writes-before-the-wait]",),
    ),
    Mutation(
        id="pdl-rule-takes-a-declared-kernels-wait-in-a-branch",
        description="after declared reads, a wait inside a branch counts as the kernel's wait",
        file="backends/kernels/build.py",
        old="    if words & (pointers - names) or _WRITE.search(head) or not top_level:\n",
        new="    if words & (pointers - names) or _WRITE.search(head):\n",
        gates=(f"{RULE}[declared-wait-in-a-branch]",),
    ),
    Mutation(
        id="pdl-rule-lets-a-declared-kernel-return-before-its-wait",
        description="a block of a declared kernel may return before its wait: the kernel can end before the one ahead, "
                    "and the kernel after it, waiting on it alone, starts early",
        file="backends/kernels/build.py",
        old="memcpy|memset|__st\\w+|asm|return)",
        new="memcpy|memset|__st\\w+|asm)",
        gates=(f"{RULE}[declared-returns-before-the-wait]",),
    ),
    Mutation(
        id="pdl-rule-misses-a-write-through-a-dereference",
        description="the code before a declared kernel's wait may write through a dereference (*(p + i) = v)",
        file="backends/kernels/build.py",
        old="(?:^|[;{}])\\s*\\(?\\s*\\*|",
        new="",
        gates=(f"{RULE}[declared-writes-through-a-dereference]",),
    ),
    Mutation(
        id="pdl-rule-takes-any-declared-name",
        description="VT_READS_BEFORE_WAIT may name what is not a pointer parameter (a global the kernel ahead writes)",
        file="backends/kernels/build.py",
        old="    if not names or not names <= pointers:\n",
        new="    if not names:\n",
        gates=(f"{RULE}[declared-a-global]",),
    ),
    Mutation(
        id="consumer-norm-forgets-the-residual-add",
        description="gemm_add's composed path (the CPU's, and CUDA's without a plan) runs the GEMM and never adds it "
                    "into the residual stream",
        file="backends/kernels/library.py",
        old="    xp.matmul(a, b, out=out)\n    xp.add(x, out, out=x)\n",
        new="    xp.matmul(a, b, out=out)\n",
        gates=(f"{CONSUMER}::test_the_consumer_norm_moves_each_dense_layers_norms_into_the_gemms_that_read_them"
               "_with_the_same_logits",
               f"{CONSUMER}::test_the_consumer_norm_moves_only_the_norms_its_plan_runs_in_a_gemms_tail",
               f"{CONSUMER}::test_with_sparse_neighbours_no_layer_reads_a_norm_the_consumers_ops_leave_unwritten"),
    ),
    Mutation(
        id="consumer-norm-qkv-reads-the-stale-norm",
        description="with the consumer's norm, the next layer's q/k/v GEMM reads h (the MLP's input norm) instead of "
                    "computing its own input norm from x",
        file="models/decoder.py",
        old="        if norm_in:\n            b.rms_norm_gemm(",
        new="        if False:\n            b.rms_norm_gemm(",
        gates=(f"{CONSUMER}::test_the_consumer_norm_moves_each_dense_layers_norms_into_the_gemms_that_read_them"
               "_with_the_same_logits",
               f"{CONSUMER}::test_the_consumer_norm_moves_only_the_norms_its_plan_runs_in_a_gemms_tail",
               f"{CONSUMER}::test_with_sparse_neighbours_no_layer_reads_a_norm_the_consumers_ops_leave_unwritten"),
    ),
    Mutation(
        id="decoder-consumer-norm-ignores-the-norm-plan",
        description="the o projection leaves its norm to gate/up whatever its norm plan picked: where cuBLASLt and "
                    "the norm kernel serve it (no tail to take away), the consumer's norm only adds kernels",
        file="models/decoder.py",
        old='        consumer = ((dense or sparse) and f"{i}.o_b" not in w\n                    and b.fuses_norm(o2, '
            'w[f"{i}.o_t"], out, x, w[f"{i}.ln2"], h, eps=c.rms_norm_eps))\n',
        new='        consumer = (dense or sparse) and f"{i}.o_b" not in w\n',
        gates=(f"{CONSUMER}::test_the_consumer_norm_moves_only_the_norms_its_plan_runs_in_a_gemms_tail",),
    ),
    Mutation(
        id="decoder-defers-the-down-norm-unasked",
        description="the down projection leaves the next input norm to q/k/v without asking its norm plan",
        file="models/decoder.py",
        old="        defer = (residual is not None and may_defer\n                 and b.fuses_norm(",
        new="        defer = (residual is not None and may_defer\n                 or b.fuses_norm(",
        gates=(f"{CONSUMER}::test_the_consumer_norm_moves_each_dense_layers_norms_into_the_gemms_that_read_them"
               "_with_the_same_logits",
               f"{CONSUMER}::test_the_consumer_norm_moves_only_the_norms_its_plan_runs_in_a_gemms_tail",
               f"{CONSUMER}::test_with_sparse_neighbours_no_layer_reads_a_norm_the_consumers_ops_leave_unwritten"),
    ),
    Mutation(
        id="cuda-fuses-norm-says-yes-to-cublaslt",
        description="CublasLt.fuses_norm answers yes whatever the norm plan picked: the consumer's norm taken where "
                    "cuBLASLt and the norm kernel run (no tail to take away)",
        file="backends/cublaslt.py",
        old="        return isinstance(plan.algo, skinny_gemm.Config)\n",
        new="        return True\n",
        gates=(f"{CONSUMER}::test_the_cuda_answer_is_the_norm_plans_pick",),
    ),
    Mutation(
        id="norm-in-served-past-its-stage",
        description="a NORM_IN configuration is taken whatever its staged slice's length: M x the slice past STAGE "
                    "writes past the kernel's shared memory",
        file="backends/kernels/skinny_gemm.py",
        old="    return not epilogue.startswith(\"norm_in\") or (k % 4 == 0 and m * split(m, n, k, config)[0] <= STAGE)\n",
        new="    return not epilogue.startswith(\"norm_in\") or k % 4 == 0\n",
        gates=(f"{CONSUMER}::test_the_normed_prologue_serves_a_configuration_only_where_its_staged_slice_fits",),
    ),
    Mutation(
        id="cuda-resid-one-slice-writes-c",
        description="an unsplit RESID GEMM (S = 1) writes its sums to C, as the plain GEMM does, and x never moves",
        file="backends/kernels/skinny_gemm.cu",
        old="                    if (S == 1 && RESID) x[(i64)m * N + nn] += v;\n                    else if (S == 1)",
        new="                    if (S == 1)",
        gates=(f"{CONSUMER}::test_cuda_resid_then_norm_in_equals_the_norm_epilogue_then_its_consumer_bit_for_bit",
               f"{CONSUMER}::test_on_the_gpu_a_decode_step_with_the_consumer_norm_computes_the_same_logits"),
        needs_gpu=True,
    ),
    Mutation(
        id="skinny-launch-takes-two-epilogues",
        description="the skinny binding takes a launch naming two epilogues and runs one of them",
        file="backends/kernels/skinny_gemm.py",
        old="    if named > 1 or (norm_in is not None and (norm or resid is not None)):\n",
        new="    if False:\n",
        gates=(f"{CONSUMER}::test_a_launch_naming_two_epilogues_is_refused_before_anything_compiles",),
    ),
    Mutation(
        id="cuda-gemm-add-takes-any-weight-rows",
        description="gemm_add's CUDA binding takes a weight whose rows are not A's columns",
        file="backends/cublas.py",
        old="                or b.shape[0] != a.shape[1] or c.shape != (a.shape[0], b.shape[1])\n",
        new="                or c.shape != (a.shape[0], b.shape[1])\n",
        gates=(f"{CONSUMER}::test_the_cuda_ops_refuse_a_weight_whose_rows_are_not_a_rows_columns",),
    ),
    Mutation(
        id="cuda-rms-norm-gemm-takes-any-weight-rows",
        description="rms_norm_gemm's CUDA binding takes a weight whose rows are not h's columns",
        file="backends/cublas.py",
        old="                or b.shape[0] != h.shape[1] or x.shape != h.shape",
        new="                or x.shape != h.shape",
        gates=(f"{CONSUMER}::test_the_cuda_ops_refuse_a_weight_whose_rows_are_not_a_rows_columns",),
    ),
    Mutation(
        id="cuda-norm-in-divides-by-the-first-rows-norm",
        description="the NORM_IN prologue normalizes every row by row 0's RMS",
        file="backends/kernels/skinny_gemm.cu",
        old="            a_stage[i] = from_f32<T>(x[(i64)m * K + k] / denom[m] * w[k]);\n",
        new="            a_stage[i] = from_f32<T>(x[(i64)m * K + k] / denom[0] * w[k]);\n",
        gates=(f"{CONSUMER}::test_cuda_resid_then_norm_in_equals_the_norm_epilogue_then_its_consumer_bit_for_bit",),
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-resid-writes-c-instead-of-adding-into-x",
        description="a split RESID GEMM's column tile writes its sums to C, as the plain GEMM does, and x never moves",
        file="backends/kernels/skinny_gemm.cu",
        old="                if (RESID) x[(i64)m * N + nn] += v;\n                else c[(i64)m * N + nn] = v;\n",
        new="                c[(i64)m * N + nn] = v;\n",
        gates=(f"{CONSUMER}::test_cuda_resid_then_norm_in_equals_the_norm_epilogue_then_its_consumer_bit_for_bit",
               f"{CONSUMER}::test_on_the_gpu_a_decode_step_with_the_consumer_norm_computes_the_same_logits"),
        needs_gpu=True,
    ),
    Mutation(
        id="skinny-prefetch-after-the-wait",
        description="the skinny GEMM asks L2 for its weights only after the kernel ahead has completed: correct, "
                    "and the overlap of its weight stream with the kernel ahead's tail is lost",
        file="backends/kernels/skinny_gemm.cu",
        old="    vt::pdl_prefetch_l2(b, N, K, blockIdx.y * slice, slice, blockIdx.x * TC * 8, TC * 8);  // this "
            "block's B\n    vt::pdl_wait();\n",
        new="    vt::pdl_wait();\n    vt::pdl_prefetch_l2(b, N, K, blockIdx.y * slice, slice, blockIdx.x * TC * 8, "
            "TC * 8);\n",
        gates=(f"{LAUNCH}::test_the_skinny_gemms_ask_l2_for_their_weights_before_the_wait",),
    ),
    Mutation(
        id="skinny-triggers-its-dependents-at-its-start",
        description="the skinny GEMM never triggers the kernel after it, which then launches only when this one has "
                    "completed: correct, and that kernel's weight prefetch no longer overlaps this one's tail",
        file="backends/kernels/skinny_gemm.cu",
        old="    vt::pdl_trigger();\n    const int S = gridDim.y;\n",
        new="    const int S = gridDim.y;\n",
        gates=(f"{LAUNCH}::test_the_skinny_gemms_trigger_the_kernel_after_them_once_their_weights_are_read",),
    ),
    Mutation(
        id="norm-kernel-reads-before-its-pdl-wait",
        description="the residual add + RMSNorm kernel computes its row index before the wait, so it is launched "
                    "plainly and the decode step loses its overlap there",
        file="backends/kernels/norm.cu",
        old="    vt::pdl_entry();\n    __shared__ float scratch[32];\n    const i64 row = blockIdx.x;\n",
        new="    __shared__ float scratch[32];\n    const i64 row = blockIdx.x;\n    vt::pdl_entry();\n",
        gates=(f"{LAUNCH}::test_every_library_kernel_waits_for_the_kernel_ahead_before_touching_memory",),
    ),
    Mutation(
        id="kernel-launch-takes-none-eagerly",
        description="a kernel launch lets None through (CuPy's eager call takes it, the programmatic launch of a "
                    "capture cannot): a binding passing None runs eagerly and breaks only once captured",
        file="backends/kernels/build.py",
        old="        unset = [i for i, a in enumerate(args) if a is None]\n",
        new="        unset: list[int] = []\n",
        gates=(f"{LAUNCH}::test_a_kernel_refuses_an_argument_the_programmatic_launch_cannot_pass_captured_or_not",),
    ),
    Mutation(
        id="cluster-launch-eagerly-through-cupys-call",
        description="an eager launch asked for clusters goes through CuPy's call, which launches none: each block a "
                    "cluster of one, whose rank 0 merges its own partition alone",
        file="backends/kernels/build.py",
        old="        if stream is None and cluster is None:\n",
        new="        if stream is None:\n",
        gates=(f"{LAUNCH}::test_a_cluster_launch_passes_its_cluster_on_every_path",),
    ),
    Mutation(
        id="cuda-launch-drops-the-serialization-attribute",
        description="the programmatic launch passes no attribute: every captured kernel waits for the whole kernel "
                    "ahead, as a plain launch does",
        file="backends/kernels/launch.py",
        old="    wanted = ([_attribute(PROGRAMMATIC_STREAM_SERIALIZATION, 1)] if programmatic else []) + \\\n",
        new="    wanted = [] + \\\n",
        gates=(f"{LAUNCH}::test_on_the_gpu_a_captured_decode_step_chains_its_kernels_programmatically_and_computes"
               "_the_same",),
        needs_gpu=True,
    ),
]
ENTRIES += [
    Mutation(
        id="pdl-rule-reads-the-first-of-several-definitions",
        description="a kernel name defined more than once (an overload, an explicit specialization, #if variants) "
                    "counts as waiting first when its first definition does, whichever body is compiled",
        file="backends/kernels/build.py",
        old='    if len(re.findall(head + r"[(<]", text)) != 1 or len(re.findall(r"\\b" + name + r"\\s*<[^;{()]*>\\s*\\(", '
            'text)):\n        return False\n',
        new="",
        gates=(f"{RULE}[specialized]", f"{RULE}[overloaded]", f"{RULE}[if-variants]"),
    ),
]
TUNER = "tests/backends/test_gemm_tuner.py::test_a_decode_gemm_is_timed_over_weights_the_l2_does_not_hold"
ENTRIES += [
    Mutation(
        id="tuner-times-decode-gemms-from-l2",
        description="the GEMM tuner's chain is CHAIN regions whatever the weight's size: a small decode weight's "
                    "chain fits the L2, so every timed replay reads its weights from L2 and rewards the wrong "
                    "algorithm",
        file="backends/cublaslt.py",
        old="        regions = min((L2_FLUSH_BYTES - EPILOGUE_BYTES) // stride, -(-2 * L2_BYTES // stride), MAX_CHAIN)",
        new="        regions = min((L2_FLUSH_BYTES - EPILOGUE_BYTES) // stride, CHAIN, MAX_CHAIN)",
        gates=tuple(f"{TUNER}[{s}]" for s in ("1x1024x2048", "1x1024x3072", "4x1000x96", "1x128x2048")),
    ),
]
ENTRIES += [
    Mutation(
        id="programmatic-launch-error-untyped",
        description="a programmatic launch's failure carries no CUresult: a capture's refusal of it surfaces as a "
                    "bare RuntimeError, not vt's capture error, and the capture is not marked invalid",
        file="backends/kernels/launch.py",
        old="        self.status = status\n",
        new="        self.code = status\n",
        gates=tuple(f"{LAUNCH}::test_a_programmatic_launch_a_capture_refuses_fails_with_vts_typed_error[{s}-{n}]"
                    for s, n in ((900, "CaptureUnsupported"), (901, "CaptureInvalidated"), (905, "CaptureIsolation"))),
    ),
]
ENTRIES += [
    Mutation(
        id="retired-flag-read-as-nothing",
        description="VT_TEMPERATURE_DRAW=race (a draw session 24 removed) is ignored without a word",
        file="vt/env.py",
        old="        if raw not in defaults:\n",
        new="        if False:\n",
        gates=("tests/vt/test_env.py::test_a_retired_flag_set_to_what_it_no_longer_offers_is_refused_by_name",),
    ),
    Mutation(
        id="retired-boolean-flag-refuses-its-other-offs",
        description="a retired boolean flag takes only its first spelling of off: VT_MOE_PREFETCH_DOWN=false, which "
                    "asks for what remains, is refused",
        file="vt/env.py", old="        if raw not in defaults:\n", new="        if raw != defaults[0]:\n",
        gates=("tests/vt/test_env.py::test_a_retired_flag_set_to_what_it_no_longer_offers_is_refused_by_name"
               "[VT_MOE_PREFETCH_DOWN-1-old_defaults3]",),
    ),
    Mutation(
        id="tp-rank-loses-the-pdl-flag",
        description="a tensor-parallel rank's environment leaves VT_PDL out: with VT_PDL=0 on rank 0 the other "
                    "ranks still launch programmatically",
        file="vt/env.py",
        old='"gemm_tuned": "VT_GEMM_TUNED", "pdl": "VT_PDL",',
        new='"gemm_tuned": "VT_GEMM_TUNED",',
        gates=("tests/vt/test_env.py::test_a_tensor_parallel_rank_reads_back_every_flag_rank_0_read",
               "tests/vt/test_env.py::test_flag_names_are_every_variable_this_module_reads"),
    ),
    Mutation(
        id="tp-rank-reads-the-default-rope-key-limit",
        description="a tensor-parallel rank's environment sets VT_ROPE_MAX_KEYS to 256: rank 0 takes the rope "
                    "variant over wider tables where the other ranks do not",
        file="vt/env.py",
        old='out["VT_ROPE_MAX_KEYS"] = str(f.rope_max_keys)', new='out["VT_ROPE_MAX_KEYS"] = "256"',
        gates=("tests/vt/test_env.py::test_a_tensor_parallel_rank_reads_back_every_flag_rank_0_read",),
    ),
    Mutation(
        id="tp-rank-reads-the-default-rope-row-limit",
        description="a tensor-parallel rank's environment sets VT_ROPE_MAX_ROWS to its default: rank 0 at 1024 "
                    "takes the rope variant where the other ranks do not",
        file="vt/env.py",
        old='out["VT_ROPE_MAX_ROWS"] = str(f.rope_max_rows)', new='out["VT_ROPE_MAX_ROWS"] = "8"',
        gates=("tests/vt/test_env.py::test_a_tensor_parallel_rank_reads_back_every_flag_rank_0_read",),
    ),
    Mutation(
        id="choice-flag-takes-any-value",
        description="a flag of a few values (VT_PREFILL_WGMMA, VT_SAMPLER, ...) takes any other without a word",
        file="vt/env.py",
        old="    if raw in choices:\n        return raw\n",
        new="    if raw:\n        return raw\n",
        gates=tuple(f"tests/vt/test_env.py::test_a_choice_flag_refuses_a_value_it_does_not_offer_in_one_typed_line"
                    f"[{n}]" for n in ("VT_SAMPLER", "VT_ROWS_TARGET_BLOCKS", "VT_PREFILL_HEADS_A_BLOCK",
                                       "VT_PREFILL_WGMMA"))
        + ("tests/vt/test_env.py::test_a_decode_partition_floor_off_the_offered_ones_names_the_flag",
           "tests/vt/test_env.py::test_a_rope_row_limit_off_the_offered_ones_names_the_flag"),
    ),
    Mutation(
        id="tp-rank-reads-the-default-prefill-kernel",
        description="a tensor-parallel rank's environment sets VT_PREFILL_WGMMA to its default: rank 0 at 0 runs the "
                    "mma.sync kernel where the other ranks run the wgmma kernel",
        file="vt/env.py",
        old='out["VT_PREFILL_WGMMA"] = f.prefill_wgmma', new='out["VT_PREFILL_WGMMA"] = "auto"',
        gates=("tests/vt/test_env.py::test_a_tensor_parallel_rank_reads_back_every_flag_rank_0_read",),
    ),
    Mutation(
        id="tp-rank-reads-the-default-rows-target",
        description="a tensor-parallel rank's environment sets VT_ROWS_TARGET_BLOCKS to its default: rank 0 at 8 "
                    "splits a hit's context once where the other ranks split it eight times",
        file="vt/env.py",
        old='out["VT_ROWS_TARGET_BLOCKS"] = str(f.rows_target_blocks)', new='out["VT_ROWS_TARGET_BLOCKS"] = "256"',
        gates=("tests/vt/test_env.py::test_a_tensor_parallel_rank_reads_back_every_flag_rank_0_read",),
    ),
]

SKINNY_TESTS = "tests/backends/test_skinny_gemm.py"
# The whole parametrized test: the first mutant below is a race whose losing shapes vary from run to run (on the H200,
# 8 of the 10 shapes of 1,024 columns); the second fails every shape.
NORM_EPILOGUE = (f"{SKINNY_TESTS}::test_cuda_skinny_gemm_with_the_norm_epilogue_equals_its_twin_on_one_scratch",)

ENTRIES += [
    Mutation(
        id="gemm-norm-drops-the-residual-add",
        description="a projection joining the residual stream (o, down) is normed without being added into it",
        file="backends/kernels/library.py",
        old="    add_rms_norm(xp, x, out, None, w, h, eps=eps)\n",
        new="    add_rms_norm(xp, x, None, None, w, h, eps=eps)\n",
        gates=tuple(f"tests/models/test_oracle.py::test_logits_match_hf_for_prefill_and_decode[{m}-{p}]"
                    for m in ("tiny-qwen3", "tiny-qwen3-moe") for p in ("eager", "graph")),
    ),
    Mutation(
        id="skinny-norm-runs-in-the-first-block-to-finish",
        description="the skinny GEMM's norm epilogue runs in the first block to finish, before the other column "
                    "tiles of C are written",
        file="backends/kernels/skinny_gemm.cu",
        old="        if (threadIdx.x == 0) last = atomicAdd(done, 1u) == gridDim.x - 1;\n",
        new="        if (threadIdx.x == 0) last = atomicAdd(done, 1u) == 0u;\n",
        gates=NORM_EPILOGUE, needs_gpu=True,
    ),
    Mutation(
        id="skinny-norm-counter-left-counting",
        description="the norm epilogue's counter is not reset: the next launch (a graph's replay) never finds its "
                    "last block",
        file="backends/kernels/skinny_gemm.cu",
        old="        if (threadIdx.x == 0) *done = 0;\n",
        new="",
        gates=(*NORM_EPILOGUE, f"{SKINNY_TESTS}::test_on_the_gpu_a_decode_step_on_skinny_plans_norms_inside_its_gemms_"
                               "and_computes_the_same"),  # its replays never find their last block either
        needs_gpu=True,
    ),
]

# The greedy rows' single pass (sampler.cu's vt_sample): the finite check and the argmax in one read of the row.
GREEDY = "tests/engine/test_split_sampler.py::test_a_greedy_row_picks_the_first_of_its_largest_logits_in_one_pass"
ENTRIES += [
    Mutation(
        id="greedy-pass-keeps-the-last-tie",
        description="the greedy single pass keeps the highest index among equal largest logits within a thread",
        file="backends/kernels/sampler.cu",
        old="            if (raw > best || (raw == best && i < at)) { best = raw; at = i; }\n",
        new="            if (raw >= best) { best = raw; at = i; }\n",
        gates=(GREEDY,), needs_gpu=True,
    ),
    Mutation(
        id="greedy-pass-skips-the-finite-check",
        description="the greedy single pass picks a token from a row holding a NaN or an infinity",
        file="backends/kernels/sampler.cu",
        old="            bad |= !isfinite(raw);\n            if (raw > best",
        new="            if (raw > best",
        gates=(GREEDY,), needs_gpu=True,
    ),
    Mutation(
        id="cuda-split-greedy-merge-keeps-the-last-blocks-tie",
        description="the split sampler's last block merges its blocks' argmaxes keeping the later block on equal "
                    "logits: a tie across blocks takes the higher index",
        file="backends/kernels/sampler.cu",
        old="            if (greedy) argmax_step(v, at, ov, oi);\n",
        new="            if (greedy && (ov > v || (ov == v && oi > at))) { v = ov; at = oi; }\n",
        gates=(GREEDY,), needs_gpu=True,
    ),
    Mutation(
        id="block-argmax-keeps-the-later-warps-tie",
        description="the block argmax merges its warps keeping the later warp on equal logits: a tie across warps "
                    "takes the higher index",
        file="backends/kernels/sampler.cu",
        old="    for (int w = 1; w < WARPS; w++) argmax_step(v, i, shv[w], shi[w]);\n",
        new="    for (int w = 1; w < WARPS; w++) if (shv[w] >= v) { v = shv[w]; i = shi[w]; }\n",
        gates=(GREEDY,), needs_gpu=True,
    ),
    Mutation(
        id="cuda-mass-draws-in-the-next-sixteenth",
        description="the plain-mass draw's last block scans the sixteenth after the one its running sums picked",
        file="backends/kernels/sampler.cu",
        old="        sixteenth(lo, hi, *sh_seg % WARPS, &ta, &tb);\n",
        new="        sixteenth(lo, hi, (*sh_seg + 1) % WARPS, &ta, &tb);\n",
        # (min-p rows only since a row of temperature alone draws by Gumbel-max: the captured-replay and tie tests,
        # once its gates for their plain rows, hold one min-p row each, which their one-row slack forgives)
        gates=("tests/engine/test_split_sampler.py::test_the_split_sampler_draws_what_the_numpy_reference_draws",),
        needs_gpu=True, expect="rows that differ",
    ),
]

# Gumbel-max, the draw of a row of temperature alone (sampler.cu's gumbel_draw and draw_block; the twin's
# gumbel_noise and log_f32 in vt/engine/sample/sampler.py).
GUMBEL_ROWS = tuple(f"tests/engine/test_split_sampler.py::test_a_temperature_row_draws_in_whichever_block_holds_its_"
                    f"mass[{b}]" for b in (2, 16, 64))
# the CPU tests whose rows of temperature alone draw many times (each fails when those draws collapse or skew)
PLAIN_DRAWS = ("tests/engine/test_filters.py::test_draws_follow_the_renormalized_support_chi_square[plain-cpu]",
               "tests/engine/test_filters.py::test_temperature_sharpens_and_zero_is_argmax_with_the_lowest_index_on_"
               "ties[cpu]",
               "tests/engine/test_filters.py::test_banned_tokens_are_never_drawn_and_non_finite_rows_fail_alone[cpu]")
ENTRIES += [
    Mutation(
        id="gumbel-noise-shared-by-every-token",
        description="the twin's Gumbel noise leaves the token's index out of its hash: every token of a row gets the "
                    "same noise, so a row of temperature alone takes its argmax",
        file="vt/engine/sample/sampler.py",
        old="WEYL32 * np.arange(1, vocab + 1, dtype=np.uint32)", new="WEYL32 * np.ones(vocab, dtype=np.uint32)",
        gates=(*PLAIN_DRAWS, "tests/engine/test_gumbel.py::test_the_noise_follows_the_gumbel_distribution",
               "tests/engine/test_gumbel.py::test_a_tokens_noise_is_its_rows_key_and_its_index_alone"),
    ),
    Mutation(
        id="log-f32-drops-the-exponent",
        description="the twin's float32 log leaves out e ln 2: right within [sqrt(1/2), sqrt(2)) only",
        file="vt/engine/sample/sampler.py",
        old="    return e * LN2 + (tt + tt * p)\n", new="    return tt + tt * p\n",
        gates=("tests/engine/test_gumbel.py::test_log_f32_is_the_float32_log",
               "tests/engine/test_gumbel.py::test_the_noise_follows_the_gumbel_distribution",
               # the draws themselves prune by float64 logs (gumbel_argmax), which this log no longer bounds
               "tests/engine/test_gumbel.py::test_the_float64_noise_bounds_the_exact_noise_for_every_uniform"),
    ),
    Mutation(
        id="twin-gumbel-prunes-without-slack",
        description="the twin's Gumbel argmax bounds each token's exact noise by its float64 noise alone (no slack): "
                    "the float64 and float32 logs differ either way, so a token that wins can be pruned",
        file="vt/engine/sample/sampler.py", old="NOISE_SLACK = 2.0**-10\n", new="NOISE_SLACK = 0.0\n",
        gates=("tests/engine/test_gumbel.py::test_the_float64_noise_bounds_the_exact_noise_for_every_uniform",),
        expect="bound is above their exact noise",
    ),
    Mutation(
        id="cuda-gumbel-merge-drops-the-last-block",
        description="the Gumbel draw's last block merges every block's largest score but the last block's",
        file="backends/kernels/sampler.cu",
        old="for (int g = tid; g < G; g += 32) {\n            argmax_step(v, tok, __uint_as_float((u32)MASS(r, 4 * g))",
        new="for (int g = tid; g < G - 1; g += 32) {\n            argmax_step(v, tok, __uint_as_float((u32)MASS(r, 4 * g))",
        gates=GUMBEL_ROWS, needs_gpu=True, expect="rows that differ",
    ),
    Mutation(
        id="cuda-gumbel-ignores-the-temperature",
        description="the CUDA Gumbel draw adds the noise to the raw logit, not the tempered one",
        file="backends/kernels/sampler.cu",
        old="        const float x = __fmul_rn(raw, rtemp);\n        m = fmaxf(m, x);\n",
        new="        const float x = raw;\n        m = fmaxf(m, x);\n",
        gates=GUMBEL_ROWS, needs_gpu=True, expect="rows that differ",
    ),
    Mutation(
        id="cuda-gumbel-draws-an-overflowed-row",
        description="the CUDA Gumbel draw takes a row whose tempered maximum is +inf: its overflowed token wins",
        file="backends/kernels/sampler.cu",
        old="if (tid == 0) shi[0] = nbad || !isfinite(mm) ? -1 : tok;", new="if (tid == 0) shi[0] = nbad ? -1 : tok;",
        gates=("tests/engine/test_filters.py::test_a_row_whose_penalty_overflows_samples_minus_one_beside_rows_that_"
               "draw[cuda-split]",), needs_gpu=True,
    ),
    Mutation(
        id="cuda-gumbel-skips-the-finite-check",
        description="the CUDA Gumbel draw takes a token from a row whose raw logits hold a NaN (which the scan, "
                    "passing such rows over, no longer checks)",
        file="backends/kernels/sampler.cu",
        old="        if (plain) bad |= !isfinite(raw);\n        const float x = __fmul_rn(raw, rtemp);\n",
        new="        const float x = __fmul_rn(raw, rtemp);\n",
        gates=("tests/engine/test_filters.py::test_banned_tokens_are_never_drawn_and_non_finite_rows_fail_alone"
               "[cuda-split]",), needs_gpu=True,
    ),
    Mutation(
        id="cuda-one-block-gumbel-takes-an-overflowed-row",
        description="the one-block draw's Gumbel-max (vt_sample's own draw) takes a row whose tempered maximum is +inf",
        file="backends/kernels/sampler.cu",
        old="        if (!isfinite(m)) return -1;  // the rule below\n", new="",
        gates=("tests/engine/test_filters.py::test_a_row_whose_penalty_overflows_samples_minus_one_beside_rows_that_"
               "draw[cuda]",), needs_gpu=True,
    ),
    Mutation(
        id="cuda-gumbel-bound-without-its-slack",
        description="the bound the Gumbel draw skips tokens by is the MUFU logs' noise alone: below the exact noise "
                    "for some uniforms, so a token that wins could be skipped",
        file="backends/kernels/sampler.cu",
        old="    return __fadd_rn(GUMBEL_SLACK, __fmul_rn(-ln2, __log2f(e)));",
        new="    return __fmul_rn(-ln2, __log2f(e));",
        gates=("tests/engine/test_split_sampler.py::test_the_gumbel_draw_skips_only_tokens_whose_bound_is_above_their_"
               "noise",), needs_gpu=True, expect="with a bound below their noise",
    ),
    Mutation(
        id="cuda-gumbel-skips-by-the-logit-alone",
        description="the Gumbel draw skips a token whose tempered logit (not logit plus the noise's bound) is below "
                    "the block's best score: tokens the noise would lift to the top are never scored",
        file="backends/kernels/sampler.cu",
        old="    if (__fadd_rn(x, gumbel_bound(u)) < key_score(*(volatile int*)thr)) return;",
        new="    if (x < key_score(*(volatile int*)thr)) return;",
        gates=GUMBEL_ROWS, needs_gpu=True, expect="rows that differ",
    ),
    Mutation(
        id="cuda-gumbel-threshold-misreads-negative-scores",
        description="the Gumbel draw's threshold key decodes a negative score without undoing its flip: -38 reads "
                    "as -0.11 and -inf as -1e-38, so tokens that would win below them are skipped",
        file="backends/kernels/sampler.cu",
        old="__device__ __forceinline__ float key_score(int k) { return __int_as_float(k >= 0 ? k : k ^ 0x7FFFFFFF); }",
        new="__device__ __forceinline__ float key_score(int k) { return __int_as_float(k); }",
        gates=("tests/engine/test_split_sampler.py::test_a_temperature_row_whose_scores_are_all_negative_draws_what_"
               "the_reference_draws",), needs_gpu=True, expect="rows that differ",
    ),
]

# The MLP's gate/up projection and its SwiGLU activation (activation.py, skinny_gemm.cu), and the epilogue plans that
# time a decode GEMM with its consumer (backends/cublaslt.py).
SWIGLU_GPU = f"{SKINNY_TESTS}::test_cuda_skinny_gemm_with_the_swiglu_epilogue_equals_its_twin_on_one_scratch"
EPILOGUE_STEP = f"{SKINNY_TESTS}::test_on_the_gpu_a_decode_step_on_skinny_plans_norms_inside_its_gemms_and_computes_the_same"
TUNING = "tests/backends/test_gemm_tuning.py"
EPILOGUE_TIMING = f"{TUNING}::test_an_epilogue_plan_times_each_cublaslt_candidate_with_its_consumers_kernel"
ENTRIES += [
    Mutation(
        id="silu-mul-ignores-the-interleave",
        description="the activation pairs gate column c with up column I + c whatever the projection's interleave",
        file="backends/kernels/activation.py",
        old="    gate, up = gate_up_columns(out.shape[-1], group)\n",
        new="    gate, up = gate_up_columns(out.shape[-1], out.shape[-1])\n",
        gates=(f"{KERNELS}::test_silu_mul_and_embed_twins[4]",
               f"{SKINNY_TESTS}::test_the_swiglu_twin_activates_each_interleaved_pair"),
    ),
    Mutation(
        id="gate-up-weights-not-interleaved",
        description="the model fuses gate and up weights one after the other, where its activation reads them paired",
        file="models/decoder.py",
        old="    return np.stack([gate.reshape(I // g, g, H), up.reshape(I // g, g, H)], axis=1).reshape(2 * I, H)\n",
        new="    return np.concatenate([gate, up])\n",
        gates=("tests/models/test_oracle.py::test_logits_match_hf_for_prefill_and_decode",),
    ),
    Mutation(
        id="cuda-swiglu-epilogue-reads-gate-as-up",
        description="the skinny GEMM's last block of a split gate/up tile multiplies SiLU(gate) by gate, not up",
        file="backends/kernels/skinny_gemm.cu", old="                    u += __ldcg(p + PAIR_COLS);\n",
        new="                    u += __ldcg(p);\n",
        gates=(SWIGLU_GPU,), needs_gpu=True,
    ),
    Mutation(
        id="swiglu-epilogue-never-reached",
        description="the gate/up projection never offers its activation to the skinny GEMM: SiLU stays a launch",
        file="backends/kernels/library.py",
        old='    fused = getattr(xp, "gemm_silu_mul", None) if group == PAIR_COLS else None\n',
        new='    fused = getattr(xp, "gemm_silu_mul", None) if group != PAIR_COLS else None\n',
        gates=(EPILOGUE_STEP,), needs_gpu=True,
    ),
    Mutation(
        id="epilogue-plan-times-the-gemm-alone",
        description="a norm or SwiGLU plan times each candidate without its consumer, picking the faster GEMM, not "
                    "the faster pair",
        file="backends/cublaslt.py",
        old="            epilogue = epilogue.on_scratch(cupy, lt.scratch() + L2_FLUSH_BYTES - EPILOGUE_BYTES, self.m, self.n)\n",
        new="            epilogue = None\n",
        gates=(EPILOGUE_TIMING,), needs_gpu=True,
    ),
    Mutation(
        id="tuning-chain-moves-the-residual-stream",
        description="a norm plan's timing chains add into the caller's residual stream, not a scratch copy of it",
        file="backends/cublaslt.py",
        old="        return Norm(_view(cupy, ptr, (m, n), cupy.float32), self.w,",
        new="        return self\n        return Norm(_view(cupy, ptr, (m, n), cupy.float32), self.w,",
        gates=(EPILOGUE_TIMING,), needs_gpu=True,
    ),
    Mutation(
        id="tuning-chain-adds-into-the-residual-stream",
        description="a resid plan's timing chains add into the caller's residual stream, not a scratch copy of it",
        file="backends/cublaslt.py",
        old="        return Resid(_view(cupy, ptr, (m, n), cupy.float32))\n",
        new="        return self\n",
        gates=(f"{TUNING}::test_a_resid_plans_timing_chains_add_into_a_scratch_copy_of_the_residual_stream[8B-down]",),
        needs_gpu=True,
    ),
]

# Start-up ends the GEMM tuner's timing (backends/cublaslt.py): a shape first seen on a request's time is not timed.
ENTRIES += [
    Mutation(
        id="gemm-tuning-after-start-up",
        description="the GEMM tuner times a shape first seen after start-up (an eager step's logit rows), compiling "
                    "and running every candidate on a request's time",
        file="backends/cublaslt.py",
        old="            if m <= TUNED_MAX_ROWS and self.is_tuning and not stream.is_capturing():\n",
        new="            if m <= TUNED_MAX_ROWS and not stream.is_capturing():\n",
        gates=(f"{TUNING}::test_after_start_up_a_new_shape_keeps_the_heuristics_pick_untimed",),
        needs_gpu=True,
    ),
    Mutation(
        id="start-up-never-ends",
        description="the runner never tells the backend that start-up is over: its tuner times shapes on requests' "
                    "time",
        file="vt/engine/worker/runner.py",
        old="            self.backend.end_start_up()  # every captured shape is tuned; a later new shape is a request's time\n",
        new="            pass\n",
        gates=("tests/engine/test_startup_capture.py::test_start_up_ends_once_every_graph_is_taken",),
    ),
]

# The split sampler's blocks per row, a slot's own (vt/engine/worker/graph_driver.py's split_views), and the
# tuner's timing chains clear of the epilogues' scratch tail.
SPLIT_BLOCKS = "tests/engine/test_split_blocks.py::test_each_slot_runs_the_blocks_a_row_its_own_batch_gets"
ENTRIES += [
    Mutation(
        id="split-slot-keeps-the-drivers-block-count",
        description="every slot views the split scratch at the driver's block count: a one-row step runs the blocks a "
                    "row of the largest batch gets",
        file="vt/engine/worker/graph_driver.py",
        old="        self.split = split_views(driver.split, n)  # the split sampler's scratch, or ()\n",
        new="        self.split = tuple(t.view((n, *t.shape[1:])) for t in driver.split)\n",
        gates=(SPLIT_BLOCKS,),
    ),
    Mutation(
        id="split-blocks-ignore-the-batch",
        description="every batch gets the most blocks a row: at B=256 the candidate kernel's fixed costs come back "
                    "4,096 times",
        file="vt/engine/sample/sampler.py",
        old="    want = SPLIT_BLOCKS // max(1, rows)\n",
        new="    want = SPLIT_BLOCKS\n",
        gates=(SPLIT_BLOCKS,),
    ),
    Mutation(
        id="tuner-chain-reads-the-epilogue-tail",
        description="the GEMM tuner's timing chain takes weight regions from the whole scratch, the tail a timed "
                    "epilogue writes its outputs into included",
        file="backends/cublaslt.py",
        old="        regions = min((L2_FLUSH_BYTES - EPILOGUE_BYTES) // stride, -(-2 * L2_BYTES // stride), MAX_CHAIN)",
        new="        regions = min(L2_FLUSH_BYTES // stride, -(-2 * L2_BYTES // stride), MAX_CHAIN)",
        gates=(TUNER,),
    ),
]

# The CI compile check's static shared-memory limit (backends/kernels/build.py): what the device's NVRTC refuses.
ENTRIES += [
    Mutation(
        id="compile-check-ignores-static-shared-memory",
        description="the nvcc check passes a kernel with more than 48 KB of static shared memory, which only the "
                    "GPU's NVRTC then refuses",
        file="backends/kernels/build.py",
        old="        elif (m := re.search(r\"(\\d+) bytes smem\", line)) and entry and int(m.group(1)) > STATIC_SHARED_MAX:\n",
        new="        elif (m := re.search(r\"(\\d+) bytes smem\", line)) and entry and int(m.group(1)) > 2 * STATIC_SHARED_MAX:\n",
        gates=("tests/backends/test_kernel_build.py::"
               "test_a_kernel_over_48_kb_of_static_shared_memory_fails_the_compile_check",),
    ),
]

# A drawn row whose tempered maximum is not finite (a penalty past float32's range) samples -1 on CUDA, as the
# reference's NaN masses make it there (sampler.cu: the candidate kernel's last block, and the one-block draw).
OVERFLOW = "tests/engine/test_filters.py::test_a_row_whose_penalty_overflows_samples_minus_one_beside_rows_that_draw"
ENTRIES += [
    Mutation(
        id="cuda-overflowed-row-draws-a-token",
        description="the split sampler draws a row whose tempered maximum is +inf: the overflowed token's NaN mass "
                    "converts to 2^63, and the row draws that token",
        file="backends/kernels/sampler.cu",
        old="    const bool fails = any_bad || (!greedy && !isfinite(mm));\n",
        new="    const bool fails = any_bad;\n",
        # (not the engine's overflow test: its request fails at the prefill's one-block draw before any decode step)
        gates=(f"{OVERFLOW}[cuda-split]",),
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-one-block-draw-takes-an-overflowed-row",
        description="the one-block draw (VT_SAMPLER=block, and the candidates' fallback) draws a row whose tempered "
                    "maximum is +inf",
        file="backends/kernels/sampler.cu",
        old="    if (!isfinite(m)) return -1;\n",
        new="",
        gates=(f"{OVERFLOW}[cuda]",),
        needs_gpu=True,
    ),
]

ENTRIES += [
    Mutation(
        id="issue-slots-takes-a-forward-branch-for-a-loop",
        description="scripts/issue-slots counts any branch as a loop, a forward one too: its per-tile instruction "
                    "counts (the kernel commits' figures) would mix in spans that are no loop",
        file="scripts/issue-slots",
        old="        if target and int(target.group(1), 16) < at:\n",
        new="        if target and int(target.group(1), 16) != at:\n",
        gates=("tests/backends/test_issue_slots.py::test_a_backward_branch_is_a_loop_counted_by_opcode",),
        expect="one loop: the forward branch",
    ),
]

ENTRIES += [
    Mutation(
        id="skinny-anatomy-takes-any-shape",
        description="scripts/skinny-anatomy takes a case the skinny GEMM does not serve and goes on to the device",
        file="scripts/skinny-anatomy", old="        if k < 1 or not sg.fits(rows, n, BF16, epi):\n",
        new="        if k < 1:\n",
        gates=tuple(f"tests/engine/test_lane_skinny_anatomy.py::test_skinny_anatomy_refuses_a_case_it_cannot_time_before_any_"
                    f"device[{c}]" for c in ("swiglu-half-pairs", "too-many-rows")),
    ),
    Mutation(
        id="replay-ab-times-kernels-off-cuda",
        description="scripts/replay-ab takes --kernels with the CPU backend: it builds the model, then fails on "
                    "the device profiler instead of refusing the option first",
        file="scripts/replay-ab", old='    if args.kernels and args.backend != "cuda":\n',
        new='    if False:\n',
        gates=("tests/engine/test_lane_option_refusals.py::test_replay_ab_refuses_kernel_times_without_a_gpu_backend",),
    ),
    Mutation(
        id="prefix-ttft-marks-cpu-work",
        description="scripts/prefix-ttft takes --nvtx with the CPU backend: it builds the engine, then fails on "
                    "CuPy's NVTX at the first timed request instead of refusing the option first",
        file="scripts/prefix-ttft", old='    if args.nvtx and args.backend != "cuda":\n', new="    if False:\n",
        gates=("tests/engine/test_lane_kernel_times.py::test_kernel_times_and_prefix_ttft_refuse_what_they_cannot_read",),
    ),
    Mutation(
        id="prefix-ttft-anatomy-stamps-the-wrong-step",
        description="scripts/prefix-ttft --anatomy takes the hit's host part up to the staging of its decode step "
                    "(after its first token) rather than of its tail: the host is charged with the hit's whole step",
        file="scripts/prefix-ttft", old="self.prelaunch_ms.append(1e3 * (self.staged_at[0] - self.t0))",
        new="self.prelaunch_ms.append(1e3 * (self.staged_at[-1] - self.t0))",
        gates=("tests/engine/test_lane_prefix_ttft_anatomy.py::test_prefix_ttft_splits_the_hits_ttft_at_its_graphs_launch",),
    ),
    Mutation(
        id="prefix-ttft-anatomy-swaps-the-graphs",
        description="scripts/prefix-ttft --anatomy reports the decode step's graph as the hit's and the hit's as the "
                    "decode step's",
        file="scripts/prefix-ttft", old='row["hit_graph_rows"], row["hit_graph_ms"] = anatomy.graph(0)',
        new='row["hit_graph_rows"], row["hit_graph_ms"] = anatomy.graph(1)',
        gates=("tests/engine/test_lane_prefix_ttft_anatomy.py::test_prefix_ttft_splits_the_hits_ttft_at_its_graphs_launch",),
    ),
    Mutation(
        id="prefix-ttft-profiles-the-anatomy",
        description="scripts/prefix-ttft takes --host-profile beside --anatomy: cProfile inflates the host times the "
                    "anatomy reports",
        file="scripts/prefix-ttft", old="    if args.host_profile and (args.anatomy or args.nvtx):\n",
        new="    if False:\n",
        gates=("tests/engine/test_lane_kernel_times.py::test_kernel_times_and_prefix_ttft_refuse_what_they_cannot_read",),
    ),
    Mutation(
        id="prefix-ttft-anatomy-without-graphs",
        description="scripts/prefix-ttft takes --anatomy on an engine that captures no graph (VT_CUDAGRAPH=0, "
                    "VT_POOL_BYPASS=1): it builds the engine and runs every round, then fails at the replay",
        file="scripts/prefix-ttft", old="    if args.anatomy and (not flags().cudagraph or flags().pool_bypass):\n",
        new="    if False:\n",
        gates=("tests/engine/test_lane_prefix_ttft_anatomy.py::test_prefix_ttft_splits_the_hits_ttft_at_its_graphs_launch",),
    ),
    Mutation(
        id="kernel-times-ignores-per",
        description="scripts/kernel-times prints the profiled region's totals whatever --per says: two requests' "
                    "kernels read as one request's",
        file="scripts/kernel-times",
        old='        print(f"| `{name}` | {len(v) / args.per:g} | {sum(v) / args.per:.1f} | {sum(v) / total:.1%} |"\n',
        new='        print(f"| `{name}` | {len(v):g} | {sum(v):.1f} | {sum(v) / total:.1%} |"\n',
        gates=("tests/engine/test_lane_kernel_times.py::test_kernel_times_sums_ncus_durations_by_kernel",),
    ),
    Mutation(
        id="kernel-times-reads-any-unit-as-ns",
        description="scripts/kernel-times takes a duration column in a unit it does not know as nanoseconds, "
                    "silently",
        file="scripts/kernel-times",
        old="    if unit not in UNITS:  # --page raw puts a row of units under the header\n",
        new="    if unit not in UNITS and unit:\n        unit = \"nsecond\"\n    if False:\n",
        gates=("tests/engine/test_lane_kernel_times.py::test_kernel_times_and_prefix_ttft_refuse_what_they_cannot_read",),
    ),
    Mutation(
        id="kernel-times-rates-the-per-request-reads",
        description="scripts/kernel-times divides a kernel's DRAM reads by --per before it takes their rate over the "
                    "undivided time: every rate reads --per times too slow",
        file="scripts/kernel-times",
        old='        return f" {mb / args.per:.2f} | {mb / us:.2f} |" if reads else ""\n',
        new='        return f" {mb / args.per:.2f} | {mb / args.per / us:.2f} |" if reads else ""\n',
        gates=("tests/engine/test_lane_kernel_times.py::test_kernel_times_adds_each_kernels_dram_reads_and_their_rate"
               "_where_the_csv_has_them",),
    ),
    Mutation(
        id="kernel-times-sums-nothing-silently",
        description="scripts/kernel-times prints an empty table for a profile whose rows have no duration, and exits 0",
        file="scripts/kernel-times",
        old="    if total <= 0:\n",
        new="    if False:\n",
        gates=("tests/engine/test_lane_kernel_times.py::test_kernel_times_and_prefix_ttft_refuse_what_they_cannot_read",),
    ),
]

# The residual stream's, rotary's, activation's and token-feed kernels, and the attention bindings' block-size
# guards: each of their gates named by a mutant (a review of the registry against DESIGN.md found them without one,
# session 23). The twins' die on the CPU; the kernels' in the GPU lane.
ROTARY_TWIN = f"{KERNELS}::test_rotary_twin_norms_rotates_and_writes_the_cache"
NORM_TWIN = f"{KERNELS}::test_add_rms_norm_twin"
ELEMENTWISE_CUDA = f"{KERNELS}::test_cuda_norm_activation_and_embed_equal_their_twins"
ELEMENTWISE_DTYPES = ("float32", "bfloat16", "float16")
ENTRIES += [
    Mutation(
        id="rotary-twin-forgets-rotate-half",
        description="the rotary twin pairs each element with itself, not with its partner half a head away",
        file="backends/kernels/rotary.py",
        old="    rot = np.concatenate([y[..., half:], y[..., :half]], axis=-1)",
        new="    rot = np.concatenate([y[..., :half], y[..., half:]], axis=-1)",
        gates=tuple(f"{ROTARY_TWIN}[{hd}-{n}]" for hd in (16, 128) for n in ("qk-norm", "no-norm")),
    ),
    Mutation(
        id="cuda-rotary-forgets-rotate-half",
        description="the rotary kernel pairs each element with itself where a lane holds both halves (head dim 64+)",
        file="backends/kernels/rope_head.cuh",
        old="        if constexpr (HD >= 64) rot[j] = v[(j + PER / 2) % PER];",
        new="        if constexpr (HD >= 64) rot[j] = v[j];",
        gates=tuple(f"{KERNELS}::test_cuda_rotary_equals_its_twin[{hd}-{d}]" for hd in (64, 128, 256)
                    for d in ("float32", "bfloat16")),
        needs_gpu=True,
    ),
    Mutation(
        id="rms-norm-twin-drops-the-bias",
        description="the residual add + RMSNorm twin adds delta but not the bias beside it (Qwen2's o bias lost)",
        file="backends/kernels/norm.py",
        old="        np.add(x, delta if bias is None else delta + bias, out=x)",
        new="        np.add(x, delta, out=x)",
        gates=(f"{NORM_TWIN}[add-bias-float32]", f"{NORM_TWIN}[add-bias-bfloat16]"),
    ),
    Mutation(
        id="rms-norm-twin-drops-the-weight",
        description="the RMSNorm twin writes the normed row without its weight",
        file="backends/kernels/norm.py",
        old="    out[...] = narrow_host(x / np.sqrt(var + np.float32(eps)) * w, out.dtype)",
        new="    out[...] = narrow_host(x / np.sqrt(var + np.float32(eps)), out.dtype)",
        gates=tuple(f"{NORM_TWIN}[{m}-{d}]" for m in ("norm", "add", "add-bias") for d in ("float32", "bfloat16")),
    ),
    Mutation(
        id="cuda-rms-norm-drops-the-bias",
        description="the residual add + RMSNorm kernel adds delta but not the bias beside it",
        file="backends/kernels/norm.cu",
        old="        if (bias != nullptr) {",
        new="        if (false) {",
        gates=tuple(f"{ELEMENTWISE_CUDA}[{d}]" for d in ELEMENTWISE_DTYPES),
        needs_gpu=True,
    ),
    Mutation(
        id="embed-twin-reverses-the-tokens",
        description="the embedding twin gathers the step's tokens' rows in reverse order",
        file="backends/kernels/norm.py",
        old="    out[...] = widen_host(table[ids])",
        new="    out[...] = widen_host(table[ids[::-1]])",
        gates=(f"{KERNELS}::test_silu_mul_and_embed_twins[20]", f"{KERNELS}::test_silu_mul_and_embed_twins[4]"),
    ),
    Mutation(
        id="cuda-embed-reads-the-first-token",
        description="every block of the embedding kernel gathers the step's first token's row",
        file="backends/kernels/norm.cu",
        old="    const W* row = table + ids[t] * (i64)H;",
        new="    const W* row = table + ids[0] * (i64)H;",
        gates=tuple(f"{ELEMENTWISE_CUDA}[{d}]" for d in ELEMENTWISE_DTYPES),
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-silu-mul-swaps-gate-and-up",
        description="the activation kernel takes SiLU of the up projection and multiplies by the gate",
        file="backends/kernels/activation.cu",
        old="silu_times(row[0], row[group])",
        new="silu_times(row[group], row[0])",
        gates=tuple(f"{ELEMENTWISE_CUDA}[{d}]" for d in ELEMENTWISE_DTYPES),
        needs_gpu=True,
    ),
    Mutation(
        id="feed-twin-feeds-a-failed-rows-minus-one",
        description="the token-feed twin feeds a failed row's -1 as the next input, an index before the embedding "
                    "table",
        file="backends/kernels/tokens.py",
        old="    tokens[fed] = np.maximum(last[src[fed]], 0)",
        new="    tokens[fed] = last[src[fed]]",
        gates=(f"{KERNELS}::test_feed_and_keep_twins_move_tokens_by_request_slot",),
    ),
    Mutation(
        id="cuda-feed-tokens-feeds-a-failed-rows-minus-one",
        description="the token-feed kernel feeds a failed row's -1 as the next input",
        file="backends/kernels/tokens.cu",
        old="tokens[i] = max(0ll, last[src[i]]);",
        new="tokens[i] = last[src[i]];",
        gates=(f"{KERNELS}::test_cuda_feed_and_keep_equal_their_twins",),
        needs_gpu=True,
    ),
    Mutation(
        id="prefill-binding-takes-any-block-size",
        description="the CUDA prefill binding launches for any block size, where its shifts read the wrong blocks",
        file="backends/kernels/prefill_attention.py",
        old="    if bs & (bs - 1) or KEY_TILE % bs or k_cache.shape[0] >= 2**31:",
        new="    if k_cache.shape[0] >= 2**31:",
        gates=tuple(f"{KERNELS}::test_the_prefill_kernels_binding_refuses_a_block_size_its_shifts_cannot_serve[{b}]"
                    for b in (12, 128)),
        expect="_LaunchReached",  # the test's stand-in for the launch: reached, where the guard should have refused
    ),
    Mutation(
        id="decode-binding-takes-any-block-size",
        description="the CUDA decode binding launches for any block size, where its shifts read the wrong blocks",
        file="backends/kernels/decode_attention.py",
        old="        return\n    bs, nkv = k_cache.shape[1], k_cache.shape[2]\n"
            "    if bs & (bs - 1) or k_cache.shape[0] >= 2**31:",
        new="        return\n    bs, nkv = k_cache.shape[1], k_cache.shape[2]\n    if k_cache.shape[0] >= 2**31:",
        gates=(f"{KERNELS}::test_the_decode_kernels_binding_refuses_a_block_size_its_shifts_cannot_serve",),
        expect="_LaunchReached",
    ),
]
ENTRIES += [
    Mutation(
        id="decode-binding-takes-part-ml-without-part-o",
        description="the decode binding launches with the partitions' max and sum scratch but no output scratch, "
                    "where the kernel writes each partition's output through a null pointer",
        file="backends/kernels/decode_attention.py",
        old="    if (part_o is None) != (part_ml is None):",
        new="    if False:",
        gates=(f"{KERNELS}::test_the_decode_binding_refuses_one_partials_array_without_the_other",),
        expect="_LaunchReached",
    ),
]

ROPE = "tests/backends/test_rope_attention.py"
ROPE_TWIN = tuple(f"{ROPE}::test_the_rope_variants_twin_attends_the_key_it_writes[{c}-{d}-{n}]"
                  for c in ("one-token-gqa1", "block-edges-gqa2", "tiles-gqa4", "partitions-gqa8", "full-width-mqa")
                  for d in ("float32", "bfloat16") for n in ("qk-norm", "no-norm"))
ROPE_GPU = f"{ROPE}::test_cuda_rope_variant_equals_the_two_launches_it_replaces_bit_for_bit"
ENTRIES += [
    Mutation(
        id="rope-attention-twin-attends-before-the-kv-write",
        description="the rope variant's twin attends the caches as they were before its token's k and v are written "
                    "(the new key never attended; its slot's stale bits are)",
        file="backends/kernels/decode_attention.py",
        old="    qk_norm_rope_store.twin(qkv, bias, w, rope, positions, slots, k_cache, v_cache, q, has_norm, eps)\n",
        new="    qk_norm_rope_store.twin(qkv, bias, w, rope, positions, slots, k_cache.copy(), v_cache.copy(), q, "
            "has_norm, eps)\n",
        gates=(*ROPE_TWIN, f"{ROPE}::test_a_decode_step_of_one_token_a_sequence_attends_with_the_rope_variant_with_the_"
                           "same_logits", f"{ROPE}::test_the_rope_variant_refuses_two_tokens_of_one_sequence",
               f"{ROPE}::test_a_step_of_more_rows_than_measured_keeps_the_two_launches"),
    ),
    Mutation(
        id="rope-attention-twin-takes-two-tokens-of-a-sequence",
        description="the rope variant's twin serves two tokens of one sequence, where the kernel's blocks would race "
                    "on the key one writes and the other reads",
        file="backends/kernels/decode_attention.py",
        old="    if theirs.any():",
        new="    if False:",
        gates=(f"{ROPE}::test_the_rope_variant_refuses_two_tokens_of_one_sequence", f"{ROPE}::test_rows_sharing_a_sequence_take_a_graph_without_the_rope_variant"),
    ),
    Mutation(
        id="decoder-takes-the-rope-variant-for-verification",
        description="the decoder runs the rope variant for speculative verification's steps (several tokens a "
                    "sequence), outside the kernel's precondition",
        file="models/decoder.py",
        old="        if not (not fb.is_prefill and fb.tokens_per_row == 1):\n",
        new="        if not (not fb.is_prefill):\n",
        gates=(f"{ROPE}::test_speculative_verification_keeps_the_two_launches", f"{ROPE}::test_rows_sharing_a_sequence_take_a_graph_without_the_rope_variant"),
        expect="the step gave the rope variant two tokens of a sequence",
    ),
    Mutation(
        id="decoder-rope-variant-read-as-off",
        description="the decoder never takes the rope variant: a decode step launches rotary and the attention apart",
        file="models/decoder.py",
        old="        self.rope_in_attention = flags().rope_in_attention\n",
        new="        self.rope_in_attention = False\n",
        gates=(f"{ROPE}::test_the_rope_variant_is_on_by_default", f"{ROPE}::test_rows_sharing_a_sequence_take_a_graph_without_the_rope_variant"),
    ),
    Mutation(
        id="cuda-rope-attention-keeps-its-own-key-in-the-second-early-tile-as-read",
        description="with two tiles read before the wait (VT_DECODE_EARLY_TILES=2), the token's own key in the second "
                    "is never read after its write (unattended)",
        file="backends/kernels/decode_attention.cu",
        old="            else if (pipe.ahead && key + L::TILE == at.ctx - 1)  // in the second tile (EARLY_TILES == 2)\n",
        new="            else if (false)  // in the second tile (EARLY_TILES == 2)\n",
        # the cases and dtypes where some row's own key falls in its partition's second tile at some head dim
        # (computed from rope_case's contexts, the partition sizes and each layout's tile: session 37)
        gates=tuple(f"{ROPE}::test_cuda_rope_variant_reading_two_tiles_before_its_wait_equals_the_two_launches[{c}]"
                    for c in ("tiles-gqa4-float32", "tiles-gqa4-bfloat16", "tiles-gqa4-float16",
                              "partitions-gqa8-bfloat16", "partitions-gqa8-float16", "full-width-mqa-float32",
                              "full-width-mqa-bfloat16", "full-width-mqa-float16")),
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-rope-attention-keeps-its-own-key-as-read-before-the-wait",
        description="the rope kernel attends the first tile it read before its wait as read: its token's own key, "
                    "which it writes after the wait, is never read (unattended, or a stale slot where it was)",
        file="backends/kernels/decode_attention.cu",
        old="            if (key == at.ctx - 1) read_own_key<KV, HD, G>(at, k_bytes, v_minus_k, key, pipe.k[ps], pipe.v[ps],\n",
        new="            if (false) read_own_key<KV, HD, G>(at, k_bytes, v_minus_k, key, pipe.k[ps], pipe.v[ps],\n",
        # contexts whose own key falls in a warp's first tile (full width's only at head dim 16 in a 16-bit cache,
        # whose tile is 128 keys); tiles-gqa4's own keys come in later tiles
        gates=(*(f"{ROPE}::test_cuda_rope_variant_reading_keys_before_its_wait_equals_the_two_launches[{c}-{d}]"
                 for c in ("one-token-gqa1", "block-edges-gqa2", "partitions-gqa8")
                 for d in ("float32", "bfloat16", "float16")),
               *(f"{ROPE}::test_cuda_rope_variant_reading_keys_before_its_wait_equals_the_two_launches"
                 f"[full-width-mqa-{d}]" for d in ("bfloat16", "float16"))),
        # not the captured-step PDL test: it compares the step captured with the step run eagerly, both through
        # the mutated kernel (it stayed green in the H100 lane, session 37)
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-rope-attention-leaves-a-partitioned-contexts-key-unwritten",
        description="the rope kernel writes a token's k and v only where its context is one partition: a longer "
                    "context's last partition attends its slot's stale bits",
        file="backends/kernels/decode_attention.cu",
        old="    const bool writes_kv = at.end == at.ctx && slot >= 0;",
        new="    const bool writes_kv = at.end == at.ctx && at.p == 0 && slot >= 0;",
        gates=tuple(f"{ROPE_GPU}[{c}-{d}]" for c in ("tiles-gqa4", "partitions-gqa8")
                    for d in ("float32", "bfloat16", "float16")),
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-rope-attention-drops-qs-rotary",
        description="the rope kernel normalizes and rotates k but takes q as projected (a rope variant ignored for "
                    "the queries)",
        file="backends/kernels/decode_attention.cu",
        old="        if (job < G + 1) norm_rope_head<HD>(v, w + h * HD, cos_sin, has_norm, eps);",
        new="        if (job == G) norm_rope_head<HD>(v, w + h * HD, cos_sin, has_norm, eps);",
        gates=tuple(f"{ROPE_GPU}[{c}-{d}]" for c in ("block-edges-gqa2", "tiles-gqa4", "partitions-gqa8",
                                                     "full-width-mqa")  # one-token-gqa1: one key, whatever q
                    for d in ("float32", "bfloat16", "float16")),
        needs_gpu=True,
    ),
]
ENTRIES += [
    Mutation(
        id="decoder-takes-the-rope-variant-over-partitions",
        description="the decoder runs the rope variant over tables past one partition's keys (H200: 19% slower a "
                    "step at 8 x 8,192)",
        file="models/decoder.py",
        old="                and width * block_size <= self.rope_max_keys)", new=")",
        gates=(f"{ROPE}::test_a_table_wider_than_the_rope_key_limit_keeps_the_two_launches",),
    ),
    Mutation(
        id="decoder-takes-the-rope-variant-at-any-row-count",
        description="the decoder runs the rope variant at any row count, past what the H200 measured (c=128: "
                    "1,024 blocks, each waiting for its prologue)",
        file="models/decoder.py",
        old="return (self.rope_in_attention and rows <= self.rope_max_rows", new="return (self.rope_in_attention",
        gates=(f"{ROPE}::test_a_step_of_more_rows_than_measured_keeps_the_two_launches",
               f"{ROPE}::test_the_rope_variant_is_on_by_default"),
    ),
    Mutation(
        id="rope-max-keys-flag-ignored",
        description="VT_ROPE_MAX_KEYS is read and never given to the model: the variant's table limit stays 256 keys",
        file="models/decoder.py",
        old="        self.rope_max_keys = flags().rope_max_keys\n", new="        self.rope_max_keys = 256\n",
        gates=(f"{ROPE}::test_the_rope_variant_is_on_by_default",),
    ),
    Mutation(
        id="rope-max-rows-flag-ignored",
        description="VT_ROPE_MAX_ROWS is read and never given to the model: the variant's row limit stays 8",
        file="models/decoder.py",
        old="        self.rope_max_rows = flags().rope_max_rows\n", new="        self.rope_max_rows = 8\n",
        gates=(f"{ROPE}::test_the_rope_variant_is_on_by_default",),
    ),
]
ENTRIES += [
    Mutation(
        id="driver-forwards-shared-rows-as-one-token-a-sequence",
        description="the graph driver tells the model a step apart (rows sharing a sequence) has one token a "
                    "sequence: a short prefill run whole hands the rope variant two tokens of a sequence",
        file="vt/engine/worker/graph_driver.py",
        old="tokens_per_row=0 if slot.key[4] else slot.key[1],",
        new="tokens_per_row=slot.key[1],",
        gates=(f"{ROPE}::test_rows_sharing_a_sequence_take_a_graph_without_the_rope_variant",),
        expect="the step gave the rope variant rows that share a sequence",
    ),
    Mutation(
        id="runner-whole-step-says-nothing-of-shared-rows",
        description="a short prefill run whole does not mark its rows as sharing sequences: it replays a decode "
                    "step's graph",
        file="vt/engine/worker/runner.py",
        old="keep_dst=keep,\n                              rows_share_sequences=True)",
        new="keep_dst=keep)",
        gates=(f"{ROPE}::test_a_short_prefill_run_whole_tells_the_driver_its_rows_share_sequences",),
    ),
]
ENTRIES += [
    Mutation(
        id="cuda-rope-attention-writes-a-padding-rows-kv",
        description="the rope kernel writes the k and v of a padding row (slot -1): one slot before the caches",
        file="backends/kernels/decode_attention.cu",
        old="    const bool writes_kv = at.end == at.ctx && slot >= 0;",
        new="    const bool writes_kv = at.end == at.ctx;",
        gates=tuple(f"{ROPE_GPU}[{c}-{d}]" for c in ("one-token-gqa1", "block-edges-gqa2", "tiles-gqa4",
                                                     "partitions-gqa8", "full-width-mqa")
                    for d in ("float32", "bfloat16", "float16")),
        needs_gpu=True,
    ),
]
# The H200 lane's A/B knob for one-row steps over short contexts (session 26)
ENTRIES += [
    Mutation(
        id="decode-partition-floor-ignored",
        description="VT_DECODE_MIN_PARTITION is read but the decode attention keeps 256-key partitions: the lane's "
                    "A/B would time the same launches on both sides",
        file="backends/kernels/decode_attention.py",
        old="    return max(flags().decode_min_partition, -(-keys // 64) * 64)",
        new="    return max(MIN_PARTITION, -(-keys // 64) * 64)",
        gates=tuple(f"tests/backends/test_kernels.py::"
                    f"test_a_lowered_partition_floor_splits_a_short_context_and_keeps_its_numbers[{f}]"
                    for f in (64, 128)),
        expect="-key floor",
    ),
]
# The tuner's rounds (session 26): picks varied by process at c=1 (session 25's hypothesis 2)
ENTRIES += [
    Mutation(
        id="tuner-times-every-round-in-one-order",
        description="the GEMM tuner times the candidates in the same order every round: a clock drift during tuning "
                    "adds each candidate's place in the round to its time",
        file="backends/cublaslt.py",
        old="        back = {i: time_once(candidates[i]) for i in reversed(order)}\n",
        new="        back = {i: time_once(candidates[i]) for i in order}\n",
        gates=("tests/backends/test_tuner_rounds.py::test_a_clock_drift_during_tuning_does_not_reach_the_comparison",),
        expect="the drift ",
    ),
]
# The rows kernel (session 26): a short prefill run whole reads each key once for a few rows of its sequence
SHARED_ROWS = "tests/backends/test_shared_rows_attention.py"
ENTRIES += [
    Mutation(
        id="shared-rows-attention-flag-ignored",
        description="VT_SHARED_ROWS_ATTENTION gives short steps graphs apart, but their attention stays the plain "
                    "kernel's: the graphs cost start-up time and buy nothing",
        file="models/decoder.py",
        old="                                   rows=self.rows_kernel if fb.rows_share_sequences\n",
        new="                                   rows=None if fb.rows_share_sequences\n",
        gates=(f"{SHARED_ROWS}::test_a_step_of_rows_sharing_sequences_attends_with_the_rows_kernel_in_a_graph_apart",
               f"{SHARED_ROWS}::test_a_prefix_hits_tail_runs_whole_through_the_rows_kernel_and_generates_the_same_tokens",),
    ),
    Mutation(
        id="driver-runs-shared-rows-in-a-decode-graph",
        description="the graph driver gives steps of rows sharing sequences a decode step's graph where the rows "
                    "kernel would serve them: the flag never reaches the attention",
        file="vt/engine/worker/graph_driver.py",
        old="        return rope or getattr(self.model, \"rows_kernel\", None) is not None\n",
        new="        return rope\n",
        gates=(f"{SHARED_ROWS}::test_a_step_of_rows_sharing_sequences_attends_with_the_rows_kernel_in_a_graph_apart",
               f"{SHARED_ROWS}::test_the_driver_names_a_run_of_one_table_by_its_first_row",
               f"{SHARED_ROWS}::test_a_prefix_hits_tail_runs_whole_through_the_rows_kernel_and_generates_the_same_tokens",),
        expect="apart",
    ),
    Mutation(
        id="cuda-rows-attention-ignores-a-rows-own-end",
        description="the rows kernel masks keys at the block's reach only: a prompt's earlier tokens attend its later "
                    "ones (no causal mask inside a chunk)",
        file="backends/kernels/decode_attention.cu",
        old="                sc[ps][r] = valid[ps] && key < ends[r] ? dot : neg_inf();  // a row's own causal end\n",
        new="                sc[ps][r] = valid[ps] ? dot : neg_inf();\n",
        gates=tuple(f"{SHARED_ROWS}::test_cuda_rows_kernel_equals_the_plain_kernel_bit_for_bit[{c}-{d}]"
                    for c in ("prefix-hit-16x1024", "three-chunks-straddle", "mha-partition-edges")
                    for d in ("float32", "bfloat16", "float16")),
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-rows-attention-reads-the-leads-table-for-every-row",
        description="the rows kernel reads every row of a block through its first row's table: a block holding two "
                    "sequences attends one sequence's keys for both",
        file="backends/kernels/decode_attention.cu",
        old="        while (lead + n < gn && token_row[g0 + lead + n] == trow) n++;\n",
        new="        while (lead + n < gn) n++;\n",
        gates=tuple(f"{SHARED_ROWS}::test_cuda_rows_kernel_equals_the_plain_kernel_bit_for_bit[{c}-{d}]"
                    for c in ("three-chunks-straddle", "one-row-each-gqa8") for d in ("float32", "bfloat16", "float16")),
        needs_gpu=True,
    ),
    Mutation(
        id="driver-gives-each-shared-row-its-own-token-row",
        description="the driver stages a row each for a short step's rows of one sequence: the rows kernel never sees "
                    "two rows of one sequence, and reads each key once a row as the plain kernel does, slower",
        file="vt/engine/worker/graph_driver.py",
        old="        if slot.key[4]:  # rows sharing sequences: a run of one table is one token_row (the rows kernel's runs)\n",
        new="        if False:\n",
        gates=(f"{SHARED_ROWS}::test_the_driver_names_a_run_of_one_table_by_its_first_row",),
        expect="rows of one table",
    ),
    Mutation(
        id="shared-token-rows-breaks-every-run",
        description="shared_token_rows starts a run at every row: a row each again",
        file="vt/engine/worker/graph_driver.py",
        old="        starts[1:] = (tables[1:] != tables[:-1]).any(axis=1)\n",
        new="        starts[1:] = True\n",
        gates=(f"{SHARED_ROWS}::test_the_driver_names_a_run_of_one_table_by_its_first_row",),
    ),
    Mutation(
        id="rows-attention-taken-at-any-group",
        description="VT_SHARED_ROWS_ATTENTION takes the rows kernel at any GQA ratio: at 8 query heads a KV head "
                    "(Qwen3-30B-A3B) it reads each key twice as often as the plain kernel",
        file="models/decoder.py",
        old="        if asked == \"rows\" and group < ROWS_A_BLOCK:\n",
        new="        if asked == \"rows\":\n",
        gates=(f"{SHARED_ROWS}::test_a_model_of_as_many_query_heads_a_kv_head_as_rows_a_block_keeps_the_plain_kernel",),
    ),
    Mutation(
        id="cuda-rows-attention-weighs-a-later-rows-value",
        description="the rows kernel adds 0 x v for a later row's key: an overflowed value there is NaN in every "
                    "earlier row of the run",
        file="backends/kernels/decode_attention.cu",
        old="                if (key >= ends[r]) continue;  // a later row's key: this row never weighs it, even as 0 x inf\n",
        new="",
        gates=tuple(f"{SHARED_ROWS}::test_cuda_rows_kernel_never_weighs_a_later_rows_key[{d}]"
                    for d in ("float32", "bfloat16")),
        needs_gpu=True,
    ),
]


# Session 26's GPU tests, in the gate lists of the GPU mutants they fail beside (predicted from each test's launch
# shapes, not yet run on the H200): the plain kernel at 64-key partitions (A), the rope variant there (B), the rows
# kernel against the plain one (C, by case) and with an overflowed value in a run's reach (D).
FLOOR_CUDA = tuple(f"{KERNELS}::test_cuda_paged_decode_at_the_lowest_partition_floor_equals_its_twin[{d}]"
                   for d in ("float32", "bfloat16"))
ROPE_FLOOR = tuple(f"{ROPE}::test_cuda_rope_variant_at_the_lowest_partition_floor_equals_the_two_launches[{d}]"
                   for d in ("float32", "bfloat16"))
ROWS_INF = tuple(f"{SHARED_ROWS}::test_cuda_rows_kernel_never_weighs_a_later_rows_key[{d}]"
                 for d in ("float32", "bfloat16"))
ALL_SHARED = ("prefix-hit-16x1024", "three-chunks-straddle", "one-row-each-gqa8", "mha-partition-edges")


def rows_eq(*names: str) -> tuple[str, ...]:
    return tuple(f"{SHARED_ROWS}::test_cuda_rows_kernel_equals_the_plain_kernel_bit_for_bit[{c}-{d}]"
                 for c in names for d in ("float32", "bfloat16", "float16"))


def rope_eq(*names: str) -> tuple[str, ...]:
    return tuple(f"{ROPE_GPU}[{c}-{d}]" for c in names for d in ("float32", "bfloat16", "float16"))


BESIDE = {
    "cuda-decode-reads-a-block-past-the-table": FLOOR_CUDA + rows_eq(*ALL_SHARED) + ROWS_INF,
    "cuda-decode-drops-the-online-rescale": rows_eq(*ALL_SHARED) + ROWS_INF,  # a 64-key partition is one tile
    "cuda-decode-split-blocks-read-the-wrong-kv-head": rows_eq("one-row-each-gqa8"),  # the only head-split launch
    # the plain kernel's q: the rope tests' unfused side too, wherever a block holds a head other than its KV head's
    "cuda-decode-wrong-kv-head": (FLOOR_CUDA + ROPE_FLOOR + rope_eq("block-edges-gqa2", "tiles-gqa4", "partitions-gqa8",
                                                                    "full-width-mqa")
                                  + rows_eq("prefix-hit-16x1024", "three-chunks-straddle", "one-row-each-gqa8")
                                  + ROWS_INF),
    # the merge serves both kernels (merge_warps): C's equality holds, its bound against the twin does not; D holds
    "cuda-decode-warp-merge-ignores-the-max": FLOOR_CUDA + rows_eq(*ALL_SHARED),
    # the reduce serves both kernels: C's equality holds, its bound against the twin does not where a row spans
    # partitions (the hit's case, 16 rows over 1,024 keys plus a padding row, 17 x 8 KV heads, is one partition since
    # session 33's 256 blocks a launch: the H100 kept that case green)
    "cuda-decode-reduction-sums-unrescaled-parts": FLOOR_CUDA + rows_eq("three-chunks-straddle", "mha-partition-edges"),
    "cuda-rope-attention-leaves-a-partitioned-contexts-key-unwritten": ROPE_FLOOR,
    "cuda-rope-attention-drops-qs-rotary": ROPE_FLOOR,
    "cuda-rope-attention-writes-a-padding-rows-kv": ROPE_FLOOR,
    "cuda-rows-attention-ignores-a-rows-own-end": ROWS_INF,
    "cuda-rows-attention-reads-the-leads-table-for-every-row": rows_eq("mha-partition-edges"),
}
ENTRIES[:] = [dataclasses.replace(m, gates=m.gates + BESIDE[m.id]) if m.id in BESIDE else m for m in ENTRIES]
assert {m.id for m in ENTRIES} >= set(BESIDE), "a mutant BESIDE names is registered"


# The tensor-core rows kernel (session 29): a prefix hit's tail run whole reads its keys once for 64 query rows
RCU = "backends/kernels/rows_attention.cu"
ROWS_FLAG = f"{RA}::test_the_flag_picks_the_kernel_and_the_decoder_keeps_it_to_a_16_bit_cache"
ROWS_GQA = f"{RA}::test_the_decoder_keeps_the_mma_kernel_to_at_most_64_query_heads_a_kv_head"
ROWS_E2E = f"{RA}::test_a_prefix_hits_tail_runs_on_tensor_cores_and_generates_the_plain_kernels_tokens"
ROWS_CHUNK = f"{RA}::test_a_late_chunk_in_a_mixed_step_attends_on_tensor_cores_and_keeps_the_tokens"
LONG_DECODE = f"{RA}::test_decode_rows_over_a_table_the_flag_calls_long_attend_on_tensor_cores"
LONG_DECODE_CACHE = f"{RA}::test_the_decoder_keeps_long_decode_on_tensor_cores_to_a_16_bit_cache"
ENTRIES += [
    Mutation(
        id="decode-mma-from-ignores-the-width",
        description="VT_DECODE_MMA_FROM sends every decode step to the tensor-core rows kernel, whatever its table's "
                    "width: short contexts lose the decode kernel the flag keeps them",
        file="models/decoder.py",
        old="        wide = self.decode_mma_from and block_tables.shape[1] * kv.block_size >= self.decode_mma_from\n",
        new="        wide = self.decode_mma_from\n",
        gates=(LONG_DECODE,),
    ),
    Mutation(
        id="decode-mma-from-over-a-float32-cache",
        description="VT_DECODE_MMA_FROM is taken over a float32 cache, which no tensor core takes",
        file="models/decoder.py",
        old="        if not keys or (self.kv_dtype != np.float32 and group <= ROWS_MMA):\n",
        new="        if not keys or group <= ROWS_MMA:\n",
        gates=(LONG_DECODE_CACHE,),
    ),
]
ENTRIES += [
    Mutation(
        id="rows-mma-flag-ignored",
        description="VT_SHARED_ROWS_ATTENTION=mma gives short steps graphs apart, but the decoder never takes the "
                    "tensor-core kernel: a hit's tail still reads its keys once a row",
        file="models/decoder.py",
        old="        if asked in (\"mma\", \"auto\") and self.kv_dtype != np.float32 and group <= ROWS_MMA:\n",
        new="        if False:\n",
        gates=(ROWS_FLAG, ROWS_E2E, ROWS_CHUNK, f"{ROWS_GQA}[64]"),
    ),
    Mutation(
        id="rows-mma-off-by-default",
        description="VT_SHARED_ROWS_ATTENTION unset reads as off: a prefix hit's tail reads its keys once a row unless "
                    "the user knows the flag (the H200 measured mma faster, session 30)",
        file="vt/env.py",
        old="    raw = (os.environ.get(\"VT_SHARED_ROWS_ATTENTION\") or \"auto\").strip().lower()\n",
        new="    raw = (os.environ.get(\"VT_SHARED_ROWS_ATTENTION\") or \"off\").strip().lower()\n",
        gates=(ROWS_FLAG,),
        expect="auto, the default",
    ),
    Mutation(
        id="rows-mma-fallback-unsaid",
        description="a model that cannot take the kernel VT_SHARED_ROWS_ATTENTION names falls back to the plain decode "
                    "kernel without a word",
        file="models/decoder.py",
        old="        if asked in (\"rows\", \"mma\"):  # asked by name for a kernel this model cannot take: said, not "
            "silent\n",
        new="        if False:\n",
        gates=(ROWS_FLAG, ROWS_GQA),
        expect="a declined flag is said",
    ),
    Mutation(
        id="rows-mma-past-64-heads-a-kv-head",
        description="the decoder takes the tensor-core rows kernel at any GQA ratio: a model of more than 64 query "
                    "heads a KV head (a block's 64 rows) is refused by the binding at its first prefix hit",
        file="models/decoder.py",
        old="        if asked in (\"mma\", \"auto\") and self.kv_dtype != np.float32 and group <= ROWS_MMA:\n",
        new="        if asked in (\"mma\", \"auto\") and self.kv_dtype != np.float32:\n",
        gates=(f"{ROWS_GQA}[128]",),
    ),
    Mutation(
        id="rows-target-blocks-flag-ignored",
        description="VT_ROWS_TARGET_BLOCKS is read but the rows kernel's partition rule keeps 256: the lane's A/B of "
                    "the hit's partitions times one setting twice",
        file="backends/kernels/rows_attention.py",
        old="    keys = -(-max_context // max(1, flags().rows_target_blocks // blocks))\n",
        new="    keys = -(-max_context // max(1, 256 // blocks))\n",
        gates=(f"{RA}::test_the_target_blocks_flag_sets_a_hits_partitions_and_the_twin_stays_attention",),
    ),
    Mutation(
        id="rows-min-partition-flag-ignored",
        description="VT_ROWS_MIN_PARTITION is read but the rows kernel's partitions keep two key tiles: the lane's "
                    "A/B of one-tile partitions times the default twice",
        file="backends/kernels/rows_attention.py",
        old="    return max(flags().rows_min_partition, -(-keys // KEY_TILE) * KEY_TILE)\n",
        new="    return max(MIN_PARTITION, -(-keys // KEY_TILE) * KEY_TILE)\n",
        gates=(f"{RA}::test_a_one_tile_floor_splits_a_hit_into_one_tile_partitions_and_the_twin_stays_attention",),
    ),
    Mutation(
        id="rows-mma-taken-over-a-float32-cache",
        description="the decoder takes the tensor-core rows kernel over a float32 cache, which no mma takes: the "
                    "binding refuses it at the first short step",
        file="models/decoder.py",
        old="        if asked in (\"mma\", \"auto\") and self.kv_dtype != np.float32 and group <= ROWS_MMA:\n",
        new="        if asked in (\"mma\", \"auto\") and group <= ROWS_MMA:\n",
        gates=(ROWS_FLAG,),
        expect="float32 cache",
    ),
    Mutation(
        id="rows-mma-accepts-partials-short-of-the-table",
        description="the tensor-core rows kernel's binding takes scratch for fewer partitions than its rule cuts the "
                    "table into (the decode kernel's count, say): the keys past them leave every row, silently",
        file="backends/kernels/rows_attention.py",
        old="    if P * part < keys:  # the keys past P partitions would be dropped, silently, by the kernel and the twin "
            "alike\n",
        new="    if False:\n",
        gates=(f"{RA}::test_partials_short_of_the_table_are_refused",),
    ),
    Mutation(
        id="rows-kernel-skipped-in-a-mixed-steps-break",
        description="a short chunk in a mixed step (the piecewise graph's eager attention break) attends with the plain "
                    "decode kernel whatever VT_SHARED_ROWS_ATTENTION says: a hit's tail beside other requests' decodes "
                    "reads its keys once a row",
        file="models/decoder.py",
        old="                                   fb.block_tables, kv, None, rows=self.rows_kernel)\n",
        new="                                   fb.block_tables, kv, None)\n",
        gates=(ROWS_CHUNK,),
    ),
    Mutation(
        id="cuda-rows-attention-leads-only-aligned-groups",
        description="the rows kernel's blocks lead only at aligned groups of 64 / G tokens: a run that starts inside a "
                    "group (a second sequence, a decode row beside a tail) is never attended",
        file=RCU,
        old="    if (at != 0 && token_row[y - 1] == trow) return;\n",
        new="    if (at != 0) return;\n",
        # a case of one run from token 0 (cut at aligned groups only) leaves only its padding, which no gate reads
        gates=cases(ROWS_CUDA, tuple(c for c in ROWS_CASES if c not in ("prefix-hit-16x1024",
                                                                        "one-partition-of-80-keys", "mha-run-of-70")),
                    LOW),
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-rows-attention-partials-in-log2-units",
        description="the rows kernel writes its partitions' maxima in log2 units where the reduce reads natural ones: "
                    "partitions weighed at the wrong scale",
        file=RCU,
        old="            part_ml[(row * P + p) * 2] = m[i];  // natural units, as paged_decode_reduce reads\n",
        new="            part_ml[(row * P + p) * 2] = m[i] * LOG2E;\n",
        # one partition: the kernel writes out, no partials (the target test's P = 1 passes, its others fail)
        gates=cases(ROWS_CUDA, ROWS_SPLIT, LOW) + ROWS_HIT_CUDA + (ROWS_ONE_TILE_CUDA,),
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-rows-attention-reads-the-first-kv-heads-queries",
        description="the rows kernel maps a block's rows to the first KV head's query heads whatever its KV head: the "
                    "other KV heads' queries are never attended, their outputs never written",
        file=RCU,
        old="        head[i] = kvh * G + r % G;\n",
        new="        head[i] = r % G;\n",
        gates=cases(ROWS_CUDA, ROWS_CASES, LOW) + ROWS_HIT_CUDA + (ROWS_ONE_TILE_CUDA,),  # each: KV heads > 1
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-tensor-core-tile-drops-the-online-rescale",
        description="the tensor-core tile (prefill and rows kernels) keeps O at the old max when a row's max grows",
        file=TCU,
        old="            o[j][0] *= alpha[0]; o[j][1] *= alpha[0];  // the online-softmax rescale to the new max\n"
            "            o[j][2] *= alpha[1]; o[j][3] *= alpha[1];\n",
        new="",
        # one-prompt's 37 keys are one tile; every rows case has a partition of two tiles
        gates=cases(PREFILL_CUDA, ("chunks-over-earlier-kv", "tile-edges", "long-over-earlier-kv"), LOW)
        + cases(ROWS_CUDA, ROWS_CASES, LOW) + (PREFILL_HPB,) + ROWS_HIT_CUDA
        + cases(PREFILL_WGMMA, ("chunks-over-earlier-kv", "tile-edges", "long-over-earlier-kv"), LOW),
        needs_gpu=True,
    ),
]


# The tensor-core skinny GEMM (session 29): a tuner candidate for 2..16 rows
MMA = "tests/backends/test_skinny_mma.py"
MMA_SHAPES = [(16, 4096, 1024), (16, 1024, 2048), (16, 6144, 1024), (16, 1024, 3072), (9, 4096, 4096),
              (3, 1024, 2056), (5, 8, 4096), (2, 32768, 1024), (16, 1000, 24)]  # test_skinny_mma.py's SHAPES


def mma_ids(keep: Any, dtypes: tuple[str, ...] = ("bfloat16", "float16")) -> list[str]:
    """The test ids (m-n-k-dtype-config, or m-n-k-config without dtypes) of the (shape, configuration) cases
    `keep(m, n, k, step, slices)` names."""
    return [f"{m}-{n}-{k}-{d}nt{c.nt}s{c.stages}x{c.per_sm}" for m, n, k in MMA_SHAPES
            for d in ([f"{d}-" for d in dtypes] or [""]) for c in skinny_mma.CONFIGS
            if keep(m, n, k, *skinny_mma.split(m, n, k, c))]


MMA_CUDA = f"{MMA}::test_cuda_skinny_mma_equals_its_twin_twice_on_one_scratch"
# tiny-qwen3's step on tensor-core plans: every K is 64 or 192 (four k16 steps and more, one slice)
MMA_STEP = tuple(f"{MMA}::test_on_the_gpu_a_step_on_tensor_core_plans_computes_the_cublaslt_steps_logits[{r}]"
                 for r in (8, 16))
# The tuner's candidates are checked against cuBLASLt: a broken kernel fails there too (the H200, session 30)
MMA_PLAN = f"{MMA}::test_a_16_row_plan_times_the_tensor_core_gemm_and_every_candidate_is_right"
ENTRIES += [
    Mutation(
        id="skinny-mma-split-drops-a-short-last-slice",
        description="the tensor-core GEMM's split counts only whole slices: where no slice length divides K, the "
                    "last rows of K are never multiplied",
        file="backends/kernels/skinny_mma.py",
        old="    return step, -(-k // step)\n",
        new="    return step, k // step\n",
        gates=(*(f"{MMA}::test_the_twin_equals_the_product[{i}]"
                 for i in mma_ids(lambda m, n, k, step, s: k % step != 0)),
               *(f"{MMA}::test_the_split_covers_k_exactly_in_whole_k16_steps_within_the_scratch[{i}]"
                 for i in mma_ids(lambda m, n, k, step, s: k % step != 0, dtypes=())),
               f"{MMA}::test_the_split_reaches_a_short_last_slice_and_spreads_a_narrow_n"),
    ),
    Mutation(
        id="cuda-skinny-mma-drops-the-last-warps-sum",
        description="the tensor-core GEMM's block adds its first three warps' tiles only: the k16 steps of every "
                    "fourth are lost",
        file="backends/kernels/skinny_mma.cu",
        old="        for (int w = 0; w < MMA_GEMM_WARPS; w++) v += sums[(w * MMA_GEMM_ROWS + m) * SUM_STRIDE + col];\n",
        new="        for (int w = 0; w < MMA_GEMM_WARPS - 1; w++) v += sums[(w * MMA_GEMM_ROWS + m) * SUM_STRIDE + col];\n",
        # a slice of fewer than four k16 steps leaves the fourth warp idle: its sum is zero either way
        gates=tuple(f"{MMA_CUDA}[{i}]" for i in mma_ids(lambda m, n, k, step, s: min(step, k) > 48)) + MMA_STEP + (MMA_PLAN,),
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-skinny-mma-a-fragment-halves-crossed",
        description="the tensor-core GEMM loads A's fragments with rows and k halves crossed: a row's products over "
                    "k + 8 .. k + 15 come from the wrong row",
        file="backends/kernels/skinny_mma.cu",
        old="            const int r = g + 8 * (e & 1), k = kk + 2 * tig + 8 * (e >> 1);\n",
        new="            const int r = g + 8 * (e >> 1), k = kk + 2 * tig + 8 * (e & 1);\n",
        gates=tuple(f"{MMA_CUDA}[{i}]" for i in mma_ids(lambda m, n, k, step, s: True)) + MMA_STEP + (MMA_PLAN,),
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-skinny-mma-leaves-its-tile-counters-set",
        description="the tensor-core GEMM's last block never resets its column tile's counter: the next launch (a "
                    "graph's replay) finds no last block and leaves C unwritten",
        file="backends/kernels/skinny_mma.cu",
        old="    if (threadIdx.x == 0) counters[blockIdx.x] = 0;\n",
        new="",
        gates=tuple(f"{MMA_CUDA}[{i}]" for i in mma_ids(lambda m, n, k, step, s: s > 1)) + (MMA_PLAN,),
        needs_gpu=True,
    ),
    Mutation(
        id="skinny-mma-timed-unless-asked",
        description="every 2..16-row plan times the tensor-core GEMM without VT_SKINNY_MMA: a kernel the H200 has not "
                    "checked is picked on its time alone",
        file="backends/kernels/skinny_mma.py",
        old="    return flags().skinny_mma and fits(m, n, k, dtype, epilogue if fuses(epilogue) else \"\")\n",
        new="    return fits(m, n, k, dtype, epilogue if fuses(epilogue) else \"\")\n",
        gates=("tests/backends/test_skinny_mma_timing.py::test_the_kernel_is_timed_only_when_asked",),
    ),
    Mutation(
        id="gemm-tuner-never-times-the-tensor-core-gemm",
        description="a plan of 2..16 rows times cuBLASLt and the CUDA-core kernel only: a 16-row step never runs the "
                    "tensor-core GEMM",
        file="backends/cublaslt.py",
        old="            self.candidates += list(skinny_mma.CONFIGS)  # the norm and SwiGLU in its launch, other consumers after it\n",
        new="            pass\n",
        gates=(f"{MMA}::test_a_16_row_plan_times_the_tensor_core_gemm_and_every_candidate_is_right", *MMA_STEP),
        needs_gpu=True,
    ),
]


# The tensor-core GEMM's epilogues (session 41): the norm and SwiGLU in its own launch at 2..16 rows
MMA_NORM_CUDA = f"{MMA}::test_cuda_skinny_mma_with_the_norm_epilogue_equals_its_twin_on_one_scratch"
MMA_SWIGLU_CUDA = f"{MMA}::test_cuda_skinny_mma_with_the_swiglu_epilogue_equals_its_twin_on_one_scratch"
MMA_NORM_SHAPES = [(16, 1024, 2048), (8, 1024, 3072), (3, 2048, 1024), (2, 512, 96), (16, 4096, 4096),
                   (16, 1032, 1024)]  # test_skinny_mma.py's
MMA_SWIGLU_SHAPES = [(16, 6144, 1024), (8, 6144, 1024), (9, 1040, 96), (2, 256, 2048),
                     (16, 24576, 4096)]  # test_skinny_mma.py's, the 8B's last


def mma_epilogue_ids(shapes: list[tuple[int, int, int]], keep: Any = lambda m, n, k, step, s: True) -> list[str]:
    """test_skinny_mma.py's epilogue test ids (m-n-k-config) of the cases `keep(m, n, k, step, slices)` names."""
    return [f"{m}-{n}-{k}-nt{c.nt}s{c.stages}x{c.per_sm}" for m, n, k in shapes for c in skinny_mma.CONFIGS
            if keep(m, n, k, *skinny_mma.split(m, n, k, c))]


ENTRIES += [
    Mutation(
        id="cuda-skinny-mma-norm-leaves-its-counter-counted",
        description="the tensor-core GEMM's norm never resets its grid-wide counter: the next launch (a graph's "
                    "replay) finds no last block, and x and h keep the last step's values",
        file="backends/kernels/skinny_mma.cu",
        old="        if (threadIdx.x == 0) *done = 0;\n",
        new="",
        gates=tuple(f"{MMA_NORM_CUDA}[{i}]" for i in mma_epilogue_ids(MMA_NORM_SHAPES)),
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-skinny-mma-swiglu-swaps-gate-and-up",
        description="the tensor-core GEMM's unsplit SwiGLU reads a pair's up columns as its gate and its gate as up: "
                    "SiLU(up) x gate",
        file="backends/kernels/skinny_mma.cu",
        old="            h[(i64)m * (N / 2) + n0 / 2 + o] = from_f32<T>(silu_times(gate, up));\n        }\n        return;\n",
        new="            h[(i64)m * (N / 2) + n0 / 2 + o] = from_f32<T>(silu_times(up, gate));\n        }\n        return;\n",
        gates=tuple(f"{MMA_SWIGLU_CUDA}[{i}]" for i in mma_epilogue_ids(MMA_SWIGLU_SHAPES, lambda m, n, k, st, s: s == 1)),
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-skinny-mma-split-swiglu-drops-the-last-slice",
        description="the tensor-core GEMM's split SwiGLU adds the first S - 1 slices' partial tiles: the last slice's "
                    "rows of K never reach the activation",
        file="backends/kernels/skinny_mma.cu",
        old="                for (int s = 0; s < S; s++) {  // slice order; L2: other SMs wrote them\n",
        new="                for (int s = 0; s < S - 1; s++) {  // slice order; L2: other SMs wrote them\n",
        gates=tuple(f"{MMA_SWIGLU_CUDA}[{i}]" for i in mma_epilogue_ids(MMA_SWIGLU_SHAPES, lambda m, n, k, st, s: s > 1)),
        needs_gpu=True,
    ),
    Mutation(
        id="gemm-plans-fuse-nothing-past-eight-rows",
        description="a GEMM of 9..16 rows gets no plan for itself and its norm or SwiGLU: the tensor-core kernel's "
                    "fused launch is never timed there, and its consumer always runs as a launch of its own",
        file="backends/cublaslt.py",
        old="    return skinny_gemm.fits(m, n, storage, kind) or (skinny_mma.fuses(kind)\n",
        new="    return skinny_gemm.fits(m, n, storage, kind) or (False\n",
        gates=(f"{MMA}::test_a_16_row_norm_or_swiglu_plan_is_fusable_only_under_the_flag",),
    ),
    Mutation(
        id="skinny-mma-swiglu-serves-half-a-pair",
        description="the tensor-core GEMM takes SwiGLU at any N of whole 16-byte groups: a last tile ending in half a "
                    "gate/up pair reads past N for its up columns",
        file="backends/kernels/skinny_mma.py",
        old="    pairs = epilogue == \"swiglu\"\n",
        new="    pairs = False\n",
        gates=(f"{MMA}::test_the_epilogues_serve_whole_gate_up_pairs_and_one_consumer_a_launch",),
    ),
]


# Two query heads a block in the prefill kernel (session 29, VT_PREFILL_HEADS_A_BLOCK=2)
ENTRIES += [
    Mutation(
        id="prefill-two-heads-across-kv-heads",
        description="VT_PREFILL_HEADS_A_BLOCK=2 pairs heads whatever the query heads a KV head: at three a KV head a "
                    "block's second head reads the wrong KV head's keys",
        file="backends/kernels/prefill_attention.py",
        old="    if asked == 1 or ((nh // nkv) % asked == 0 and hd >= 32):\n",
        new="    if asked == 1 or hd >= 32:\n",
        gates=(f"{KERNELS}::test_two_heads_a_block_only_where_they_share_a_kv_head_and_fill_a_tiles_copies",),
    ),
    Mutation(
        id="prefill-heads-a-block-fallback-unsaid",
        description="VT_PREFILL_HEADS_A_BLOCK=2 on a shape that cannot take it falls back to one head a block without "
                    "a word",
        file="backends/kernels/prefill_attention.py",
        old="    _say_heads_a_block_declined(asked, nh // nkv, hd)\n",
        new="",
        gates=(f"{KERNELS}::test_two_heads_a_block_only_where_they_share_a_kv_head_and_fill_a_tiles_copies",),
        expect="declined, said",
    ),
    Mutation(
        id="cuda-prefill-two-heads-attend-one",
        description="the prefill kernel's second warp group of a two-head block serves the first head again: the "
                    "block's second head is never written",
        file=PCU,
        old="    const int q0 = tile[1], p0 = tile[3], head = blockIdx.y * HPB + (HPB == 1 ? 0 : warp / 4);\n",
        new="    const int q0 = tile[1], p0 = tile[3], head = blockIdx.y * HPB;\n",
        gates=cases(PREFILL_HPB, PREFILL_CASES, LOW),
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-prefill-wgmma-second-slab-never-read",
        description="the warpgroup prefill kernel's S = Q K^T steps through the first 64-dim slab of K only: at head "
                    "dim 128 the second half of q meets the first half of k",
        file=PWG, old="sw128_desc(k_addr + (s >> 2) * WG_SLAB + (s & 3) * 32, 16,",
        new="sw128_desc(k_addr + (s & 3) * 32, 16,",
        gates=cases(PREFILL_WGMMA, PREFILL_CASES, LOW),
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-prefill-wgmma-copies-unswizzled",
        description="the warpgroup prefill kernel's cp.async writes K and V rows plainly where its descriptors read "
                    "the 128-byte swizzle",
        file=PWG, old="(((c & 7) ^ (key & 7)) << 4)", new="((c & 7) << 4)",
        gates=cases(PREFILL_WGMMA, PREFILL_CASES, LOW),
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-prefill-wgmma-tiles-land-in-one-stage",
        description="the warpgroup prefill kernel copies every key tile into its first stage while it reads each "
                    "tile from the stage of its number",
        file=PWG, old="request_swizzled<KV, HD>(smem + (n & 1) * STAGE, k_bytes,",
        new="request_swizzled<KV, HD>(smem, k_bytes,",
        # one-prompt's 37 keys are one tile
        gates=cases(PREFILL_WGMMA, ("chunks-over-earlier-kv", "tile-edges", "long-over-earlier-kv"), LOW),
        needs_gpu=True,
    ),
    Mutation(
        id="prefill-wgmma-auto-never-takes-it",
        description="VT_PREFILL_WGMMA=auto (the default) keeps the mma.sync kernel where the warpgroup kernel applies",
        file=PTWIN, old='    if asked == "0":\n        return False\n    shape =',
        new='    if asked != "1":\n        return False\n    shape =',
        gates=(f"{KERNELS}::test_wgmma_prefill_only_where_the_shape_and_device_serve_it", *WGMMA_LAUNCHES),
        expect="auto (the default) takes it",
    ),
    Mutation(
        id="prefill-wgmma-fallback-unsaid",
        description="VT_PREFILL_WGMMA=1 on a shape or device it cannot serve falls back without a word",
        file=PTWIN, old="        _say_wgmma_declined(hd, np.dtype(cache_dtype).name, cc)\n", new="        pass\n",
        gates=(f"{KERNELS}::test_wgmma_prefill_only_where_the_shape_and_device_serve_it",),
        expect="declined, said",
    ),
    Mutation(
        id="prefill-wgmma-on-any-device",
        description="the warpgroup kernel's sm_90a cubin is taken on any device, not on compute capability 9.0 alone",
        file=PTWIN, old="    fits = shape and cc == 90\n", new="    fits = shape\n",
        gates=(f"{KERNELS}::test_wgmma_prefill_only_where_the_shape_and_device_serve_it",),
        expect="an sm_90a cubin runs on 9.0 alone",
    ),
    Mutation(
        id="kernel-build-compiles-an-arch-instance-for-the-shared-target",
        description="the CI compile check builds an instance with its own target (sm_90a, wgmma) under the shared "
                    "-arch=sm_90a, whose compute_90 pass rejects wgmma",
        file="backends/kernels/build.py", old='            cmd = [nvcc, *target, "-Xptxas=-v",',
        new='            cmd = [nvcc, *NVCC_OPTIONS, "-Xptxas=-v",',
        gates=("tests/backends/test_kernel_build.py::test_an_instance_with_its_own_target_compiles_for_it_alone",),
    ),
    Mutation(
        id="prefill-wgmma-instances-lose-their-target",
        description="the wgmma prefill kernel's CI instances carry no target of their own",
        file=PTWIN, old="                          arch=WGMMA_ARCH)\n                 for kv in",
        new="                          )\n                 for kv in",
        gates=("tests/backends/test_kernel_build.py::test_the_wgmma_instances_carry_their_own_target",),
        expect="the wgmma instances carry their target",
    ),
    Mutation(
        id="prefill-wgmma-sm-count-cached-by-namespace",
        description="the warpgroup binding caches the multiprocessor count by the namespace it is handed, which the "
                    "CUDA backend's is not hashable",
        file=PTWIN, old="def _sm_count(cp: Any) -> int:\n",
        new="@functools.cache\ndef _sm_count(cp: Any) -> int:\n",
        gates=WGMMA_LAUNCHES,
        expect="the wgmma binding cannot take the backend's namespace",
    ),
    Mutation(
        id="prefill-wgmma-one-register-budget",
        description="the warpgroup binding takes 2 blocks a multiprocessor whatever the grid",
        file=PTWIN, old="    return 3 if working_blocks > 2 * sm_count else 2\n", new="    return 2\n",
        gates=(f"{KERNELS}::test_wgmma_prefill_takes_fewer_registers_where_its_grid_is_several_waves",
               f"{KERNELS}::test_the_wgmma_binding_takes_the_backends_namespace"),
    ),
    Mutation(
        id="prefill-wgmma-counts-the-padded-grid",
        description="the warpgroup binding picks its blocks an SM by the launch's grid, which a graph bucket pads far "
                    "past its tokens' tiles",
        file=PTWIN, old="    working = -(-T // TILE_QUERIES) * nh\n", new="    working = tiles.shape[0] * nh\n",
        gates=(f"{KERNELS}::test_the_wgmma_binding_counts_a_graph_buckets_tiles_by_its_tokens",),
        expect="a padded bucket of one wave's work took",
    ),
    Mutation(
        id="prefill-heads-a-block-dropped-silently-under-wgmma",
        description="VT_PREFILL_HEADS_A_BLOCK=2 is dropped without a word where the warpgroup kernel serves the shape",
        file=PTWIN, old="            _say_heads_a_block_not_wgmmas(hd)\n", new="            pass\n",
        gates=(f"{KERNELS}::test_heads_a_block_is_said_not_to_apply_where_the_wgmma_kernel_serves",),
        expect="asked, said",
    ),
    Mutation(
        id="kernel-cubin-cache-never-read",
        description="the sm_90a CUBIN cache is written and never read: every process compiles every wgmma kernel",
        file="backends/kernels/build.py", old="    if not fresh:\n        try:\n            name, _, cubin",
        new="    if False:\n        try:\n            name, _, cubin",
        gates=("tests/backends/test_kernel_build.py::"
               "test_the_sm90a_cubin_cache_serves_a_second_process_and_replaces_a_bad_file",),
        expect="served from disk",
    ),
    Mutation(
        id="kernel-cubin-cache-ignores-fresh",
        description="a CUBIN the driver refused is served again from the cache instead of compiled afresh",
        file="backends/kernels/build.py", old="    if not fresh:\n        try:\n            name, _, cubin",
        new="    if True:\n        try:\n            name, _, cubin",
        gates=("tests/backends/test_kernel_build.py::"
               "test_the_sm90a_cubin_cache_serves_a_second_process_and_replaces_a_bad_file",),
    ),
    Mutation(
        id="serialized-wgmma-check-knows-c7513-only",
        description="the CI check fails a kernel ptxas serializes for one reason (C7513) and passes the others (C7511 "
                    "too few registers, C7515)",
        file="backends/kernels/build.py", old='    return re.findall(r"\\(C75\\d\\d\\)',
        new='    return re.findall(r"\\(C7513\\)',
        gates=("tests/backends/test_kernel_build.py::test_the_check_fails_a_kernel_whose_wgmma_ptxas_serializes",),
        expect="another reason ptxas gives",
    ),
]

# The graph driver's narrowest table width, the decode attention's partition floor's (VT_DECODE_MIN_PARTITION).
ENTRIES += [
    Mutation(
        id="graph-driver-pads-short-tables-to-the-default-floor",
        description="the narrowest decode graph is 256 keys wide whatever the partition floor: under a 128-key floor "
                    "a one-row step over 128 keys launches an empty second partition and the reduce",
        file="vt/engine/worker/graph_driver.py",
        old="        self.min_width = width_bucket(-(-flags().decode_min_partition // kv.block_size))\n",
        new="        self.min_width = width_bucket(-(-256 // kv.block_size))\n",
        gates=("tests/engine/test_decode_widths.py::test_a_one_row_step_within_the_partition_floor_runs_one_partition",),
        expect="step replayed (keys, partitions)",
    ),
]

# scripts/replay-ab --kernels: each kernel's share of the replay, not its (overlapping) duration.
MARGINAL = "tests/engine/test_lane_replay_marginal.py"
ENTRIES += [
    Mutation(
        id="replay-marginal-charges-whole-durations",
        description="replay-ab charges each kernel its whole duration: under PDL a kernel launched early is charged "
                    "the wait for the one ahead, and the charges exceed the replay",
        file="scripts/replay-ab",
        old="        out[name] = out.get(name, 0.0) + max(0.0, end - frontier)\n",
        new="        out[name] = out.get(name, 0.0) + (end - start)\n",
        gates=(f"{MARGINAL}::test_marginal_times_charge_each_kernel_what_it_adds_and_sum_to_the_span",
               f"{MARGINAL}::test_a_kernel_inside_anothers_span_adds_nothing"),
    ),
    Mutation(
        id="replay-marginal-charges-idle-to-the-next-kernel",
        description="replay-ab charges the GPU's idle stretch before a kernel to that kernel: host stalls read as a "
                    "slow kernel",
        file="scripts/replay-ab",
        old="            out[IDLE] = out.get(IDLE, 0.0) + start - frontier\n            frontier = start\n",
        new="            pass\n",
        gates=(f"{MARGINAL}::test_marginal_times_charge_each_kernel_what_it_adds_and_sum_to_the_span",),
    ),
]

# The rope kernel's last block of a token's partitions merges them (VT_DECODE_MERGE_IN_ATTENTION): no reduce launch.
MERGE_GPU = f"{ROPE}::test_cuda_rope_variant_merging_its_partitions_in_its_last_block_equals_the_two_launches"
MERGE_GPU_CASES = tuple(f"{MERGE_GPU}[{d}]" for d in ("float32", "bfloat16", "float16"))
MERGE_REPLAY = f"{ROPE}::test_cuda_a_replayed_decode_step_merging_in_the_attention_computes_the_reduce_kernels_logits"
CLUSTER_GPU = f"{ROPE}::test_cuda_rope_variant_merging_its_partitions_in_a_cluster_equals_the_two_launches"
CLUSTER_GPU_CASES = tuple(f"{CLUSTER_GPU}[{d}]" for d in ("float32", "bfloat16", "float16"))
ENTRIES += [
    Mutation(
        id="cuda-decode-merge-takes-the-count-one-partition-early",
        description="the block that counts the token's second-to-last live partition merges, before the last "
                    "partition's partials are written (a context of one partition is never merged)",
        file=CU,
        old="        last = arrived == (unsigned)(np - 1);\n",
        new="        last = arrived == (unsigned)(np - 2);\n",
        # not the replay test: at two partitions the early merger reads a partner that has mostly written its
        # partials already (it survived that gate alone on the H100, session 40); the kernel test's 3 and 4 do not
        gates=MERGE_GPU_CASES,
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-decode-merge-leaves-its-counter-counted",
        description="the merging block leaves its counter at the partitions' count: the next layer's launch (or the "
                    "graph's next replay) never finds its last block",
        file=CU,
        old="        const unsigned arrived = atomicInc(counter, (unsigned)(np - 1));  // the last arrival sets it back to 0\n",
        new="        const unsigned arrived = atomicAdd(counter, 1u);\n",
        gates=(*MERGE_GPU_CASES, f"{MERGE_REPLAY}[1]"),
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-decode-cluster-merge-reads-rank-0s-partials-alone",
        description="the cluster's rank 0 weighs its own partial output for every partition: the other block's "
                    "keys are weighed, their values never read",
        file=CU,
        old="            const float o = merged_dim([=](int p, int dd) { return cluster_load(sink + h * HD + dd, p); }, "
            "weight[h],\n",
        new="            const float o = merged_dim([=](int p, int dd) { return cluster_load(sink + h * HD + dd, 0); }, "
            "weight[h],\n",
        gates=(*CLUSTER_GPU_CASES, f"{MERGE_REPLAY}[cluster]"),
        needs_gpu=True,
    ),
    Mutation(
        id="cuda-decode-cluster-launch-still-reduces",
        description="a launch that merges in its clusters is followed by the reduce launch all the same: the same "
                    "output, a launch a layer more",
        file=TWIN,
        old="    if not mode:\n",
        new="    if not fused_merge:\n",
        gates=(*CLUSTER_GPU_CASES, f"{MERGE_REPLAY}[cluster]"),
        needs_gpu=True,
    ),
    Mutation(
        id="decode-clusters-any-split-context",
        description="a launch of more partitions than a cluster holds runs as clusters too: each cluster's rank 0 "
                    "merges its own two partitions alone",
        file=TWIN,
        old="    return flags().decode_merge_in_attention == \"cluster\" and partitions == DECODE_CLUSTER\n",
        new="    return flags().decode_merge_in_attention == \"cluster\" and partitions > 1\n",
        gates=(f"{KERNELS}::test_only_a_launch_of_exactly_a_clusters_partitions_merges_in_a_cluster",),
    ),
    Mutation(
        id="decode-merge-past-its-shared-weights",
        description="the rope kernel is handed a merge of more partitions than its shared weights hold (a write past "
                    "merge_in_last_block's array)",
        file=TWIN,
        old="    return (flags().decode_merge_in_attention == \"1\" and 1 < partitions <= MERGE_MAX_PARTITIONS\n",
        new="    return (flags().decode_merge_in_attention == \"1\" and 1 < partitions\n",
        gates=(f"{KERNELS}::test_the_rope_kernel_merges_only_partitions_its_shared_weights_and_the_counters_hold",),
    ),
]
