// What every kernel of the library shares: the storage types (bf16 and fp16 held as their bits, so no
// CUDA header is needed under NVRTC or nvcc), exact conversions that round as the NumPy twins round,
// 16-byte vector loads, and warp reductions.
#pragma once

namespace vt {

typedef long long i64;

struct bf16 { unsigned short bits; };
struct f16 { unsigned short bits; };

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __uint_as_float(((unsigned int)x.bits) << 16); }
__device__ __forceinline__ float to_f32(f16 x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
    return f;
}

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
// Round to nearest even, a NaN kept quiet: vt/dtypes.py's _narrow_bf16, bit for bit.
template <> __device__ __forceinline__ bf16 from_f32<bf16>(float x) {
    unsigned int u = __float_as_uint(x);
    bf16 r;
    r.bits = (u & 0x7FFFFFFFu) > 0x7F800000u ? (unsigned short)((u >> 16) | 0x40u)
                                            : (unsigned short)((u + ((u >> 16) & 1u) + 0x7FFFu) >> 16);
    return r;
}
template <> __device__ __forceinline__ f16 from_f32<f16>(float x) {
    f16 r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(x));
    return r;
}

// N consecutive elements of T widened to float through 16-byte loads (N * sizeof(T) is a multiple of 16).
template <typename T, int N> __device__ __forceinline__ void load_f32(const T* p, float* out) {
    static_assert((N * sizeof(T)) % 16 == 0, "whole 16-byte vectors only");
    constexpr int PER = 16 / sizeof(T);
#pragma unroll
    for (int v = 0; v < N / PER; v++) {
        uint4 raw = reinterpret_cast<const uint4*>(p)[v];
        const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
        for (int j = 0; j < PER; j++) out[v * PER + j] = to_f32(e[j]);
    }
}

// SwiGLU's activation, one place for every kernel that applies it: SiLU(gate) x up.
__device__ __forceinline__ float silu_times(float gate, float up) { return gate / (1.0f + expf(-gate)) * up; }

// The gate/up projection's columns are interleaved PAIR_COLS at a time (gate's 8, then up's same 8: models/decoder.py),
// so a tile of the decode GEMM holds both halves of its outputs. Output column o's gate column, for the pairing layout.
constexpr int PAIR_COLS = 8;
__device__ __forceinline__ int gate_column(int o, int group) { return o / group * 2 * group + o % group; }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block's threads (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ __forceinline__ float block_sum(float v, float* scratch /* [32] */) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float r = lane < warps ? scratch[lane] : 0.0f;
    r = warp_sum(r);
    __syncthreads();
    return r;
}

// One row of the residual stream's add + RMSNorm, every thread of the block calling it (the norm kernel, and the
// kernels that fuse their output's add into it): with add, x [H] += delta(i), the i-th float4 of the row, in place;
// then out [H] = narrow(x / sqrt(mean(x^2) + eps) * w), HF's RMSNorm in float32. Each thread keeps its (at most
// NORM_VECS) float4s in registers between the sum and the write. H % 4 == 0.
constexpr int NORM_VECS = 4;
template <typename OUT, typename Delta>
__device__ __forceinline__ void add_rms_norm_row(float* __restrict__ x, bool add, Delta delta,
                                                 const float* __restrict__ w, OUT* __restrict__ out, int H, float eps,
                                                 float* scratch /* [32] */) {
    float4* xr = reinterpret_cast<float4*>(x);
    const int n4 = H / 4;
    float4 v[NORM_VECS];
    float sumsq = 0.0f;
#pragma unroll
    for (int j = 0; j < NORM_VECS; j++) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i >= n4) break;
        v[j] = xr[i];
        if (add) {
            const float4 d = delta(i);
            v[j].x += d.x; v[j].y += d.y; v[j].z += d.z; v[j].w += d.w;
            xr[i] = v[j];
        }
        sumsq += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
    }
    const float denom = sqrtf(block_sum(sumsq, scratch) / (float)H + eps);
#pragma unroll
    for (int j = 0; j < NORM_VECS; j++) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i >= n4) break;
        const float4 g = reinterpret_cast<const float4*>(w)[i];
        OUT* o = out + 4 * i;
        o[0] = from_f32<OUT>(v[j].x / denom * g.x);
        o[1] = from_f32<OUT>(v[j].y / denom * g.y);
        o[2] = from_f32<OUT>(v[j].z / denom * g.z);
        o[3] = from_f32<OUT>(v[j].w / denom * g.w);
    }
}

// A float4's sum of squares and a row's running sum, with explicit rounding: the skinny GEMM's norm epilogue and
// every prologue that norms a row for its consumer (the skinny GEMM's NORM_IN, moe_route_gemm_rows's) must reach
// the same sums, whatever the compiler would contract in each place.
__device__ __forceinline__ float sum_sq4(float4 v) {
    return __fmaf_rn(v.w, v.w, __fmaf_rn(v.z, v.z, __fmaf_rn(v.y, v.y, __fmul_rn(v.x, v.x))));
}

// The RMS denominators of M rows of x [M, n] (n % 4 == 0) into denom[M], every thread of a block of WARPS warps:
// thread t sums float4s t, t + 32 WARPS, ... of a row, the warps by shuffles, then the warps' sums in warp order.
// The norm epilogue gives its first float4 a thread (`first`, already loaded and added); a prologue loads them all.
template <int M, int WARPS, int MAX_M>
__device__ __forceinline__ void row_denominators(const float* __restrict__ x, int n, float eps, const float4* first,
                                                 float (&row_sq)[WARPS][MAX_M], float* denom) {
    static_assert(M <= MAX_M, "a row's sum a slot");
    const int n4 = n / 4, i0 = threadIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float4* x4 = reinterpret_cast<const float4*>(x);
#pragma unroll
    for (int m = 0; m < M; m++) {
        float sq = 0.0f;
        for (int i = i0; i < n4; i += WARPS * 32)
            sq = __fadd_rn(sq, sum_sq4(i == i0 && first ? first[m] : x4[(i64)m * n4 + i]));
        sq = warp_sum(sq);
        if (lane == 0) row_sq[warp][m] = sq;
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < M; m++) {
        float total = 0.0f;
#pragma unroll
        for (int k = 0; k < WARPS; k++) total += row_sq[k][m];
        denom[m] = sqrtf(total / (float)n + eps);
    }
}

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }

// 2^x in one MUFU instruction (ex2.approx, about 2 ulp), results below float32's normal range flushed to zero: the
// attention kernels' softmax weights, where exp2f's range checks cost three more instructions a value and expf
// several, for weights that small against a row sum of at least 1.
__device__ __forceinline__ float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
constexpr float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;

// Programmatic dependent launch (sm_90+). A captured step is hundreds of small kernels back to back; launched with
// programmatic stream serialization (build.py), a kernel's blocks start while the kernel before it in the stream
// still runs, and this first statement of every kernel holds them until that kernel has completed and its writes
// are visible: nothing is read or written before it. The kernel then lets the kernel after it launch the same way.
// Launched plainly (eagerly, or before sm_90), the wait returns at once.
__device__ __forceinline__ void pdl_entry() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// What a kernel reads before its wait, by its pointer parameters' names: buffers no kernel of a step writes ahead of
// it (the step's inputs, which the host uploads before the graph runs; the KV cache at keys earlier steps wrote). It
// compiles to nothing: build.py's waits_first reads it, and takes the kernel as waiting first only when the code
// before the wait names no other pointer parameter and writes through none.
#define VT_READS_BEFORE_WAIT(...)

// The wait alone, for a kernel that lets the kernel after it launch later than its first statement (pdl_trigger,
// once every block has called it or ended). Where the trigger sits never changes a result: the kernel after still
// waits in its own first statement for this one to complete. It changes when that kernel's blocks take their SMs.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// One bulk prefetch of [p, p + bytes) into L2 (sm_90; a hint), skipped where p or bytes is not a 16-byte multiple
// (the instruction requires both).
__device__ __forceinline__ void prefetch_l2_bulk(const void* p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (((unsigned long long)p | bytes) & 15ull) return;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes));
#endif
}

// The one thing a kernel may do before its wait: ask L2 for a tile of its weights (sm_90's bulk prefetch, a hint: no
// value reaches the kernel, so the kernel ahead's writes cannot be read early through it), so that a decode GEMM's
// weights come from L2 instead of HBM once the kernel ahead has completed. Rows [row0, min(row0 + rows, nrows)) x
// columns [col0, min(col0 + cols, ld)) of a row-major [nrows, ld] matrix, a row a thread. build.py's waits_first
// takes such calls before the wait only when their arguments are kernel parameters, template constants and thread
// coordinates (nothing that reads memory). A row whose address or size is not a 16-byte multiple is skipped (the
// instruction requires both).
template <typename T>
__device__ __forceinline__ void pdl_prefetch_l2(const T* base, int ld, int nrows, int row0, int rows, int col0,
                                                int cols) {
    const int r1 = min(nrows, row0 + rows), c1 = min(ld, col0 + cols);
    if (c1 <= col0) return;
    const unsigned bytes = (unsigned)(c1 - col0) * (unsigned)sizeof(T);
    for (int r = row0 + (int)threadIdx.x; r < r1; r += (int)blockDim.x)
        prefetch_l2_bulk(base + (long long)r * ld + col0, bytes);
}

// Thread-block clusters (sm_90; a kernel launched as clusters): the cluster's barrier (all threads of all its
// blocks; release then acquire: shared-memory writes before it are visible to the cluster after it), this block's
// rank in it, its blocks, and a float of another block's shared memory at the address `local` has in this block's.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ unsigned cluster_blocks() {
    unsigned n;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
    return n;
}
__device__ __forceinline__ float cluster_load(const float* local, unsigned rank) {
    const unsigned addr = (unsigned)__cvta_generic_to_shared(local);
    unsigned remote;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
    return v;
}

}  // namespace vt
