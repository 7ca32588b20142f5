"""Routed MoE (issue 27): each defect named in the NumPy twin (killed on the CPU by the twin-against-reference
gates) and in the CUDA kernel (killed in the GPU lane by the kernel-against-twin gate)."""

from __future__ import annotations

from mutations.model import Mutation

GATES = "tests/backends/test_moe_kernels.py"
CASES = ("one-token", "decode-batch", "prefill-chunk", "unaligned-widths")
TWIN = "backends/kernels/moe.py"
CU = "backends/kernels/moe.cu"


def layer_gates(dtypes: tuple[str, ...] = ("float32", "bfloat16")) -> tuple[str, ...]:
    return tuple(f"{GATES}::test_moe_layer_twins_equal_every_chosen_experts_mlp[{c}-{d}]" for c in CASES for d in dtypes)


GPU_CASES = (*CASES, "real-size-decode", "real-size-prefill", "router-of-128")


def cuda_gates() -> tuple[str, ...]:
    return tuple(f"{GATES}::test_cuda_moe_kernels_equal_their_twins[{c}-{d}]"
                 for c in GPU_CASES for d in ("float32", "bfloat16", "float16"))


def combine_norm_twin_gates() -> tuple[str, ...]:
    return tuple(f"{GATES}::test_combine_add_rms_norm_twin_adds_the_block_into_x_and_norms_it[{d}]"
                 for d in ("float32", "bfloat16"))


def combine_norm_cuda_gates() -> tuple[str, ...]:
    return tuple(f"{GATES}::test_cuda_combine_add_rms_norm_equals_its_two_launches_and_twin[{c}-{d}]"
                 for c in GPU_CASES for d in ("float32", "bfloat16"))


def route_rows_twin_gates(norms: tuple[bool, ...] = (True, False)) -> tuple[str, ...]:
    return tuple(f"{GATES}::test_route_gemm_rows_twin_routes_then_runs_each_choices_expert[{c}-{n}]"
                 for c in CASES for n in norms)


def route_rows_cuda_gates() -> tuple[str, ...]:
    return tuple(f"{GATES}::test_cuda_route_gemm_rows_equals_route_then_rows_and_twin[{c}-{d}]"
                 for c in GPU_CASES for d in ("float32", "bfloat16", "float16"))


ENTRIES: list[Mutation] = [
    Mutation(
        id="moe-twin-drops-the-second-expert",
        description="the combine twin adds only each token's first choice in expert order, dropping the second",
        file=TWIN, old="    for r in range(k):\n        j = order[:, r]\n",
        new="    for r in range(min(k, 1)):\n        j = order[:, r]\n",
        gates=(f"{GATES}::test_combine_twin_adds_every_choice_in_expert_order", *layer_gates(),
               *combine_norm_twin_gates()),
    ),
    Mutation(
        id="moe-twin-rows-read-the-first-choices-expert",
        description="the one-token GEMM's twin runs every routed row of a token through its first choice's expert",
        file=TWIN, old="    _group_twin(ids, offsets, experts, slots)  # the twin's own bookkeeping",
        new="    _group_twin(np.repeat(ids[:, :1], ids.shape[1], axis=1), offsets, experts, slots)  #",
        gates=(*(f"{GATES}::test_by_row_twin_gives_each_routed_row_its_own_experts_mlp[{c}]" for c in CASES),
               *route_rows_twin_gates()),  # the fused routing's twin runs its rows through this twin
    ),
    Mutation(
        id="moe-twin-combine-norm-leaves-x-unadded",
        description="the fused combine + norm twin norms the residual stream without adding the MoE block to it",
        file=TWIN, old="    add_rms_norm.twin(x, combined, None, w, h, eps)",
        new="    add_rms_norm.twin(x, None, None, w, h, eps)",
        gates=combine_norm_twin_gates(),
    ),
    Mutation(
        id="moe-twin-weights-not-renormalized",
        description="the routing twin keeps the softmax weights of the chosen experts where norm_topk_prob asks "
                    "for them divided by their sum",
        file=TWIN, old="    if norm_topk_prob:\n        p = p / p.sum(axis=-1, keepdims=True)\n",
        new="    if False:\n        p = p / p.sum(axis=-1, keepdims=True)\n",
        gates=(*(f"{GATES}::test_route_twin_takes_the_top_k_at_softmax_weights[{c}-True]" for c in CASES),
               *layer_gates(), *route_rows_twin_gates((True,))),
    ),
    Mutation(
        id="moe-twin-expert-offsets-off-by-one",
        description="the grouping twin moves every inner expert boundary one row late",
        file=TWIN, old="    np.cumsum(counts, out=offsets[1:])\n",
        new="    np.cumsum(counts, out=offsets[1:])\n    offsets[1:-1] += 1\n",
        # the one-token GEMM's twin groups the rows with this twin too (the kernel reads ids alone)
        gates=(*(f"{GATES}::test_group_twin_gives_each_expert_exactly_its_routed_rows[{c}]" for c in CASES),
               *layer_gates(),
               *(f"{GATES}::test_by_row_twin_gives_each_routed_row_its_own_experts_mlp[{c}]" for c in CASES),
               *route_rows_twin_gates()),
    ),
    Mutation(
        id="cuda-moe-drops-the-second-expert",
        description="the combine kernel adds only each token's first choice in expert order",
        file=CU, old="        if (r < k) acc += share[r] * v[r];", new="        if (r < 1) acc += share[r] * v[r];",
        gates=(*cuda_gates(), *combine_norm_cuda_gates()), needs_gpu=True,
    ),
    Mutation(
        id="cuda-moe-weights-not-renormalized",
        description="the routing kernel ignores norm_topk_prob",
        file=CU, old="    if (norm) my_p /= warp_sum(lane < k ? my_p : 0.0f);",
        new="    if (0) my_p /= warp_sum(lane < k ? my_p : 0.0f);",
        gates=(*cuda_gates(), *route_rows_cuda_gates()), needs_gpu=True,  # route_token serves both kernels
    ),
    Mutation(
        id="cuda-moe-expert-offsets-off-by-one",
        description="the grouping kernel ends the last expert's rows one early",
        file=CU, old="        offsets[E] = acc;\n", new="        offsets[E] = acc - 1;\n",
        gates=cuda_gates(), needs_gpu=True,
    ),
    Mutation(
        id="cuda-moe-rows-write-the-wrong-row",
        description="the one-token GEMM kernel's block r computes routed row r rounded down to even: odd rows are "
                    "never written",
        file=CU, old="const int begin = BY_ROW ? blockIdx.x : offsets[e]",
        new="const int begin = BY_ROW ? blockIdx.x - blockIdx.x % 2 : offsets[e]",
        gates=(*cuda_gates(), *route_rows_cuda_gates()), needs_gpu=True,  # the fused kernel's gate compares to it
    ),
    Mutation(
        id="cuda-moe-combine-norm-drops-the-second-expert",
        description="the fused combine + norm kernel adds only each token's first choice in expert order",
        file=CU, old="                if (r0 + r < k) {\n                    const float s = share[r0 + r];",
        new="                if (r0 + r < 1) {\n                    const float s = share[r0 + r];",
        gates=combine_norm_cuda_gates(), needs_gpu=True,
    ),
    Mutation(
        id="moe-twin-route-rows-ignore-norm-topk-prob",
        description="the fused routing + gate/up twin renormalizes the chosen experts' weights whatever the config "
                    "says",
        file=TWIN, old="    _route_twin(logits, ids, weights, norm_topk_prob)\n    _gemm_rows_twin(",
        new="    _route_twin(logits, ids, weights, True)\n    _gemm_rows_twin(",
        gates=route_rows_twin_gates((False,)),
    ),
    Mutation(
        id="cuda-moe-route-rows-run-the-first-choices-expert",
        description="the fused routing + gate/up kernel runs every routed row of a token through its first choice's "
                    "expert",
        file=CU, old="        if (threadIdx.x == j) expert = id;", new="        if (threadIdx.x == 0) expert = id;",
        gates=route_rows_cuda_gates(), needs_gpu=True,
    ),
]
ENTRIES += [
    Mutation(
        id="cuda-moe-route-always-renormalizes",
        description="the CUDA routing renormalizes the top-k weights whatever the config's norm_topk_prob says",
        file="backends/kernels/moe.py",
        old="                                               np.int32(bool(norm_topk_prob))))",
        new="                                               np.int32(1)))",
        gates=cuda_gates() + route_rows_cuda_gates(),
        needs_gpu=True,
    ),
]

CONSUMER = "tests/backends/test_consumer_norm.py"
ENTRIES += [
    Mutation(
        id="moe-consumer-norm-router-reads-the-stale-h",
        description="with the MoE consumer norm, the router GEMM reads h (which on CUDA nothing wrote this layer: the "
                    "o projection only added into x) instead of norming x itself",
        file="models/decoder.py",
        old="            b.rms_norm_gemm(*norm_in, h, self.w[f\"{i}.router_t\"], logits, eps=c.rms_norm_eps)\n",
        new="            b.gemm(h, self.w[f\"{i}.router_t\"], logits)\n",
        gates=(f"{CONSUMER}::test_the_moe_consumer_norm_moves_each_sparse_layers_norm_into_its_router_and_routed_gemm"
               "_with_the_same_logits",
               *(f"{CONSUMER}::test_with_sparse_neighbours_no_layer_reads_a_norm_the_consumers_ops_leave_unwritten"
                 f"[{p}-{d}-moe-too]" for p in ("always", "alternate") for d in ("dense-0-2", "dense-1-3"))),
    ),
    Mutation(
        id="moe-norm-route-twin-skips-the-norm",
        description="the normed routed gate/up's twin stages x narrowed, not RMSNorm(x) * w",
        file=TWIN, old="    add_rms_norm.twin(x, None, None, ln, h, eps)\n    _route_gemm_rows_twin(",
        new="    h[...] = narrow_host(x, h.dtype)\n    _route_gemm_rows_twin(",
        gates=(f"{CONSUMER}::test_the_moe_consumer_norm_moves_each_sparse_layers_norm_into_its_router_and_routed_gemm"
               "_with_the_same_logits",),
    ),
    Mutation(
        id="cuda-moe-norm-route-stages-x-not-its-norm",
        description="the normed routed gate/up kernel stages the row it was handed (h, unwritten by the consumer "
                    "norm's producer), not RMSNorm(x) * w",
        file=CU, old="        stage_normed_row<T>(xf + (i64)t * K, ln, xs, K, denom[0], 32);\n",
        new="        stage_rows<T, VEC>(x, xs, r, 1, slot, K, k, 32);\n",
        gates=tuple(f"{CONSUMER}::test_cuda_resid_then_the_normed_routed_gemm_equals_the_norm_epilogue_then_the_"
                    f"routed_gemm_bit_for_bit[{c}-{d}]"
                    for c in ("30B-A3B-one-token", "small-four-tokens") for d in ("bfloat16", "float16")),
        needs_gpu=True,
    ),
]
ENTRIES += [
    Mutation(
        id="moe-binding-launches-half-the-kernels-warps",
        description="the binding's block is four warps where moe.cu's kernels stride by eight: the normed row's "
                    "sums (row_denominators) would skip terms, and each block would own half its columns",
        file=TWIN, old="MAX_EXPERTS, MAX_TOP_K, GEMM_ROWS, GEMM_WARPS = 512, 32, 8, 8",
        new="MAX_EXPERTS, MAX_TOP_K, GEMM_ROWS, GEMM_WARPS = 512, 32, 8, 4",
        gates=(f"{GATES}::test_the_bindings_constants_are_the_kernels",),
    ),
]
