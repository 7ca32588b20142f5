// Routed MoE: top-k routing, the routed rows grouped by expert, grouped GEMMs over those rows only (SwiGLU fused
// into the gate/up one), and the weighted combine. Every buffer has a static size (T x top-k routed rows), so
// a step with MoE layers captures; which experts run is read from the device.
#include "common.cuh"

namespace vt {

constexpr int MOE_MAX_EXPERTS = 512;  // moe_route keeps 16 logits a lane
constexpr int MOE_MAX_TOP_K = 32;     // moe_route keeps one choice a lane
constexpr int MOE_ROWS = 8;           // routed rows a moe_gemm block holds in shared memory at a time
constexpr int MOE_WARPS = 8;          // moe_gemm's block: 8 warps, each its own output columns

// One token's routing, by one warp: row [E] float32 logits -> lane j < k holds choice j, *id (descending logit, a
// tie to the lower expert; a NaN logit is never preferred) and *p: the softmax over all E at it, divided by the k
// choices' sum when norm (Qwen3-MoE's norm_topk_prob). moe_route and moe_route_gemm_rows route through it alone.
__device__ __forceinline__ void route_token(const float* __restrict__ row, int E, int k, int norm, int* id, float* p) {
    constexpr int PER = MOE_MAX_EXPERTS / 32;
    const int lane = threadIdx.x & 31;
    float v[PER];
    float m = neg_inf();
#pragma unroll
    for (int i = 0; i < PER; i++) {
        const int e = lane + 32 * i;
        const float l = e < E ? row[e] : neg_inf();
        v[i] = l != l ? neg_inf() : l;
        m = fmaxf(m, l);  // fmaxf drops a NaN: the softmax's max over the numbers
    }
    m = warp_max(m);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < PER; i++)
        if (lane + 32 * i < E) s += expf(row[lane + 32 * i] - m);
    s = warp_sum(s);
    unsigned taken = 0;
    int my_id = 0;
    float my_p = 0.0f;
    for (int j = 0; j < k; j++) {
        float bv = neg_inf();
        int bi = 0x7fffffff;
#pragma unroll
        for (int i = 0; i < PER; i++) {
            const int e = lane + 32 * i;
            if (e < E && !((taken >> i) & 1u) && (v[i] > bv || (v[i] == bv && e < bi))) bv = v[i], bi = e;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
        }
        if ((bi & 31) == lane) taken |= 1u << (bi >> 5);
        if (lane == j) my_id = bi, my_p = expf(row[bi] - m) / s;
    }
    if (norm) my_p /= warp_sum(lane < k ? my_p : 0.0f);
    *id = my_id;
    *p = my_p;
}

// logits [T, E] float32 -> ids [T, k] int32 and weights [T, k] float32 (route_token). One warp per token.
__global__ void moe_route(const float* __restrict__ logits, int* __restrict__ ids, float* __restrict__ weights,
                          int T, int E, int k, int norm) {
    vt::pdl_entry();
    const int lane = threadIdx.x & 31;
    const int t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (t >= T) return;
    int id;
    float p;
    route_token(logits + (i64)t * E, E, k, norm, &id, &p);
    if (lane < k) ids[(i64)t * k + lane] = id, weights[(i64)t * k + lane] = p;
}

// ids [n] (n = T x k, a token's choices back to back) -> offsets [E + 1] (expert e's routed rows are
// slots[offsets[e] .. offsets[e + 1])), slots [n] (routed-row indices t k + j grouped by expert; within an expert
// in no set order, as each row's GEMM is independent of its neighbours) and experts [n_list] (the experts with
// rows, ascending, then -1: moe_gemm's blocks). One block; shared counts [E] and cursors [E].
__global__ void moe_group(const int* __restrict__ ids, int* __restrict__ offsets, int* __restrict__ experts,
                          int* __restrict__ slots, int n, int E, int n_list) {
    vt::pdl_entry();
    extern __shared__ int counts[];
    int* cursor = counts + E;
    for (int e = threadIdx.x; e < E; e += blockDim.x) counts[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) atomicAdd(&counts[ids[i]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int acc = 0, listed = 0;
        for (int e = 0; e < E; e++) {
            offsets[e] = cursor[e] = acc;
            if (counts[e] && listed < n_list) experts[listed++] = e;
            acc += counts[e];
        }
        offsets[E] = acc;
        for (; listed < n_list; listed++) experts[listed] = -1;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) slots[atomicAdd(&cursor[ids[i]], 1)] = i;
}

template <typename T, int VEC> __device__ __forceinline__ void load_vec(const T* p, float* out) {
    if constexpr (VEC * sizeof(T) == 16) {
        load_f32<T, VEC>(p, out);
    } else {
#pragma unroll
        for (int i = 0; i < VEC; i++) out[i] = to_f32(p[i]);
    }
}

// rows routed rows' inputs x[slot(r0 + r) / row_div] into shared memory xs [rows, K], by the block's threads from
// the first'th on (a caller may keep warps of its own busy meanwhile). The caller synchronizes after.
template <typename T, int VEC, typename Slot>
__device__ __forceinline__ void stage_rows(const T* __restrict__ x, T* xs, int r0, int rows, Slot slot, int K,
                                           int row_div, int first) {
    const int per_row = K / VEC;
    for (int idx = threadIdx.x - first; idx < rows * per_row; idx += blockDim.x - first) {
        const int r = idx / per_row, c = (idx - r * per_row) * VEC;
        const T* src = x + (i64)(slot(r0 + r) / row_div) * K + c;
        if constexpr (VEC * sizeof(T) == 16)
            *reinterpret_cast<uint4*>(xs + r * K + c) = *reinterpret_cast<const uint4*>(src);
        else
            xs[r * K + c] = *src;
    }
}

// Output columns [c0, c1) of the staged rows xs [rows, K] through expert weights we: each warp owns NCOL adjacent
// columns at a time and issues all their loads for a stretch of K before it sums any, so a warp waits one DRAM
// latency per stretch, not one per column (a column's sum keeps its k order: the same bits whatever NCOL). A lane
// reads VEC weights of a column at a time along K (w is [rows, K], K contiguous: HF's Linear layout) and the warp
// sums the lanes. SWIGLU: we's rows [0, N) are the gate, [N, 2 N) the up projection; out [slot, N] =
// narrow(silu(gate) * up). Otherwise out [slot, N] float32 = x_row @ we^T.
template <typename T, typename OUT, int VEC, bool SWIGLU, int ROWS, int NCOL, typename Slot>
__device__ __forceinline__ void expert_columns(const T* __restrict__ xs, const T* __restrict__ we, OUT* __restrict__ out,
                                               int r0, int rows, Slot slot, int N, int K, int c0, int c1) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int n0 = c0 + warp * NCOL; n0 < c1; n0 += MOE_WARPS * NCOL) {
        float acc[NCOL][ROWS], up[NCOL][ROWS];
        const T* wg[NCOL];
#pragma unroll
        for (int c = 0; c < NCOL; c++) {
            wg[c] = we + (i64)min(n0 + c, c1 - 1) * K;  // a column past c1 re-reads the last one, unstored
#pragma unroll
            for (int r = 0; r < ROWS; r++) acc[c][r] = up[c][r] = 0.0f;
        }
#pragma unroll 4
        for (int k = lane * VEC; k < K; k += 32 * VEC) {
            float a[NCOL][VEC], b[NCOL][VEC];
#pragma unroll
            for (int c = 0; c < NCOL; c++) {
                load_vec<T, VEC>(wg[c] + k, a[c]);
                if constexpr (SWIGLU) load_vec<T, VEC>(wg[c] + (i64)N * K + k, b[c]);
            }
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                if (r < rows) {
                    float xv[VEC];
                    load_vec<T, VEC>(xs + r * K + k, xv);
#pragma unroll
                    for (int c = 0; c < NCOL; c++) {
#pragma unroll
                        for (int i = 0; i < VEC; i++) {
                            acc[c][r] += a[c][i] * xv[i];
                            if constexpr (SWIGLU) up[c][r] += b[c][i] * xv[i];
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int c = 0; c < NCOL; c++) {
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                if (r < rows) {
                    const float g = warp_sum(acc[c][r]);
                    const i64 at = (i64)slot(r0 + r) * N + n0 + c;
                    if constexpr (SWIGLU) {
                        const float u = warp_sum(up[c][r]);
                        if (lane == 0 && n0 + c < c1) out[at] = from_f32<OUT>(silu_times(g, u));
                    } else {
                        if (lane == 0 && n0 + c < c1) out[at] = from_f32<OUT>(g);
                    }
                }
            }
        }
    }
}

// The grouped GEMM over routed rows. Block (b, y) takes expert experts[b] (none: it returns) and output columns
// [y cols, (y + 1) cols); it walks the expert's routed rows MOE_ROWS at a time, each row read from x at
// slot / row_div (a token's hidden state for the gate/up GEMM, the routed row itself for the down one) into
// shared memory, and expert_columns computes them.
// BY_ROW (a step of one token, whose k experts are distinct): block (r, y) takes routed row r itself, expert
// ids[r], with no grouping: the weights' first loads wait on one read of ids (the grouped form reads experts,
// offsets and slots one after another, after a moe_group launch), and x's row address is known at once.
// VEC: elements a lane loads at once (16 bytes, or 1 when K is not a multiple of 16 bytes).
template <typename T, typename OUT, int VEC, bool SWIGLU, bool BY_ROW, int NCOL>
__device__ __forceinline__ void routed_gemm(const T* __restrict__ x, const T* __restrict__ w,
                                            const int* __restrict__ offsets, const int* __restrict__ experts,
                                            const int* __restrict__ slots, OUT* __restrict__ out, int N, int K,
                                            int row_div, int cols) {
    constexpr int ROWS = BY_ROW ? 1 : MOE_ROWS;  // BY_ROW: experts is ids, offsets and slots are unused
    extern __shared__ __align__(16) unsigned char moe_smem[];
    T* xs = reinterpret_cast<T*>(moe_smem);  // [ROWS, K]
    const int e = experts[blockIdx.x];
    if (e < 0) return;
    const int begin = BY_ROW ? blockIdx.x : offsets[e], end = BY_ROW ? begin + 1 : offsets[e + 1];
    auto slot = [&](int i) { return BY_ROW ? i : slots[i]; };
    const int c0 = blockIdx.y * cols, c1 = min(N, c0 + cols);
    const T* we = w + (i64)e * (SWIGLU ? 2 * N : N) * K;
    for (int r0 = begin; r0 < end; r0 += ROWS) {
        const int rows = min(ROWS, end - r0);
        __syncthreads();  // the last chunk's readers are done with xs
        stage_rows<T, VEC>(x, xs, r0, rows, slot, K, row_div, 0);
        __syncthreads();
        expert_columns<T, OUT, VEC, SWIGLU, ROWS, NCOL>(xs, we, out, r0, rows, slot, N, K, c0, c1);
    }
}

template <typename T, typename OUT, int VEC, bool SWIGLU, int NCOL>
__global__ void moe_gemm(const T* __restrict__ x, const T* __restrict__ w, const int* __restrict__ offsets,
                         const int* __restrict__ experts, const int* __restrict__ slots, OUT* __restrict__ out,
                         int N, int K, int row_div, int cols) {
    vt::pdl_entry();
    routed_gemm<T, OUT, VEC, SWIGLU, false, NCOL>(x, w, offsets, experts, slots, out, N, K, row_div, cols);
}

// The by-row form (experts is ids).
template <typename T, typename OUT, int VEC, bool SWIGLU, int NCOL>
__global__ void moe_gemm_rows(const T* __restrict__ x, const T* __restrict__ w, const int* __restrict__ ids,
                              OUT* __restrict__ out, int N, int K, int row_div, int cols) {
    vt::pdl_entry();
    routed_gemm<T, OUT, VEC, SWIGLU, true, NCOL>(x, w, nullptr, ids, nullptr, out, N, K, row_div, cols);
}

// The by-row form for bf16 weights, at most 64 registers a thread: four blocks fit an SM, so a one-token down GEMM's
// 512 blocks (8 rows x 64 column groups) run in one wave on 132 SMs, where 68 registers left three blocks an SM and a
// tail wave (H200: 0.678 -> 0.667 ms a 30B-A3B-8L decode step; no spills). Only bf16: ptxas spills fp16's
// conversions under the bound, and under any bound gives a kernel more registers than it takes without one (the
// grouped kernel 160 for 102, fp16 by row 108 for 64), so the others keep the unbounded kernels.
template <typename T, typename OUT, int VEC, bool SWIGLU, int NCOL>
__global__ void __launch_bounds__(MOE_WARPS * 32, 4)
    moe_gemm_rows_bounded(const T* __restrict__ x, const T* __restrict__ w, const int* __restrict__ ids,
                          OUT* __restrict__ out, int N, int K, int row_div, int cols) {
    vt::pdl_entry();
    routed_gemm<T, OUT, VEC, SWIGLU, true, NCOL>(x, w, nullptr, ids, nullptr, out, N, K, row_div, cols);
}

// Token t's normed row RMSNorm(xf[t]) * ln (K floats, K % 4 == 0) narrowed to T into xs, by the block's threads
// from the first'th on, denom from row_denominators: the expression the skinny GEMM's norm epilogue writes h with.
template <typename T>
__device__ __forceinline__ void stage_normed_row(const float* __restrict__ xt, const float* __restrict__ ln, T* xs,
                                                 int K, float denom, int first) {
    const float4* x4 = reinterpret_cast<const float4*>(xt);
    const float4* g4 = reinterpret_cast<const float4*>(ln);
    for (int i = threadIdx.x - first; i < K / 4; i += blockDim.x - first) {
        const float4 v = x4[i], g = g4[i];
        T* o = xs + 4 * i;
        o[0] = from_f32<T>(v.x / denom * g.x);
        o[1] = from_f32<T>(v.y / denom * g.y);
        o[2] = from_f32<T>(v.z / denom * g.z);
        o[3] = from_f32<T>(v.w / denom * g.w);
    }
}

// moe_route, then moe_gemm_rows<SWIGLU> (a step of one token's gate/up GEMM), in one launch: block (r, y) routes
// token t = r / k in its first warp (route_token: every block of the token picks the same experts) while its other
// warps stage x's row t, then computes routed row r (choice j = r % k) through expert ids[t, j]. Block (t k, 0)
// writes the token's ids and weights [T, k] for the down GEMM and the combine after.
// NORM_IN (the consumer's norm, VT_MOE_CONSUMER_NORM): the row staged is RMSNorm(xf[t]) * ln, from the residual
// stream xf [T, K] float32, its denominator summed by all the block's warps first (row_denominators: the order the o
// projection's norm epilogue sums in, so the staged row is the h that epilogue writes, bit for bit); x is unused.
template <typename T, typename OUT, int VEC, int NCOL, bool NORM_IN = false>
__global__ void moe_route_gemm_rows(const float* __restrict__ logits, const T* __restrict__ x,
                                    const T* __restrict__ w, int* __restrict__ ids, float* __restrict__ weights,
                                    OUT* __restrict__ out, int N, int K, int E, int k, int norm, int cols,
                                    const float* __restrict__ xf, const float* __restrict__ ln, float eps) {
    vt::pdl_entry();
    extern __shared__ __align__(16) unsigned char moe_smem[];
    T* xs = reinterpret_cast<T*>(moe_smem);  // [1, K]
    __shared__ int expert;
    const int r = blockIdx.x, t = r / k, j = r - t * k;
    auto slot = [](int i) { return i; };
    float denom[1] = {0.0f};
    if constexpr (NORM_IN) {
        __shared__ float row_sq[MOE_WARPS][1];
        row_denominators<1>(xf + (i64)t * K, K, eps, nullptr, row_sq, denom);
    }
    if (threadIdx.x < 32) {
        int id;
        float p;
        route_token(logits + (i64)t * E, E, k, norm, &id, &p);
        if (threadIdx.x == j) expert = id;
        if (j == 0 && blockIdx.y == 0 && threadIdx.x < k)
            ids[(i64)t * k + threadIdx.x] = id, weights[(i64)t * k + threadIdx.x] = p;
    } else if constexpr (NORM_IN) {
        stage_normed_row<T>(xf + (i64)t * K, ln, xs, K, denom[0], 32);
    } else {
        stage_rows<T, VEC>(x, xs, r, 1, slot, K, k, 32);
    }
    __syncthreads();
    const int c0 = blockIdx.y * cols, c1 = min(N, c0 + cols);
    expert_columns<T, OUT, VEC, true, 1, NCOL>(xs, w + (i64)expert * 2 * N * K, out, r, 1, slot, N, K, c0, c1);
}

// Token t's k choices in ascending expert order (the order transformers adds them in), into order[0..k) and
// their weights into share: each choice's rank among the token's experts (a stable sort, as the twin's argsort).
// Every thread of the block calls it.
__device__ __forceinline__ void combine_order(const int* __restrict__ ids, const float* __restrict__ weights, int t,
                                              int k, int* order, float* share) {
    const int* mine = ids + (i64)t * k;
    if (threadIdx.x < k) {
        const int j = threadIdx.x, e = mine[j];
        int rank = 0;
        for (int i = 0; i < k; i++) rank += mine[i] < e || (mine[i] == e && i < j);  // a tie: choice order
        order[rank] = j;
    }
    __syncthreads();
    if (threadIdx.x < k) share[threadIdx.x] = weights[(i64)t * k + order[threadIdx.x]];
    __syncthreads();
}

// out [T, H] float32 = the sum over token t's choices, in ascending expert order, of weights[t, j] * y[t k + j].
// Block (t, y) takes columns [y blockDim, (y + 1) blockDim), a column a thread, its k loads in flight together.
__global__ void moe_combine(const float* __restrict__ y, const int* __restrict__ ids,
                            const float* __restrict__ weights, float* __restrict__ out, int H, int k) {
    vt::pdl_entry();
    __shared__ int order[MOE_MAX_TOP_K];
    __shared__ float share[MOE_MAX_TOP_K];
    const int t = blockIdx.x;
    combine_order(ids, weights, t, k, order, share);
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= H) return;
    float v[MOE_MAX_TOP_K];
#pragma unroll
    for (int r = 0; r < MOE_MAX_TOP_K; r++)
        if (r < k) v[r] = y[((i64)t * k + order[r]) * H + c];
    float acc = 0.0f;
#pragma unroll
    for (int r = 0; r < MOE_MAX_TOP_K; r++)
        if (r < k) acc += share[r] * v[r];
    out[(i64)t * H + c] = acc;
}

// moe_combine, then the residual add + RMSNorm after the MoE block (norm.cu's add_rms_norm), in one launch: x [T, H]
// += the combined row, h = narrow(rmsnorm(x) * w). Each float4 of the combined row is summed as moe_combine sums
// its columns (the same choices, weights and order), so x and h are those of the two launches. One block a token.
template <typename OUT>
__global__ void moe_combine_add_rms_norm(const float* __restrict__ y, const int* __restrict__ ids,
                                         const float* __restrict__ weights, float* __restrict__ x,
                                         const float* __restrict__ w, OUT* __restrict__ h, int H, int k, float eps) {
    vt::pdl_entry();
    __shared__ int order[MOE_MAX_TOP_K];
    __shared__ float share[MOE_MAX_TOP_K];
    __shared__ float scratch[32];
    const int t = blockIdx.x;
    combine_order(ids, weights, t, k, order, share);
    add_rms_norm_row(x + (i64)t * H, true, [&](int i) {
        constexpr int BATCH = 8;  // loads in flight together (a float4 a choice: registers bound it)
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int r0 = 0; r0 < k; r0 += BATCH) {
            float4 v[BATCH];
#pragma unroll
            for (int r = 0; r < BATCH; r++)
                if (r0 + r < k) v[r] = reinterpret_cast<const float4*>(y + ((i64)t * k + order[r0 + r]) * H)[i];
#pragma unroll
            for (int r = 0; r < BATCH; r++) {
                if (r0 + r < k) {
                    const float s = share[r0 + r];
                    acc.x += s * v[r].x; acc.y += s * v[r].y; acc.z += s * v[r].z; acc.w += s * v[r].w;
                }
            }
        }
        return acc;
    }, w, h + (i64)t * H, H, eps, scratch);
}

}  // namespace vt
