// Decode's GEMM: C [M, N] float32 = A [M, K] @ B [K, N] for a few rows (M <= 8), bf16 / fp16 operands, float32
// accumulation. At such M a GEMM is a read of B, so the kernel is built to stream B at the memory's speed: a
// thread owns 8 consecutive columns (one 16-byte load a row of B), TC threads side by side a block's TC x 8
// columns, the block's 256 / TC rows of threads walk one slice of K, each thread with U loads in flight before
// it uses any, and the grid splits K into S slices so that every SM has blocks even when N is small. Which TC and
// U stream a shape fastest is measured (backends/cublaslt.py times each configuration on the H200). A slice's
// partial tile goes to scratch; the last block of a column tile to finish (a counter per tile) adds the S partials
// in slice order, so the sum's order never depends on timing. The counter is back to zero when the kernel ends: a
// graph replays it.
//
// With NORM, the GEMM is an o or down projection whose output joins the residual stream: the last block of the grid
// to finish its column tile (a second counter) runs the residual add + RMSNorm of the next layer (norm.cu's
// add_rms_norm) over the M rows, float4s across the block (N % 4 == 0): x += C; h = narrow(x / sqrt(mean(x^2) + eps) * w). One launch where
// there were two, for the few rows where a kernel's fixed cost is most of its time.
//
// With SWIGLU, the GEMM is the MLP's gate/up projection, its columns interleaved PAIR_COLS at a time (gate's, then
// up's: common.cuh), so a tile holds both halves of its outputs: the kernel writes SiLU(gate) x up in T into h
// [M, N / 2] (activation.cu's silu_mul) where C would have been, and C is never written. N % 16 == 0.
//
// With RESID, the GEMM is an o or down projection whose norm its consumer computes (VT_CONSUMER_NORM): a column
// tile's last sum is added into the residual stream x in place of C (C is not written), and nothing waits for the
// whole grid. With NORM_IN, the GEMM is that consumer: A is RMSNorm(x) * w, computed by every block from x [M, K]
// float32 (the row's sum of squares as the norm epilogue computes it, `row_denominators`) and staged for the block's
// K slice in shared memory, narrowed to T as the norm epilogue narrows h: the same A, bit for bit, as the o/down
// GEMM's norm epilogue writes. (H200, 0.6B, one row, session 24: removing the norm's grid-wide tail from the o and
// down GEMMs took 2.5 us off each and 112 us off the step.)
//
// Programmatic launch: each block asks L2 for its slice of B before its wait (B is a weight: no kernel writes it),
// and the block triggers the kernel after it only once its loop over K is done. So the next kernel's blocks take
// their SMs, and prefetch their own weights, during this kernel's reduction tail, not beside its weight stream.
// H200, 0.6B, one row (session 24): the step 1.0381 / 1.0388 -> 1.0264 / 1.0297 ms. The prefetch with the trigger
// at the kernel's start (session 23) was 19 us slower a step.
//
// skinny_gemm_cluster (VT_SKINNY_CLUSTER=1; no faster a step on the H200, session 23) is the same GEMM with a column tile's
// SKINNY_CLUSTER K slices launched as one thread-block cluster (sm_90): each slice's partial tile stays in its
// block's shared memory, and the cluster's first block adds them in slice order through distributed shared memory,
// after a cluster barrier. No partials through L2, no fence, no counter: under ncu (session 22) the split GEMM's
// SMs were active 37% of its time, the rest its serial tail of fence, counter and L2 reads.
#include "common.cuh"

namespace vt {

constexpr int SKINNY_MAX_M = 8;
constexpr int SKINNY_THREADS = 256;
constexpr int SKINNY_WARPS = SKINNY_THREADS / 32;
constexpr int SKINNY_CLUSTER = 8;  // K slices a cluster: the portable maximum (skinny_gemm.py's CLUSTER)
constexpr int SKINNY_STAGE = 8192;  // NORM_IN: the normed A a block stages, M x its K slice (skinny_gemm.py's STAGE)

// 16 bytes of B, streamed: read once, so kept out of L1.
__device__ __forceinline__ uint4 load_stream(const void* p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

// M, TC and U are template arguments: a thread holds M x 8 accumulators and U raw vectors, so one row keeps
// registers few and blocks many.
template <typename T, int M, int TC, int U, bool NORM, bool SWIGLU, bool CLUSTER, bool NORM_IN = false,
          bool RESID = false>
__device__ __forceinline__ void skinny_body(const T* __restrict__ a, const T* __restrict__ b, float* __restrict__ c,
                                            float* __restrict__ partials, unsigned int* __restrict__ counters, int N,
                                            int K, int slice, float* __restrict__ x, const float* __restrict__ w,
                                            T* __restrict__ h, unsigned int* __restrict__ done, float eps) {
    static_assert(M >= 1 && M <= SKINNY_MAX_M && M <= SKINNY_WARPS, "1..8 rows (the norm keeps a row's sum a warp)");
    static_assert(TC == 8 || TC == 16 || TC == 32, "a warp holds whole rows of threads");
    static_assert(sizeof(T) == 2, "8 columns are one 16-byte vector");
    static_assert(!(NORM && SWIGLU) && !(RESID && (NORM || SWIGLU)), "one epilogue");
    static_assert(!(CLUSTER && (NORM_IN || RESID)), "the consumer's norm runs on the split kernel");
    constexpr int TR = SKINNY_THREADS / TC, COLS = TC * 8;
    __shared__ float warp_part[SKINNY_WARPS][COLS];
    __shared__ float slice_tile[CLUSTER ? M : 1][CLUSTER ? COLS : 1];  // CLUSTER: this slice's partial tile
    __shared__ bool last;
    const int tc = threadIdx.x % TC, tr = threadIdx.x / TC, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n = blockIdx.x * COLS + tc * 8;
    const int k0 = blockIdx.y * slice, k1 = min(K, k0 + slice);
    __shared__ T a_stage[NORM_IN ? SKINNY_STAGE : 1];  // NORM_IN: the normed A of rows 0..M-1, K in [k0, k1)
    if constexpr (NORM_IN) {
        __shared__ float row_sq[SKINNY_WARPS][SKINNY_MAX_M];
        float denom[M];
        row_denominators<M>(x, K, eps, nullptr, row_sq, denom);
        const int len = k1 - k0;
        for (int i = threadIdx.x; i < M * len; i += SKINNY_THREADS) {
            const int m = i / len, k = k0 + (i - m * len);
            a_stage[i] = from_f32<T>(x[(i64)m * K + k] / denom[m] * w[k]);
        }
        __syncthreads();
    }
    float acc[M][8];
#pragma unroll
    for (int m = 0; m < M; m++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[m][j] = 0.0f;
    if (n < N) {
        for (int kb = k0 + tr; kb < k1; kb += TR * U) {
            uint4 raw[U];
#pragma unroll
            for (int u = 0; u < U; u++) {  // every load issued before any is used
                const int k = kb + u * TR;
                raw[u] = k < k1 ? load_stream(b + (i64)k * N + n) : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int k = kb + u * TR;
                if (k >= k1) break;
                const T* e = reinterpret_cast<const T*>(&raw[u]);
#pragma unroll
                for (int m = 0; m < M; m++) {
                    const float av = NORM_IN ? to_f32(a_stage[m * (k1 - k0) + (k - k0)]) : to_f32(a[(i64)m * K + k]);
#pragma unroll
                    for (int j = 0; j < 8; j++) acc[m][j] += av * to_f32(e[j]);
                }
            }
        }
    }
    // B is streamed: the kernel after may take its SMs now, for the reduction's tail, not at this one's start
    vt::pdl_trigger();
    const int S = gridDim.y;
#pragma unroll
    for (int m = 0; m < M; m++) {
        // the rows of threads of a warp that share a column group (lanes tc, tc + TC, ...), then the warps
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float v = acc[m][j];
#pragma unroll
            for (int o = TC; o < 32; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
            if (lane < TC) warp_part[warp][tc * 8 + j] = v;
        }
        __syncthreads();
        if (SWIGLU && S == 1) {
            for (int o = threadIdx.x; o < COLS / 2; o += SKINNY_THREADS) {  // output o of the tile: a gate, up pair
                const int col = gate_column(o, PAIR_COLS), nn = blockIdx.x * COLS + col;
                float g = 0.0f, u = 0.0f;
#pragma unroll
                for (int w = 0; w < SKINNY_WARPS; w++) {
                    g += warp_part[w][col];
                    u += warp_part[w][col + PAIR_COLS];
                }
                if (nn < N) h[(i64)m * (N / 2) + blockIdx.x * (COLS / 2) + o] = from_f32<T>(silu_times(g, u));
            }
        } else {
            for (int col = threadIdx.x; col < COLS; col += SKINNY_THREADS) {
                const int nn = blockIdx.x * COLS + col;
                float v = 0.0f;
#pragma unroll
                for (int w = 0; w < SKINNY_WARPS; w++) v += warp_part[w][col];
                if (CLUSTER) slice_tile[CLUSTER ? m : 0][CLUSTER ? col : 0] = v;
                else if (nn < N) {
                    if (S == 1 && RESID) x[(i64)m * N + nn] += v;
                    else if (S == 1) c[(i64)m * N + nn] = v;
                    else partials[((i64)blockIdx.y * M + m) * N + nn] = v;
                }
            }
        }
        __syncthreads();
    }
    if constexpr (CLUSTER) {
        // The cluster is this column tile's S slices; its first block adds their tiles in slice order. The second
        // barrier keeps every block (and its shared memory) alive until the sums are read.
        cluster_sync();
        const bool first = cluster_rank() == 0;
        if (first) {
            if constexpr (SWIGLU) {
                for (int i = threadIdx.x; i < M * COLS / 2; i += SKINNY_THREADS) {
                    const int m = i / (COLS / 2), o = i - m * (COLS / 2), col = gate_column(o, PAIR_COLS);
                    float g = 0.0f, u = 0.0f;
                    for (int r = 0; r < S; r++) {
                        g += cluster_load(&slice_tile[m][col], r);
                        u += cluster_load(&slice_tile[m][col + PAIR_COLS], r);
                    }
                    if (blockIdx.x * COLS + col < N)
                        h[(i64)m * (N / 2) + blockIdx.x * (COLS / 2) + o] = from_f32<T>(silu_times(g, u));
                }
            } else {
                for (int i = threadIdx.x; i < M * COLS; i += SKINNY_THREADS) {
                    const int m = i / COLS, col = i - m * COLS, nn = blockIdx.x * COLS + col;
                    float v = 0.0f;
                    for (int r = 0; r < S; r++) v += cluster_load(&slice_tile[m][col], r);
                    if (nn < N) c[(i64)m * N + nn] = v;
                }
            }
        }
        cluster_sync();
        if (!first) return;
    } else if (S > 1) {
        __threadfence();  // this slice's partials are visible before the counter says so
        __syncthreads();
        if (threadIdx.x == 0) last = atomicAdd(&counters[blockIdx.x], 1u) == (unsigned)(S - 1);
        __syncthreads();
        if (!last) return;
        __threadfence();
        if constexpr (SWIGLU) {
            for (int i = threadIdx.x; i < M * COLS / 2; i += SKINNY_THREADS) {
                const int m = i / (COLS / 2), o = i - m * (COLS / 2), nn = blockIdx.x * COLS + gate_column(o, PAIR_COLS);
                if (nn >= N) continue;
                float g = 0.0f, u = 0.0f;
                for (int s = 0; s < S; s++) {
                    const float* p = &partials[((i64)s * M + m) * N + nn];
                    g += __ldcg(p);
                    u += __ldcg(p + PAIR_COLS);
                }
                h[(i64)m * (N / 2) + blockIdx.x * (COLS / 2) + o] = from_f32<T>(silu_times(g, u));
            }
        } else {
            for (int i = threadIdx.x; i < M * COLS; i += SKINNY_THREADS) {
                const int m = i / COLS, nn = blockIdx.x * COLS + (i - m * COLS);
                if (nn >= N) continue;
                float v = 0.0f;
                for (int s = 0; s < S; s++) v += __ldcg(&partials[((i64)s * M + m) * N + nn]);  // L2: other SMs wrote them
                if (RESID) x[(i64)m * N + nn] += v;
                else c[(i64)m * N + nn] = v;
            }
        }
        if (threadIdx.x == 0) counters[blockIdx.x] = 0;
    }
    if constexpr (NORM) {
        // this block's tile of C is final; the grid's last tile to be so runs the norm over every column
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) last = atomicAdd(done, 1u) == gridDim.x - 1;
        __syncthreads();
        if (!last) return;
        __threadfence();
        // The whole block, float4s, a thread's first float4 of every row loaded before any is used (one latency for
        // the usual N <= 1,024, not one a float4), a row's sum of squares reduced across the warps in shared memory.
        __shared__ float row_sq[SKINNY_WARPS][SKINNY_MAX_M];
        const int n4 = N / 4, i0 = threadIdx.x;
        float4* x4 = reinterpret_cast<float4*>(x);
        const float4* c4 = reinterpret_cast<const float4*>(c);
        const float4* w4 = reinterpret_cast<const float4*>(w);
        float4 xv[M], cv[M];
#pragma unroll
        for (int m = 0; m < M; m++) {
            if (i0 < n4) {
                xv[m] = x4[(i64)m * n4 + i0];
                cv[m] = __ldcg(&c4[(i64)m * n4 + i0]);  // L2: other SMs wrote C
            }
        }
#pragma unroll
        for (int m = 0; m < M; m++) {
            for (int i = i0; i < n4; i += SKINNY_THREADS) {
                const float4 a = i == i0 ? xv[m] : x4[(i64)m * n4 + i];
                const float4 d = i == i0 ? cv[m] : __ldcg(&c4[(i64)m * n4 + i]);
                const float4 v = make_float4(a.x + d.x, a.y + d.y, a.z + d.z, a.w + d.w);
                x4[(i64)m * n4 + i] = v;
                if (i == i0) xv[m] = v;  // the first float4 kept for the sums and the write below
            }
        }
        float denom[M];  // a thread's later float4s are its own writes above: read back without a barrier
        row_denominators<M>(x, N, eps, xv, row_sq, denom);
        const float4 g0 = i0 < n4 ? w4[i0] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int m = 0; m < M; m++) {
            for (int i = i0; i < n4; i += SKINNY_THREADS) {
                const float4 v = i == i0 ? xv[m] : x4[(i64)m * n4 + i], g = i == i0 ? g0 : w4[i];
                T* o = h + (i64)m * N + 4 * i;
                o[0] = from_f32<T>(v.x / denom[m] * g.x);
                o[1] = from_f32<T>(v.y / denom[m] * g.y);
                o[2] = from_f32<T>(v.z / denom[m] * g.z);
                o[3] = from_f32<T>(v.w / denom[m] * g.w);
            }
        }
        if (threadIdx.x == 0) *done = 0;
    }
}

template <typename T, int M, int TC, int U, bool NORM = false, bool SWIGLU = false, bool NORM_IN = false,
          bool RESID = false>
__global__ void __launch_bounds__(SKINNY_THREADS)
skinny_gemm(const T* __restrict__ a, const T* __restrict__ b, float* __restrict__ c, float* __restrict__ partials,
            unsigned int* __restrict__ counters, int N, int K, int slice, float* __restrict__ x,
            const float* __restrict__ w, T* __restrict__ h, unsigned int* __restrict__ done, float eps) {
    vt::pdl_prefetch_l2(b, N, K, blockIdx.y * slice, slice, blockIdx.x * TC * 8, TC * 8);  // this block's B
    vt::pdl_wait();
    skinny_body<T, M, TC, U, NORM, SWIGLU, false, NORM_IN, RESID>(a, b, c, partials, counters, N, K, slice, x, w, h,
                                                                  done, eps);
}

// Grid (column tiles, SKINNY_CLUSTER): the cluster's blocks are one column tile's K slices.
template <typename T, int M, int TC, int U, bool NORM = false, bool SWIGLU = false>
__global__ void __cluster_dims__(1, SKINNY_CLUSTER, 1) __launch_bounds__(SKINNY_THREADS)
skinny_gemm_cluster(const T* __restrict__ a, const T* __restrict__ b, float* __restrict__ c,
                    float* __restrict__ partials, unsigned int* __restrict__ counters, int N, int K, int slice,
                    float* __restrict__ x, const float* __restrict__ w, T* __restrict__ h,
                    unsigned int* __restrict__ done, float eps) {
    vt::pdl_prefetch_l2(b, N, K, blockIdx.y * slice, slice, blockIdx.x * TC * 8, TC * 8);
    vt::pdl_wait();
    skinny_body<T, M, TC, U, NORM, SWIGLU, true>(a, b, c, partials, counters, N, K, slice, x, w, h, done, eps);
}

}  // namespace vt
