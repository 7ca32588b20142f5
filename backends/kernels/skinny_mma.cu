// Decode's GEMM on tensor cores for a few rows (2..16): C [M, N] float32 = A [M, K] @ B [K, N], bf16 / fp16 operands,
// float32 accumulation. The CUDA-core skinny GEMM (skinny_gemm.cu) does M x 8 FMAs per 16 bytes of B a thread, which
// past a few rows is no longer a read of B: at 8 rows cuBLASLt already beat it on the H200 (session 24), and a
// 16-row step (a prefix hit's tail run whole, a decode step of 9 to 16 requests) ran every GEMM on cuBLASLt. Here A's
// rows are one mma.m16n8k16 A operand (rows past M are zeros), so a 16 x 16 x 8 product is one instruction whatever M.
//
// A block's four warps share one column tile of COLS = 8 NT columns and one slice of K; warp w takes the slice's
// k16 steps w, w + 4, ... Each warp streams its steps' 16 x COLS tiles of B into a ring of STAGES stages of its own
// shared memory (cp.async, 16 bytes a copy, STAGES - 1 steps in flight; no barrier across warps in the loop), reads
// them as mma B fragments with ldmatrix.trans (B is K-major, as V is in the prefill kernel), and loads its A
// fragments straight from global memory (A is a few KB, read by every block: L1 and L2 serve it). The block adds its
// warps' 16 x COLS tiles in warp order, and, where the grid splits K into S slices, the last block of a column tile
// to finish (a counter per tile, back to zero when the kernel ends: a graph replays it) adds the S partial tiles in
// slice order, as the skinny GEMM does, so the sum's order never depends on timing.
//
// Epilogues (EPI), as the skinny GEMM's, so a 2..16-row step's o, down and gate/up GEMMs launch once, not twice: with
// MMA_NORM the grid's last column tile to be final runs the residual add + RMSNorm over the M rows (x += C; h =
// narrow(x / sqrt(mean(x^2) + eps) * w): norm.cu's add_rms_norm); with MMA_SWIGLU the columns are gate/up pairs
// interleaved PAIR_COLS at a time and a tile's final sums become SiLU(gate) x up in h [M, N / 2] (C is not written).
// At 8 and 16 rows every GEMM ran on cuBLASLt with its consumer a launch of its own (H100, session 41: 9.96 us for
// the 0.6B o projection and its norm, where one row's fused GEMM took 7.66).
#include "tensor_core.cuh"

namespace vt {

constexpr int MMA_GEMM_THREADS = 128;
constexpr int MMA_GEMM_WARPS = MMA_GEMM_THREADS / 32;
constexpr int MMA_GEMM_ROWS = 16;  // the mma's M: at most this many rows of A
constexpr int MMA_PLAIN = 0, MMA_NORM = 1, MMA_SWIGLU = 2;  // EPI (skinny_mma.py's EPILOGUES)

// MMA_NORM's tail, in the grid's last block to finish its column tile: x [M, N] += C, then h = RMSNorm(x) * w, N % 4
// == 0. Rows are independent until their sums (a warp's partial sums into row_sq, one barrier for all rows), so
// the rows' loads are not serialized behind each other's reductions.
template <typename T>
__device__ __forceinline__ void mma_norm_tail(float* __restrict__ x, const float* __restrict__ c,
                                              const float* __restrict__ w, T* __restrict__ h, int M, int N, float eps) {
    __shared__ float row_sq[MMA_GEMM_ROWS][MMA_GEMM_WARPS];
    const int n4 = N / 4, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float4* x4 = reinterpret_cast<float4*>(x);
    const float4* c4 = reinterpret_cast<const float4*>(c);
    const float4* w4 = reinterpret_cast<const float4*>(w);
#pragma unroll 4
    for (int m = 0; m < M; m++) {
        float sq = 0.0f;
        for (int i = threadIdx.x; i < n4; i += MMA_GEMM_THREADS) {
            const float4 a = x4[(i64)m * n4 + i], d = __ldcg(&c4[(i64)m * n4 + i]);  // L2: other SMs wrote C
            const float4 v = make_float4(a.x + d.x, a.y + d.y, a.z + d.z, a.w + d.w);
            x4[(i64)m * n4 + i] = v;
            sq = __fadd_rn(sq, sum_sq4(v));
        }
        sq = warp_sum(sq);
        if (lane == 0) row_sq[m][warp] = sq;
    }
    __syncthreads();
    for (int m = 0; m < M; m++) {
        float total = 0.0f;
#pragma unroll
        for (int k = 0; k < MMA_GEMM_WARPS; k++) total += row_sq[m][k];
        const float denom = sqrtf(total / (float)N + eps);
        for (int i = threadIdx.x; i < n4; i += MMA_GEMM_THREADS) {  // x: this thread's own writes above
            const float4 v = x4[(i64)m * n4 + i], g = w4[i];
            T* o = h + (i64)m * N + 4 * i;
            o[0] = from_f32<T>(v.x / denom * g.x);
            o[1] = from_f32<T>(v.y / denom * g.y);
            o[2] = from_f32<T>(v.z / denom * g.z);
            o[3] = from_f32<T>(v.w / denom * g.w);
        }
    }
}

// The shared memory a configuration takes: the warps' rings, then (reusing them) the warps' sums.
template <int NT, int STAGES>
constexpr int skinny_mma_smem() {
    constexpr int ring = MMA_GEMM_WARPS * STAGES * 16 * (NT * 8 + 8) * 2;
    constexpr int sums = MMA_GEMM_WARPS * MMA_GEMM_ROWS * (NT * 8 + 8) * 4;
    return ring > sums ? ring : sums;
}

// a, b, c, partials (S x M x N float32), counters (one a column tile, zeros); grid (ceil(N / COLS), S), slices of
// `slice` rows of K (a multiple of 16), MMA_GEMM_THREADS threads, skinny_mma_smem<NT, STAGES>() bytes of dynamic
// shared memory. M <= 16, N % 8 == 0, K % 8 == 0 (the binding checks). MMA_NORM: x [M, N] float32, w [N] float32, h
// [M, N], `done` a zeroed counter no column tile uses; MMA_SWIGLU: h [M, N / 2], N % 16 == 0; else unused.
template <typename T, int NT, int STAGES, int EPI = MMA_PLAIN>
__global__ void __launch_bounds__(MMA_GEMM_THREADS)
skinny_mma(const T* __restrict__ a, const T* __restrict__ b, float* __restrict__ c, float* __restrict__ partials,
           unsigned int* __restrict__ counters, int M, int N, int K, int slice, float* __restrict__ x,
           const float* __restrict__ w, T* __restrict__ h, unsigned int* __restrict__ done, float eps) {
    vt::pdl_prefetch_l2(b, N, K, blockIdx.y * slice, slice, blockIdx.x * NT * 8, NT * 8);  // this block's B
    vt::pdl_wait();
    constexpr int COLS = NT * 8;
    static_assert(NT % 2 == 0 && STAGES >= 2, "n8 tiles in pairs (one ldmatrix.x4 each); a step in flight");
    static_assert(EPI != MMA_SWIGLU || NT * 8 % (2 * PAIR_COLS) == 0, "a column tile holds whole gate/up pairs");
    constexpr int STRIDE = COLS + 8;   // a stage's k-row, padded 16 bytes: an ldmatrix's eight rows hit distinct banks
    constexpr int STAGE = 16 * STRIDE;  // one k16 step's tile of B, in elements
    constexpr int COPIES = 16 * COLS / 8 / 32;  // 16-byte copies a lane a step
    static_assert(16 * COLS / 8 % 32 == 0, "a step's copies are whole for every lane");
    extern __shared__ __align__(16) unsigned short smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    const int mi = lane >> 3, mr = lane & 7;  // ldmatrix rows this lane addresses: matrix lane / 8, its row lane % 8
    const int n0 = blockIdx.x * COLS, k0 = blockIdx.y * slice, k1 = min(K, k0 + slice);
    unsigned short* ring = smem + warp * STAGES * STAGE;
    const int steps = (k1 - k0 + 15) / 16;
    const int mine = steps > warp ? (steps - warp + MMA_GEMM_WARPS - 1) / MMA_GEMM_WARPS : 0;
    // the warp's step i (k from k0 + 16 (warp + 4 i)) into stage i % STAGES; rows past the slice and columns past N
    // become zeros
    auto request = [&](int i) {
        const int kk = k0 + 16 * (warp + MMA_GEMM_WARPS * i);
        unsigned short* stage = ring + (i % STAGES) * STAGE;
#pragma unroll
        for (int q = 0; q < COPIES; q++) {
            const int chunk = lane + 32 * q, row = chunk / NT, col = chunk % NT * 8;
            const bool valid = kk + row < k1 && n0 + col < N;
            const T* src = b + (i64)(valid ? kk + row : k0) * N + (valid ? n0 + col : n0);  // in bounds either way
            copy16_async(stage + row * STRIDE + col, src, valid);
        }
    };
    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
    for (int i = 0; i < STAGES - 1; i++) {
        if (i < mine) request(i);
        copy_commit();  // a group a step, empty or not: the wait below counts groups
    }
    const unsigned* a32 = reinterpret_cast<const unsigned*>(a);  // A in pairs of elements (K is even)
    for (int i = 0; i < mine; i++) {
        if (i + STAGES - 1 < mine) request(i + STAGES - 1);  // into the stage step i - 1 used: every lane read it
        copy_commit();
        const int kk = k0 + 16 * (warp + MMA_GEMM_WARPS * i);
        // A's fragments, requested before the wait (the wait's memory clobber would hold them behind it): rows g and
        // g + 8, k pairs kk + 2 tig and kk + 2 tig + 8; zeros past M or the slice
        unsigned af[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int r = g + 8 * (e & 1), k = kk + 2 * tig + 8 * (e >> 1);
            af[e] = r < M && k < k1 ? __ldg(a32 + ((i64)r * K + k) / 2) : 0u;
        }
        copy_wait<STAGES - 1>();  // this lane's copies of step i have landed
        __syncwarp();             // ... and every lane's
        const unsigned short* stage = ring + (i % STAGES) * STAGE;
#pragma unroll
        for (int j = 0; j < NT; j += 2) {  // B k-rows 8 (mi & 1) + mr, columns 8 j + 8 (mi >> 1): two n8 tiles
            unsigned bf[4];
            ldmatrix_x4<true>(bf, stage + (8 * (mi & 1) + mr) * STRIDE + 8 * j + 8 * (mi >> 1));
            Mma<T>::run(acc[j], af, bf[0], bf[1]);
            Mma<T>::run(acc[j + 1], af, bf[2], bf[3]);
        }
        __syncwarp();  // every lane is done with this stage before a later step's copies overwrite it
    }
    copy_wait<0>();
    // B is streamed: the kernel after may take its SMs now, for the sums' tail, not at this one's start
    vt::pdl_trigger();
    __syncthreads();  // every warp is out of its ring: the sums reuse it
    // [warps][16][SUM_STRIDE]: a row padded by 8 floats, so a warp's float2 stores of rows g = 0..7 spread over the
    // banks (a row of COLS = 64 floats would put all eight rows in the same ones)
    constexpr int SUM_STRIDE = COLS + 8;
    float* sums = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int j = 0; j < NT; j++) {
        float* s = sums + (warp * MMA_GEMM_ROWS + g) * SUM_STRIDE + 8 * j + 2 * tig;
        *reinterpret_cast<float2*>(s) = make_float2(acc[j][0], acc[j][1]);
        *reinterpret_cast<float2*>(s + 8 * SUM_STRIDE) = make_float2(acc[j][2], acc[j][3]);  // row g + 8
    }
    __syncthreads();
    const int S = gridDim.y;
    if (EPI == MMA_SWIGLU && S == 1) {  // the tile's sums are final: output o of the tile is its gate, up pair's
        for (int i = threadIdx.x; i < M * COLS / 2; i += MMA_GEMM_THREADS) {
            const int m = i / (COLS / 2), o = i - m * (COLS / 2), col = gate_column(o, PAIR_COLS);
            if (n0 + col >= N) continue;
            float gate = 0.0f, up = 0.0f;
#pragma unroll
            for (int wp = 0; wp < MMA_GEMM_WARPS; wp++) {
                gate += sums[(wp * MMA_GEMM_ROWS + m) * SUM_STRIDE + col];
                up += sums[(wp * MMA_GEMM_ROWS + m) * SUM_STRIDE + col + PAIR_COLS];
            }
            h[(i64)m * (N / 2) + n0 / 2 + o] = from_f32<T>(silu_times(gate, up));
        }
        return;
    }
    for (int i = threadIdx.x; i < M * COLS; i += MMA_GEMM_THREADS) {
        const int m = i / COLS, col = i - m * COLS, nn = n0 + col;
        if (nn >= N) continue;
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < MMA_GEMM_WARPS; w++) v += sums[(w * MMA_GEMM_ROWS + m) * SUM_STRIDE + col];
        if (S == 1) c[(i64)m * N + nn] = v;
        else partials[((i64)blockIdx.y * M + m) * N + nn] = v;
    }
    __shared__ bool last;
    if (S > 1) {
        __threadfence();  // this slice's partials are visible before the counter says so
        __syncthreads();
        if (threadIdx.x == 0) last = atomicAdd(&counters[blockIdx.x], 1u) == (unsigned)(S - 1);
        __syncthreads();
        if (!last) return;
        __threadfence();
        const i64 slice_stride = (i64)M * N;  // from one slice's partial tile to the next
        if constexpr (EPI == MMA_SWIGLU) {
            for (int i = threadIdx.x; i < M * COLS / 2; i += MMA_GEMM_THREADS) {
                const int m = i / (COLS / 2), o = i - m * (COLS / 2), nn = n0 + gate_column(o, PAIR_COLS);
                if (nn >= N) continue;
                const float* part = partials + (i64)m * N + nn;
                float gate = 0.0f, up = 0.0f;
                for (int s = 0; s < S; s++) {  // slice order; L2: other SMs wrote them
                    gate += __ldcg(part + s * slice_stride);
                    up += __ldcg(part + s * slice_stride + PAIR_COLS);
                }
                h[(i64)m * (N / 2) + n0 / 2 + o] = from_f32<T>(silu_times(gate, up));
            }
        } else {
            // The S partial tiles, four columns a thread (N % 8 == 0: a float4 never crosses N; the scratch is 16-byte
            // aligned), four slices' loads in flight before any is added, the sums in slice order.
            for (int i = threadIdx.x; i < M * COLS / 4; i += MMA_GEMM_THREADS) {
                const int m = i / (COLS / 4), nn = n0 + 4 * (i - m * (COLS / 4));
                if (nn >= N) continue;
                const float4* part = reinterpret_cast<const float4*>(partials + (i64)m * N + nn);
                const i64 stride4 = slice_stride / 4;  // float4s from one slice's tile to the next
                float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                int s = 0;
                for (; s + 4 <= S; s += 4) {
                    float4 r[4];
#pragma unroll
                    for (int u = 0; u < 4; u++) r[u] = __ldcg(part + (s + u) * stride4);  // L2: other SMs wrote them
#pragma unroll
                    for (int u = 0; u < 4; u++) {
                        v.x += r[u].x; v.y += r[u].y; v.z += r[u].z; v.w += r[u].w;
                    }
                }
                for (; s < S; s++) {
                    const float4 r = __ldcg(part + s * stride4);
                    v.x += r.x; v.y += r.y; v.z += r.z; v.w += r.w;
                }
                float* out = c + (i64)m * N + nn;
                out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
            }
        }
        if (threadIdx.x == 0) counters[blockIdx.x] = 0;
    }
    if constexpr (EPI == MMA_NORM) {
        // this block's tile of C is final; the grid's last tile to be so runs the norm over every column
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) last = atomicAdd(done, 1u) == gridDim.x - 1;
        __syncthreads();
        if (!last) return;
        __threadfence();
        mma_norm_tail<T>(x, c, w, h, M, N, eps);
        if (threadIdx.x == 0) *done = 0;
    }
}

}  // namespace vt
