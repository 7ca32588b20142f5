// Routed MoE: top-k routing, the routed rows grouped by expert, grouped GEMMs over those rows only (SwiGLU fused
// into the gate/up one), and the weighted combine. Every buffer has a static size (T x top-k routed rows), so
// a step with MoE layers captures; which experts run is read from the device.
#include "common.cuh"

namespace vt {

constexpr int MOE_MAX_EXPERTS = 512;  // moe_route keeps 16 logits a lane
constexpr int MOE_MAX_TOP_K = 32;     // moe_route keeps one choice a lane
constexpr int MOE_ROWS = 8;           // routed rows a moe_gemm block holds in shared memory at a time
constexpr int MOE_WARPS = 8;          // moe_gemm's block: 8 warps, each its own output columns

// logits [T, E] float32 -> ids [T, k] int32 (descending logit, a tie to the lower expert; a NaN logit is never
// preferred) and weights [T, k] float32: the softmax over all E at the chosen experts, divided by their sum when
// norm (Qwen3-MoE's norm_topk_prob). One warp per token.
__global__ void moe_route(const float* __restrict__ logits, int* __restrict__ ids, float* __restrict__ weights,
                          int T, int E, int k, int norm) {
    vt::pdl_entry();
    constexpr int PER = MOE_MAX_EXPERTS / 32;
    const int lane = threadIdx.x & 31;
    const int t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (t >= T) return;
    const float* row = logits + (i64)t * E;
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
    if (lane < k) ids[(i64)t * k + lane] = my_id, weights[(i64)t * k + lane] = my_p;
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

// The grouped GEMM over routed rows. Block (b, y) takes expert experts[b] (none: it returns) and output columns
// [y cols, (y + 1) cols); it walks the expert's routed rows MOE_ROWS at a time, each row read from x at
// slot / row_div (a token's hidden state for the gate/up GEMM, the routed row itself for the down one) into
// shared memory; each warp owns output columns, a lane reads VEC weights of a column at a time along K (w is
// [E, rows, K], K contiguous: HF's Linear layout) and the warp sums the lanes.
// BY_ROW (a step of one token, whose k experts are distinct): block (r, y) takes routed row r itself, expert
// ids[r], with no grouping: the weights' first loads wait on one read of ids (the grouped form reads experts,
// offsets and slots one after another, after a moe_group launch), and x's row address is known at once.
// SWIGLU: w rows [0, N) are the gate, [N, 2 N) the up projection; out [n, N] = narrow(silu(gate) * up).
// Otherwise out [n, N] float32 = x_row @ w[e]^T. VEC: elements a lane loads at once (16 bytes, or 1 when K is
// not a multiple of 16 bytes).
template <typename T, typename OUT, int VEC, bool SWIGLU, bool BY_ROW = false>
__global__ void moe_gemm(const T* __restrict__ x, const T* __restrict__ w, const int* __restrict__ offsets,
                         const int* __restrict__ experts, const int* __restrict__ slots, OUT* __restrict__ out,
                         int N, int K, int row_div, int cols) {
    vt::pdl_entry();
    constexpr int ROWS = BY_ROW ? 1 : MOE_ROWS;  // BY_ROW: experts is ids, offsets and slots are unused
    extern __shared__ __align__(16) unsigned char moe_smem[];
    T* xs = reinterpret_cast<T*>(moe_smem);  // [ROWS, K]
    const int e = experts[blockIdx.x];
    if (e < 0) return;
    const int begin = BY_ROW ? blockIdx.x : offsets[e], end = BY_ROW ? begin + 1 : offsets[e + 1];
    auto slot = [&](int i) { return BY_ROW ? i : slots[i]; };
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int c0 = blockIdx.y * cols, c1 = min(N, c0 + cols);
    const T* we = w + (i64)e * (SWIGLU ? 2 * N : N) * K;
    for (int r0 = begin; r0 < end; r0 += ROWS) {
        const int rows = min(ROWS, end - r0);
        __syncthreads();  // the last chunk's readers are done with xs
        const int per_row = K / VEC;
        for (int idx = threadIdx.x; idx < rows * per_row; idx += blockDim.x) {
            const int r = idx / per_row, c = (idx - r * per_row) * VEC;
            const T* src = x + (i64)(slot(r0 + r) / row_div) * K + c;
            if constexpr (VEC * sizeof(T) == 16)
                *reinterpret_cast<uint4*>(xs + r * K + c) = *reinterpret_cast<const uint4*>(src);
            else
                xs[r * K + c] = *src;
        }
        __syncthreads();
        for (int n = c0 + warp; n < c1; n += MOE_WARPS) {
            float acc[ROWS], up[ROWS];
#pragma unroll
            for (int r = 0; r < ROWS; r++) acc[r] = up[r] = 0.0f;
            const T* wg = we + (i64)n * K;
            const T* wu = we + (i64)(N + n) * K;
#pragma unroll 4
            for (int k = lane * VEC; k < K; k += 32 * VEC) {
                float a[VEC], b[VEC];
                load_vec<T, VEC>(wg + k, a);
                if constexpr (SWIGLU) load_vec<T, VEC>(wu + k, b);
#pragma unroll
                for (int r = 0; r < ROWS; r++) {
                    if (r < rows) {
                        float xv[VEC];
                        load_vec<T, VEC>(xs + r * K + k, xv);
#pragma unroll
                        for (int i = 0; i < VEC; i++) {
                            acc[r] += a[i] * xv[i];
                            if constexpr (SWIGLU) up[r] += b[i] * xv[i];
                        }
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                if (r < rows) {
                    const float g = warp_sum(acc[r]);
                    const i64 at = (i64)slot(r0 + r) * N + n;
                    if constexpr (SWIGLU) {
                        const float u = warp_sum(up[r]);
                        if (lane == 0) out[at] = from_f32<OUT>(silu_times(g, u));
                    } else {
                        if (lane == 0) out[at] = from_f32<OUT>(g);
                    }
                }
            }
        }
    }
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
