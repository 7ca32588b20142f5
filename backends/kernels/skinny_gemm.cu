// Decode's GEMM: C [M, N] float32 = A [M, K] @ B [K, N] for a few rows (M <= 8), bf16 / fp16 operands, float32
// accumulation. At such M a GEMM is a read of B, so the kernel is built to stream B at the memory's speed: a
// thread owns 8 consecutive columns (one 16-byte load a row), a block 64 columns and one slice of K, and the grid
// splits K into S slices so that every SM has blocks even when N is small. A slice's partial tile goes to
// scratch; the last block of a column tile to finish (a counter per tile) adds the S partials in slice order, so
// the sum's order never depends on timing. The counter is back to zero when the kernel ends: a graph replays it.
#include "common.cuh"

namespace vt {

constexpr int SKINNY_MAX_M = 8;
constexpr int SKINNY_COLS = 64;      // a block's columns: 8 threads x 8 columns
constexpr int SKINNY_THREADS = 256;  // 32 rows of threads

// M is a template argument: a thread holds M x 8 accumulators, so one row keeps registers few and blocks many.
template <typename T, int M>
__global__ void __launch_bounds__(SKINNY_THREADS)
skinny_gemm(const T* __restrict__ a, const T* __restrict__ b, float* __restrict__ c, float* __restrict__ partials,
            unsigned int* __restrict__ counters, int N, int K, int slice) {
    static_assert(M >= 1 && M <= SKINNY_MAX_M, "1..8 rows");
    __shared__ float warp_part[SKINNY_THREADS / 32][M][SKINNY_COLS];
    __shared__ bool last;
    const int tc = threadIdx.x & 7, tr = threadIdx.x >> 3;  // column group, row of threads (0..31)
    const int warp = threadIdx.x >> 5;
    const int n = blockIdx.x * SKINNY_COLS + tc * 8;
    const int k0 = blockIdx.y * slice, k1 = min(K, k0 + slice);
    float acc[M][8];
#pragma unroll
    for (int m = 0; m < M; m++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[m][j] = 0.0f;
    if (n < N) {
#pragma unroll 4
        for (int k = k0 + tr; k < k1; k += 32) {
            float w[8];
            load_f32<T, 8>(b + (i64)k * N + n, w);
#pragma unroll
            for (int m = 0; m < M; m++) {
                const float x = to_f32(a[(i64)m * K + k]);
#pragma unroll
                for (int j = 0; j < 8; j++) acc[m][j] += x * w[j];
            }
        }
    }
    // the 4 thread rows of a warp sharing a column group (lanes tc, tc + 8, tc + 16, tc + 24), then the 8 warps
#pragma unroll
    for (int m = 0; m < M; m++) {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float v = acc[m][j];
            v += __shfl_xor_sync(0xffffffffu, v, 8);
            v += __shfl_xor_sync(0xffffffffu, v, 16);
            if ((threadIdx.x & 31) < 8) warp_part[warp][m][tc * 8 + j] = v;
        }
    }
    __syncthreads();
    const int S = gridDim.y;
    for (int i = threadIdx.x; i < M * SKINNY_COLS; i += SKINNY_THREADS) {
        const int m = i / SKINNY_COLS, col = i - m * SKINNY_COLS, nn = blockIdx.x * SKINNY_COLS + col;
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < SKINNY_THREADS / 32; w++) v += warp_part[w][m][col];
        if (nn < N) {
            if (S == 1) c[(i64)m * N + nn] = v;
            else partials[((i64)blockIdx.y * M + m) * N + nn] = v;
        }
    }
    if (S == 1) return;
    __threadfence();  // this slice's partials are visible before the counter says so
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&counters[blockIdx.x], 1u) == (unsigned)(S - 1);
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int i = threadIdx.x; i < M * SKINNY_COLS; i += SKINNY_THREADS) {
        const int m = i / SKINNY_COLS, nn = blockIdx.x * SKINNY_COLS + (i - m * SKINNY_COLS);
        if (nn >= N) continue;
        float v = 0.0f;
        for (int s = 0; s < S; s++) v += __ldcg(&partials[((i64)s * M + m) * N + nn]);  // L2: other SMs wrote them
        c[(i64)m * N + nn] = v;
    }
    if (threadIdx.x == 0) counters[blockIdx.x] = 0;
}

}  // namespace vt
