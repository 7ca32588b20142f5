// The batched sampler as one kernel: a block of VT_SAMPLER_THREADS threads per row. Semantics are
// vt/engine/sample/sampler.py's (its NumPy twin, `_sample_numpy`). Thresholds come from radix selection over
// order-preserving float keys (4 passes of 8 bits, histograms in shared memory): the k-th largest key for
// top-k and for the logprobs' top-n, and the largest key whose kept mass reaches top_p. Masses are
// fixed-point integers, so every sum (and so every decision) is the same whatever order threads add in.
// It allocates nothing: it runs inside a captured decode graph. The row layout comes from the binding
// (backends/kernels/sampler.py) as macros: VT_NF floats and VT_NI ints per row, the first VT_NFI ints
// named fields and the rest banned ids, VT_NLP logprob slots. A row's logit bias (and allowed tokens) is
// W (token, bias) pairs; the raw logits of those tokens are kept in bias_raw for the sampled token's logprob.
#include "common.cuh"

typedef unsigned long long u64;
typedef unsigned int u32;
// Defaults (the engine's layout, backends/kernels/sampler.py's LAYOUT) so the file also compiles on its own.
#ifndef VT_SAMPLER_THREADS
#define VT_SAMPLER_THREADS 512
#endif
#ifndef VT_NF
#define VT_NF 6
#endif
#ifndef VT_NI
#define VT_NI 26
#endif
#ifndef VT_NFI
#define VT_NFI 10
#endif
#ifndef VT_NLP
#define VT_NLP 21
#endif
#define T VT_SAMPLER_THREADS
#define WARPS (T / 32)
#define NF VT_NF
#define NI VT_NI
#define NFI VT_NFI
#define NLP VT_NLP
#define MASS_SCALE 4294967296.0f
#define VT_INF __int_as_float(0x7f800000)

__device__ __forceinline__ u32 fkey(float x) {
    u32 b = __float_as_uint(x);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ u64 mix64(u64 z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
// Block reductions: each warp by shuffles, then every thread over the warps' results (two barriers, where a
// shared-memory tree over T values took log2(T)). sh: RED entries (a warp's lanes: at least WARPS).
#define RED 32
__device__ float block_max(float v, float* sh) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = sh[0];
    for (int w = 1; w < WARPS; w++) r = fmaxf(r, sh[w]);
    __syncthreads();
    return r;
}
// (block_sum_f keeps its tree over T values, so its scratch must hold T: its float sum, the logprobs' normalizer,
// stays in the order it always had. Only vt_sample, whose scratch is [T], calls it.)
__device__ float block_sum_f(float v, float* sh) {
    sh[threadIdx.x] = v; __syncthreads();
    for (int s = T / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    float r = sh[0]; __syncthreads();
    return r;
}
__device__ u64 block_sum_u(u64 v, u64* sh) {  // integers: the same sum in any order
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    u64 r = 0;
    for (int w = 0; w < WARPS; w++) r += sh[w];
    __syncthreads();
    return r;
}
// Exclusive prefix sum over the block (thread order): each warp scans by shuffles, warp 0 scans the warps' totals.
// Integers: the same sums in any order. (One thread adding T values took ~8 us of a draw's tail on the H200.)
__device__ u64 block_exclusive_scan(u64 v, u64* sh, u64* total = nullptr) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u64 x = v;
    for (int o = 1; o < 32; o <<= 1) { const u64 y = __shfl_up_sync(0xffffffffu, x, o); if (lane >= o) x += y; }
    if (lane == 31) sh[warp] = x;
    __syncthreads();
    if (warp == 0) {
        u64 t = lane < WARPS ? sh[lane] : 0ull;
        for (int o = 1; o < 32; o <<= 1) { const u64 y = __shfl_up_sync(0xffffffffu, t, o); if (lane >= o) t += y; }
        if (lane < WARPS) sh[lane] = t;
    }
    __syncthreads();
    const u64 r = x - v + (warp ? sh[warp - 1] : 0ull);
    if (total) *total = sh[WARPS - 1];  // the block's sum, for free
    __syncthreads();
    return r;
}
// The largest value, the lowest index among equals (a total order over (value, index): any reduction order agrees).
__device__ __forceinline__ void argmax_step(float& v, int& i, float b, int ib) {
    if (b > v || (b == v && ib < i)) { v = b; i = ib; }
}
__device__ void block_argmax(float v, int i, float* shv, int* shi, float* outv, int* outi) {
    for (int o = 16; o > 0; o >>= 1)
        argmax_step(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
    if ((threadIdx.x & 31) == 0) { shv[threadIdx.x >> 5] = v; shi[threadIdx.x >> 5] = i; }
    __syncthreads();
    v = shv[0]; i = shi[0];
    for (int w = 1; w < WARPS; w++) argmax_step(v, i, shv[w], shi[w]);
    *outv = v; *outi = i;
    __syncthreads();
}

struct Filter { float temp, m, min_p; u32 kmin; int weighted; };

// A row with nothing to change before its draw: no logprobs, penalty history, bans, bias or allowed tokens.
__device__ __forceinline__ bool plain_row(const long long* ip) { return ip[5] == 0 && ip[4] == 0 && ip[6] == 0 && ip[8] == 0; }

// The sampled token's raw logit for its logprob: the value saved before the penalties changed it (hist_raw), and
// before the bias did (bias_raw; the bias came first, so its saved value wins). One row's arrays; one thread.
__device__ __forceinline__ float raw_logit(const float* row, int tok, const long long* hist, const float* hist_raw,
                                           int num_hist, const long long* bias_ids, const float* bias_raw, int num_bias) {
    float raw = row[tok];
    for (int j = 0; j < num_hist; j++) if (hist[j] == tok) { raw = hist_raw[j]; break; }
    for (int j = 0; j < num_bias; j++) if (bias_ids[j] == tok) { raw = bias_raw[j]; break; }
    return raw;
}

// A whole row, for passes whose result does not depend on the order a thread visits tokens in (a flag, an argmax
// that breaks ties by index): float4 loads, VEC_UNROLL of them in flight a thread (64 KB a block; a block is a row,
// and one load in flight a thread took a greedy row 59 us at 151,936 tokens on the H200). A row whose start is not
// 16-byte aligned (logits + r V, so some rows when V % 4 != 0) takes the scalar pass.
#define VEC_UNROLL 8
#define VEC_ROW_PASS(row, n, body)                                                                        \
    if ((reinterpret_cast<unsigned long long>(row) & 15ull) == 0ull) {                                  \
        const int n4_ = (n) / 4;                                                                          \
        const float4* r4_ = reinterpret_cast<const float4*>(row);                                         \
        for (int b_ = (int)threadIdx.x; b_ < n4_; b_ += VEC_UNROLL * T) {                                 \
            float4 v_[VEC_UNROLL];                                                                        \
            _Pragma("unroll") for (int u_ = 0; u_ < VEC_UNROLL; u_++) {                                   \
                const int j_ = b_ + u_ * T;                                                               \
                v_[u_] = j_ < n4_ ? r4_[j_] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);                        \
            }                                                                                             \
            _Pragma("unroll") for (int u_ = 0; u_ < VEC_UNROLL; u_++) {                                   \
                const int j_ = b_ + u_ * T;                                                               \
                if (j_ < n4_) {                                                                           \
                    const float e_[4] = {v_[u_].x, v_[u_].y, v_[u_].z, v_[u_].w};                         \
                    _Pragma("unroll") for (int c_ = 0; c_ < 4; c_++) {                                    \
                        const int i = 4 * j_ + c_;                                                        \
                        const float raw = e_[c_];                                                         \
                        (void)i;                                                                          \
                        body                                                                              \
                    }                                                                                     \
                }                                                                                         \
            }                                                                                             \
        }                                                                                                 \
        for (int i = 4 * n4_ + (int)threadIdx.x; i < (n); i += T) { const float raw = (row)[i]; body }    \
    } else {                                                                                              \
        for (int i = (int)threadIdx.x; i < (n); i += T) { const float raw = (row)[i]; body }              \
    }

// Token i's tempered value, whether the filters so far keep it, and its fixed-point mass.
__device__ __forceinline__ float tempered(const float* row, int i, float temp) { return __fdiv_rn(row[i], temp); }
__device__ __forceinline__ u64 weight_of(float x, const Filter& f, u32* key_out) {  // x: the tempered value
    u32 k = fkey(x);
    *key_out = k;
    if (!f.weighted) return 1;
    if (k < f.kmin) return 0;
    float e = expf(x - f.m);
    if (f.min_p > 0.0f && e < f.min_p) return 0;
    return (u64)(e * MASS_SCALE);
}
__device__ __forceinline__ u64 weight(const float* row, int i, const Filter& f, u32* key_out) {
    return weight_of(tempered(row, i, f.temp), f, key_out);
}

// A block's pass over its chunk [lo, hi), thread t taking lo + t, lo + t + T, ...: UNROLL loads issued before any is
// used (one load in flight a thread left a pass over 256 rows of 151,936 logits at ~1 TB/s on the H200).
#define UNROLL 4
#define CHUNK_PASS(lo, hi, row, body)                                                     \
    for (int base_ = (lo) + (int)threadIdx.x; base_ < (hi); base_ += UNROLL * T) {        \
        float v_[UNROLL];                                                                 \
        _Pragma("unroll") for (int u_ = 0; u_ < UNROLL; u_++) {                           \
            const int j_ = base_ + u_ * T;                                                \
            v_[u_] = j_ < (hi) ? (row)[j_] : 0.0f;                                        \
        }                                                                                 \
        _Pragma("unroll") for (int u_ = 0; u_ < UNROLL; u_++) {                           \
            const int i = base_ + u_ * T;                                                 \
            const float raw = v_[u_];                                                     \
            if (i < (hi)) { body }                                                        \
        }                                                                                 \
    }

// A block's pass over its chunk [lo, hi) of a row, four tokens a thread at a time: thread t takes tokens lo + 4q ..
// lo + 4q + 3 for q = t, t + T, ... (QUAD_PASS; QUAD_PASS_BY for another first quad and stride), QUADS quads
// loaded before any is used. float4 loads where the chunk starts
// 16-byte aligned (chunk_of keeps lo a multiple of 4, so every chunk of a row whose start is aligned), else four
// scalar loads: the same tokens a thread either way, so the candidates' bound never depends on the alignment. (Scalar
// loads, four in flight a thread, left 16 blocks a row latency-bound: a temperature draw's two passes at B = 1 took
// 8 and 15 us of 608 KB on the H200.)
#define QUADS 4
#define QUAD_PASS_BY(lo, hi, row, first, step, body)                                                         \
    {                                                                                                         \
        const float* q_row_ = (row) + (lo);                                                                   \
        const int q_n_ = (hi) - (lo), q_full_ = q_n_ / 4;                                                     \
        const bool q_vec_ = (reinterpret_cast<unsigned long long>(q_row_) & 15ull) == 0ull;                   \
        for (int q0_ = (first); 4 * q0_ < q_n_; q0_ += QUADS * (step)) {                                      \
            float4 v_[QUADS];                                                                                 \
            _Pragma("unroll") for (int u_ = 0; u_ < QUADS; u_++) {                                            \
                const int q_ = q0_ + u_ * (step);                                                             \
                if (q_vec_ && q_ < q_full_) {                                                                 \
                    v_[u_] = reinterpret_cast<const float4*>(q_row_)[q_];                                     \
                } else {                                                                                      \
                    const int o_ = 4 * q_;                                                                    \
                    v_[u_] = make_float4(o_ < q_n_ ? q_row_[o_] : 0.0f, o_ + 1 < q_n_ ? q_row_[o_ + 1] : 0.0f, \
                                         o_ + 2 < q_n_ ? q_row_[o_ + 2] : 0.0f, o_ + 3 < q_n_ ? q_row_[o_ + 3] : 0.0f); \
                }                                                                                             \
            }                                                                                                 \
            _Pragma("unroll") for (int u_ = 0; u_ < QUADS; u_++) {                                            \
                const float e_[4] = {v_[u_].x, v_[u_].y, v_[u_].z, v_[u_].w};                                 \
                _Pragma("unroll") for (int c_ = 0; c_ < 4; c_++) {                                            \
                    const int o_ = 4 * (q0_ + u_ * (step)) + c_;                                              \
                    if (o_ < q_n_) { const int i = (lo) + o_; const float raw = e_[c_]; (void)i; body }       \
                }                                                                                             \
            }                                                                                                 \
        }                                                                                                     \
    }
#define QUAD_PASS(lo, hi, row, body) QUAD_PASS_BY(lo, hi, row, (int)threadIdx.x, T, body)
// A warp's pass over its own contiguous range [lo, hi) (lo a multiple of 4), the lanes taking its quads in turn.
#define WARP_QUAD_PASS(lo, hi, row, body) QUAD_PASS_BY(lo, hi, row, (int)(threadIdx.x & 31), 32, body)

// Warp w's sixteenth of [lo, hi): contiguous, whole quads (lo a multiple of 4).
__device__ __forceinline__ void sixteenth(int lo, int hi, int w, int* a, int* b) {
    const int seg = ((hi - lo + WARPS - 1) / WARPS + 3) & ~3;
    *a = min(hi, lo + w * seg);
    *b = min(hi, *a + seg);
}

// The inverse CDF within tokens [a, b) of a row: the first token whose running mass (pre at a) exceeds target, or
// `none` when the range's mass does not reach it. Every thread of the block. The range narrows a sixteenth at a time:
// each warp sums a contiguous sixteenth (coalesced, eight loads in flight a lane), and the sixteenth that carries the
// running mass past the target is kept, until four tokens a thread remain; those are scanned in thread order. (Each
// thread walking its own contiguous run token by token paid a load's latency per token.) Integers: exact.
__device__ int draw_in(const float* row, int a, int b, const Filter& f, u64 pre, u64 target, int none, u64* shu,
                       int* found) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u32 k;
    while (b - a > 4 * T) {
        const int seg = (b - a + WARPS - 1) / WARPS, sa = min(b, a + warp * seg), sb = min(b, sa + seg);
        u64 s = 0;
        for (int i0 = sa + lane; i0 < sb; i0 += 32 * 8) {
            float v[8];
#pragma unroll
            for (int u = 0; u < 8; u++) v[u] = i0 + 32 * u < sb ? row[i0 + 32 * u] : 0.0f;
#pragma unroll
            for (int u = 0; u < 8; u++) if (i0 + 32 * u < sb) s += weight_of(__fdiv_rn(v[u], f.temp), f, &k);
        }
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) shu[warp] = s;
        __syncthreads();
        int pick = 0;  // every thread alike: the sixteenth whose mass carries the running sum past the target
        for (; pick < WARPS - 1 && target >= pre + shu[pick]; pick++) pre += shu[pick];
        __syncthreads();
        a = min(b, a + pick * seg);
        b = min(b, a + seg);
    }
    const int ta = min(b, a + 4 * (int)threadIdx.x), tb = min(b, ta + 4);
    float v[4];
    u64 w[4], s = 0;
#pragma unroll
    for (int c = 0; c < 4; c++) v[c] = ta + c < tb ? row[ta + c] : 0.0f;
#pragma unroll
    for (int c = 0; c < 4; c++) { w[c] = ta + c < tb ? weight_of(__fdiv_rn(v[c], f.temp), f, &k) : 0ull; s += w[c]; }
    u64 acc = pre + block_exclusive_scan(s, shu);
    if (threadIdx.x == 0) *found = none;
    __syncthreads();
    if (target >= acc && target < acc + s) {
#pragma unroll
        for (int c = 0; c < 4; c++) { acc += w[c]; if (acc > target) { *found = ta + c; break; } }
    }
    __syncthreads();
    const int tok = *found;
    __syncthreads();
    return tok;
}

// The largest key K with (sum of weights of keys >= K) >= want, over keys >= f.kmin when weighted.
// Each warp counts into its own histogram (most keys share their top byte: one shared histogram would
// serialize the whole block on two or three bins; measured on the H200, 2.1 ms -> 1.0 ms for Qwen3's
// top-k 20 + top-p 0.95 at 151,936 tokens), then the 256 bins are summed across the warps.
__device__ u32 radix_select(const float* row, int V, const Filter& f, u64 want, u64* whist, u64* hist,
                            u64* shared_u) {
    u32 prefix = 0, pmask = 0;
    u64* mine = whist + (threadIdx.x / 32) * 256;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < WARPS * 256; b += T) whist[b] = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < V; i += T) {
            u32 k; u64 w = weight(row, i, f, &k);
            if (w && (k & pmask) == prefix) atomicAdd(&mine[(k >> shift) & 255u], w);
        }
        __syncthreads();
        for (int b = threadIdx.x; b < 256; b += T) {
            u64 s = 0;
            for (int w = 0; w < WARPS; w++) s += whist[w * 256 + b];
            hist[b] = s;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            u32 sel = 0;
            for (int b = 255; b >= 0; b--) {
                if (hist[b] >= want) { sel = (u32)b; break; }
                want -= hist[b];
            }
            shared_u[0] = sel; shared_u[1] = want;
        }
        __syncthreads();
        prefix |= (u32)shared_u[0] << shift; pmask |= 255u << shift;
        want = shared_u[1];
        __syncthreads();
    }
    return prefix;
}

// A row's hash of (seed, output position): its mass draw's uniform comes from it.
__device__ __forceinline__ u64 row_hash(u64 seed, u64 counter) { return mix64(seed + 0x9E3779B97F4A7C15ull * (counter + 1ull)); }

// ---- Gumbel-max, the draw of a row of temperature alone: the largest x + g, g token i's Gumbel noise. The same
// float32 operations as vt/engine/sample/sampler.py's log_f32 and gumbel_noise, each correctly rounded (the _rn
// intrinsics: never a fused multiply-add), so both bodies compute the same bits.
// log(y), y positive and normal: y = 2**e m, m in [sqrt(1/2), sqrt(2)), log m = 2 atanh((m - 1) / (m + 1)) by its
// series to the 9th power.
__device__ __forceinline__ float log_f32(float y) {
    const float ln2 = __uint_as_float(0x3F317218u), c3 = __uint_as_float(0x3EAAAAABu),
                c5 = __uint_as_float(0x3E4CCCCDu), c7 = __uint_as_float(0x3E124925u), c9 = __uint_as_float(0x3DE38E39u);
    const u32 bits = __float_as_uint(y);
    int e = (int)(bits >> 23) - 127;
    u32 mb = (bits & 0x7FFFFFu) | 0x3F800000u;
    if (mb > 0x3FB504F3u) { mb -= 1u << 23; e += 1; }  // m past sqrt(2): halved, exactly
    const float m = __uint_as_float(mb);
    const float t = __fdiv_rn(__fsub_rn(m, 1.0f), __fadd_rn(m, 1.0f));
    const float t2 = __fmul_rn(t, t);
    const float p = __fmul_rn(t2, __fadd_rn(c3, __fmul_rn(t2, __fadd_rn(c5, __fmul_rn(t2, __fadd_rn(c7, __fmul_rn(t2, c9)))))));
    const float tt = __fadd_rn(t, t);
    // e as a float from the bits of 2**23 + e + 128, less 2**23 + 128 (exact): an integer conversion is a slow op
    const float ef = __fsub_rn(__int_as_float(0x4B000000 + e + 128), 8388736.0f);
    return __fadd_rn(__fmul_rn(ef, ln2), __fadd_rn(tt, __fmul_rn(tt, p)));
}
__device__ __forceinline__ u32 lowbias32(u32 x) {
    x ^= x >> 16; x *= 0x7FEB352Du; x ^= x >> 15; x *= 0x846CA68Bu;
    return x ^ (x >> 16);
}
// A row's 32-bit key for its tokens' noise: its row_hash's halves xored.
__device__ __forceinline__ u32 gumbel_key(const long long* ip) {
    const u64 h = row_hash((u64)ip[0], (u64)ip[1]);
    return (u32)(h >> 32) ^ (u32)h;
}
// Token i's noise: u = (2 k + 1) / 2**24, k the top 23 bits of lowbias32(key + (i + 1) WEYL32), built from the bits
// of 1 + k 2**-23 (each step exact), g = -log(-log u).
__device__ __forceinline__ float uniform_of(u32 k) {  // (2 k + 1) / 2**24, k of 23 bits
    return __fadd_rn(__fsub_rn(__uint_as_float(0x3F800000u | k), 1.0f), 5.9604644775390625e-08f);
}
__device__ __forceinline__ float gumbel_uniform(u32 key, int i) {
    return uniform_of(lowbias32(key + 0x9E3779B9u * (u32)(i + 1)) >> 9);
}
__device__ __forceinline__ float gumbel_noise(float u) { return -log_f32(-log_f32(u)); }
// An upper bound on gumbel_noise(u) from the multifunction unit's log2 (one or two MUFU ops, no division):
// e = -log u, or where u is within 2**-6 of 1 the series' first two terms v + v**2 / 2, v = 1 - u (below -log u: as
// u nears 1, __log2f's absolute error, 2**-22, grows into a large relative error of e, which the series avoids); then
// -log e plus GUMBEL_SLACK. By __log2f's documented error the bound's own error stays near 1e-5, some 1,500 times
// below the slack; the GPU lane checks bound >= noise + slack / 2 for all 2**23 uniforms (vt_gumbel_bounds).
#define GUMBEL_SLACK 0.015625f
__device__ __forceinline__ float gumbel_bound(float u) {
    const float ln2 = 0.693147182f, v = __fsub_rn(1.0f, u);  // exact where it is taken (u > 1/2)
    const float e = v < 0.015625f ? __fmul_rn(v, __fadd_rn(1.0f, __fmul_rn(0.5f, v))) : __fmul_rn(-ln2, __log2f(u));
    return __fadd_rn(GUMBEL_SLACK, __fmul_rn(-ln2, __log2f(e)));
}
// Order-preserving int keys of float scores, for atomicMax on a block's threshold.
__device__ __forceinline__ int score_key(float s) {
    const int b = __float_as_int(s);
    return b >= 0 ? b : b ^ 0x7FFFFFFF;
}
__device__ __forceinline__ float key_score(int k) { return __int_as_float(k >= 0 ? k : k ^ 0x7FFFFFFF); }
// Token i's step of a Gumbel row's argmax. thr is the block's best exact score so far (shared, read stale at worst:
// lower, so fewer skips). A token whose x + bound falls below it scores below a token already scored, since
// fl(x + noise) <= fl(x + bound) (rounding is monotone), so it is never drawn and its exact noise (two divisions
// and some forty correctly rounded operations) is never computed. The draw is the one every token's exact score
// gives; only the work differs.
__device__ __forceinline__ void gumbel_step(float& best, int& at, int* thr, float x, u32 key, int i) {
    const float u = gumbel_uniform(key, i);
    if (__fadd_rn(x, gumbel_bound(u)) < key_score(*(volatile int*)thr)) return;
    const float s = __fadd_rn(x, gumbel_noise(u));
    if (s > best || (s == best && i < at)) {
        best = s; at = i;
        atomicMax(thr, score_key(s));
    }
}
// Every thread of the block: thr's start, at or below every score (-inf's key; the skip's test is strict).
__device__ __forceinline__ void gumbel_start(int* thr) {
    if (threadIdx.x == 0) *thr = score_key(-VT_INF);
    __syncthreads();
}
// A row that draws by Gumbel-max: temperature alone (no top-k below the vocabulary, no top-p, no min-p).
__device__ __forceinline__ bool gumbel_row(const float* fp, const long long* ip, int V) {
    return fp[0] != 0.0f && !(ip[2] > 0 && ip[2] < V) && !(fp[1] < 1.0f) && !(fp[2] > 0.0f);
}

// The row's target mass in [0, z): its one uniform (its row_hash, 53 bits) times z.
__device__ __forceinline__ u64 draw_target(u64 seed, u64 counter, u64 z) {
    u64 key = row_hash(seed, counter);
    double u = (double)(key >> 11) * 1.1102230246251565e-16;  // 2**-53
    u64 target = (u64)(u * (double)z);
    return target >= z ? z - 1 : target;
}

// The draw of one row by one block (every thread of it): top-k, min-p and top-p thresholds by radix selection over
// the whole vocabulary, then the inverse CDF. vt_sample's body for a row it draws, and the candidate sampler's exact
// fallback (ties past what its candidates hold).
__device__ int draw_block(const float* row, int V, const float* fp, const long long* ip, float* shf, int* shi,
                          u64* shu, u64* hist256, u64* whist, u64* shx) {
    const int tid = threadIdx.x;
    const float temp = fp[0], top_p = fp[1], min_p = fp[2];
    const long long top_k = ip[2];
    float m = -VT_INF;
    if (gumbel_row(fp, ip, V)) {  // temperature alone: Gumbel-max, tempered by a multiply (as the reference's rows)
        const u32 key = gumbel_key(ip);
        const float rtemp = __fdiv_rn(1.0f, temp);
        float best = -VT_INF;
        int at = V;
        __shared__ int thr;
        gumbel_start(&thr);
        for (int i = tid; i < V; i += T) {
            const float x = __fmul_rn(row[i], rtemp);
            m = fmaxf(m, x);
            gumbel_step(best, at, &thr, x, key, i);
        }
        m = block_max(m, shf);
        if (!isfinite(m)) return -1;  // the rule below
        int tok;
        block_argmax(best, at, shf, shi, &best, &tok);
        return tok;
    }
    for (int i = tid; i < V; i += T) m = fmaxf(m, tempered(row, i, temp));
    m = block_max(m, shf);
    // a penalty pushed a logit past float32's range (or every token is -inf): the masses are NaN, and the row fails
    // alone, as the reference's does (-1)
    if (!isfinite(m)) return -1;
    Filter f = {temp, m, 0.0f, 0u, 0};
    if (top_k > 0 && top_k < V) f.kmin = radix_select(row, V, f, (u64)top_k, whist, hist256, shx);
    f.weighted = 1; f.min_p = min_p;
    u64 z = 0; u32 k;
    for (int i = tid; i < V; i += T) z += weight(row, i, f, &k);
    z = block_sum_u(z, shu);
    if (top_p < 1.0f) {
        // at least one unit of mass: a top_p so small that top_p * z < 1 keeps the top token, never nothing
        f.kmin = radix_select(row, V, f, max(1ull, (u64)((double)top_p * (double)z)), whist, hist256, shx);
        z = 0;
        for (int i = tid; i < V; i += T) z += weight(row, i, f, &k);
        z = block_sum_u(z, shu);
    }
    return draw_in(row, 0, V, f, 0ull, draw_target((u64)ip[0], (u64)ip[1], z), V - 1, shu, shi);
}

extern "C" __global__ void vt_sample(float* logits, const float* fparams, const long long* iparams,
                                     const long long* hist, float* hist_raw, const long long* bias_ids,
                                     const float* bias_vals, float* bias_raw, long long* out_ids,
                                     float* lp_vals, long long* lp_ids, int V, int L, int W, int defer_draw) {
    vt::pdl_entry();
    __shared__ float shf[T];
    __shared__ int shi[T];
    __shared__ u64 shu[T];
    __shared__ u64 hist256[256];
    __shared__ u64 whist[WARPS * 256];
    __shared__ u64 shx[2];
    const int r = blockIdx.x, tid = threadIdx.x;
    float* row = logits + (long long)r * V;
    const float* fp = fparams + r * NF;
    const long long* ip = iparams + r * NI;
    const long long* h = hist + (long long)r * L;
    float* hr = hist_raw + (long long)r * L;
    const float temp = fp[0], rep = fp[3], pres = fp[4], freq = fp[5];
    const int num_prompt = (int)ip[3], num_hist = (int)ip[4], num_lp = (int)ip[5], num_banned = (int)ip[6];
    const long long forced = ip[7];
    const int num_bias = forced < 0 ? (int)ip[8] : 0, allowed = (int)ip[9];  // a forced row scores raw logits
    const long long* bi = bias_ids + (long long)r * W;
    float* br = bias_raw + (long long)r * W;

    // defer_draw: bit 0 leaves the draw to the split kernels, bit 1 keeps a plain greedy row's argmax here
    if (defer_draw && forced < 0 && plain_row(ip) && !(temp == 0.0f && (defer_draw & 2))) {
        if (tid == 0) out_ids[r] = -2;  // nothing to do before the draw (or the argmax): the candidate kernel checks
        return;                         // its logits
    }
    int bad = 0;
    if (forced < 0 && temp == 0.0f && plain_row(ip)) {  // greedy, nothing to change first: one pass checks and picks
        float best = -VT_INF;
        int at = V;
        VEC_ROW_PASS(row, V, {
            bad |= !isfinite(raw);
            if (raw > best || (raw == best && i < at)) { best = raw; at = i; }
        });
        if (block_max((float)bad, shf) > 0.0f) { if (tid == 0) out_ids[r] = -1; return; }
        int tok;
        block_argmax(best, at, shf, shi, &best, &tok);
        if (tid == 0) out_ids[r] = tok;
        return;
    }
    VEC_ROW_PASS(row, V, { bad |= !isfinite(raw); });
    if (block_max((float)bad, shf) > 0.0f) { if (tid == 0) out_ids[r] = -1; return; }

    float lse = 0.0f;
    if (num_lp > 0) {  // the raw log-softmax: its normalizer and the top n tokens, before anything changes
        float m = -VT_INF;
        CHUNK_PASS(0, V, row, { m = fmaxf(m, raw); });
        m = block_max(m, shf);
        float s = 0.0f;
        CHUNK_PASS(0, V, row, { s += expf(raw - m); });
        lse = m + logf(block_sum_f(s, shf));
        int n = num_lp - 1;
        if (n > 0) {
            Filter raw = {1.0f, m, 0.0f, 0u, 0};
            u32 kn = radix_select(row, V, raw, (u64)n, whist, hist256, shx);
            // the n picks: keys above kn, then keys equal to kn in index order (contiguous chunks)
            int chunk = (V + T - 1) / T, lo = tid * chunk, hi = min(V, lo + chunk);
            u64 gt = 0, eq = 0;
            for (int i = lo; i < hi; i++) { u32 k = fkey(row[i]); gt += k > kn; eq += k == kn; }
            u64 gt_off = block_exclusive_scan(gt, shu);
            u64 n_gt = block_sum_u(gt, shu);
            u64 eq_off = block_exclusive_scan(eq, shu);
            for (int i = lo; i < hi; i++) {
                u32 k = fkey(row[i]);
                long long slot = -1;
                if (k > kn) slot = (long long)gt_off++;
                else if (k == kn) { slot = (long long)(n_gt + eq_off); eq_off++; }
                if (slot >= 0 && slot < n) { lp_ids[r * NLP + slot] = i; lp_vals[r * NLP + slot] = row[i]; }
            }
            __syncthreads();
            if (tid == 0) {  // order the n by value, then index (insertion sort of at most 20)
                float* lv = lp_vals + r * NLP;
                long long* li = lp_ids + r * NLP;
                for (int a = 1; a < n; a++) {
                    float v = lv[a]; long long id = li[a]; int b = a - 1;
                    while (b >= 0 && (lv[b] < v || (lv[b] == v && li[b] > id))) {
                        lv[b + 1] = lv[b]; li[b + 1] = li[b]; b--;
                    }
                    lv[b + 1] = v; li[b + 1] = id;
                }
                for (int a = 0; a < n; a++) lv[a] -= lse;
            }
            __syncthreads();
        }
    }

    if (num_bias > 0) {  // vLLM's order: allowed_token_ids, then logit_bias, both before penalties and filters
        const float* bv = bias_vals + (long long)r * W;
        for (int j = tid; j < num_bias; j += T) br[j] = row[bi[j]];
        __syncthreads();
        if (allowed) {
            for (int i = tid; i < V; i += T) row[i] = -VT_INF;
            __syncthreads();
        }
        for (int j = tid; j < num_bias; j += T) row[bi[j]] = __fadd_rn(br[j], bv[j]);
        __syncthreads();
    }
    if (num_hist > 0) {  // penalties: every history token's raw value saved, then one write per distinct token
        for (int j = tid; j < num_hist; j += T) hr[j] = row[h[j]];
        __syncthreads();
        for (int j = tid; j < num_hist; j += T) {
            long long t = h[j];
            bool first = true;
            for (int k = 0; k < j; k++) if (h[k] == t) { first = false; break; }
            if (!first) continue;
            float v = hr[j];
            if (rep != 1.0f) v = v > 0.0f ? __fdiv_rn(v, rep) : __fmul_rn(v, rep);
            int cnt = 0;
            for (int k = num_prompt; k < num_hist; k++) cnt += h[k] == t;
            if (cnt > 0) v = __fsub_rn(v, __fadd_rn(__fmul_rn(freq, (float)cnt), pres));
            row[t] = v;
        }
        __syncthreads();
    }
    if (tid < num_banned) row[ip[NFI + tid]] = -VT_INF;
    __syncthreads();

    int tok;
    if (defer_draw && forced < 0) {  // the split kernels below draw it (or take its argmax): mark it, keep lse for them
        if (tid == 0) { out_ids[r] = -2; if (num_lp > 0) lp_vals[r * NLP + NLP - 1] = lse; }
        return;
    }
    if (forced >= 0) {
        tok = (int)forced;
    } else if (temp == 0.0f) {
        float bv = -VT_INF; int bi = V;
        VEC_ROW_PASS(row, V, { if (raw > bv || (raw == bv && i < bi)) { bv = raw; bi = i; } });
        float mv; block_argmax(bv, bi, shf, shi, &mv, &tok);
    } else {
        tok = draw_block(row, V, fp, ip, shf, shi, shu, hist256, whist, shx);
    }
    if (tid == 0) {
        out_ids[r] = tok;
        if (num_lp > 0 && tok >= 0) {  // the sampled token's raw logit: saved if the penalties changed it
            lp_ids[r * NLP + NLP - 1] = tok;
            lp_vals[r * NLP + NLP - 1] = raw_logit(row, tok, h, hr, num_hist, bi, br, num_bias) - lse;
        }
    }
}


// ---- the split sampler: G blocks per row (gridDim.y: vt/engine/sample/sampler.py's split_blocks), for rows
// vt_sample deferred (out_ids[r] == -2). No result depends on G: every merge is of integers, in block order. ----
// The same draw as vt_sample's, with each pass over the vocabulary shared by the row's blocks: every block counts
// its chunk (a partial max, sum or 256-bin histogram, in `parts`), and the last block of the row to finish (a
// counter per row, back at zero when it is done, so a graph replays it) merges the partials in block order and
// moves the row's state on. Sums are integers: the result never depends on which block finished first.
// state[r]: 0 max (float bits), 1 top-k key, 2 top-p key, 3 total mass, 4 want, 5 prefix, 6 prefix mask.
#define ST(r, i) state[(long long)(r) * 8 + (i)]

// Block g's tokens of a row of V over G blocks: [lo, hi), lo a multiple of 4 (QUAD_PASS's float4 loads).
__device__ __forceinline__ void chunk_bounds(int V, int G, int g, int* lo, int* hi) {
    const int per = ((V + G - 1) / G + 3) & ~3;
    *lo = min(V, g * per);
    *hi = min(V, *lo + per);
}
__device__ __forceinline__ void chunk_of(int V, int* lo, int* hi) { chunk_bounds(V, gridDim.y, blockIdx.y, lo, hi); }

// Thread 0 of the last block of row r to arrive gets true (after every block's partials are visible).
__device__ bool last_block(unsigned int* counters, int r, bool* sh_last) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) *sh_last = atomicAdd(&counters[r], 1u) == gridDim.y - 1;
    __syncthreads();
    if (*sh_last) __threadfence();
    return *sh_last;
}

__device__ __forceinline__ Filter row_filter(const float* fp, const unsigned long long* state, int r, int phase) {
    Filter f;
    f.temp = fp[0];
    f.m = __uint_as_float((u32)ST(r, 0));
    f.min_p = fp[2];
    f.kmin = (u32)(phase >= 2 ? max(ST(r, 1), ST(r, 2)) : ST(r, 1));
    f.weighted = 1;
    return f;
}

extern "C" __global__ void vt_split_max(const float* logits, const float* fparams, const long long* iparams,
                                        const long long* out_ids, unsigned long long* parts,
                                        unsigned long long* state, unsigned int* counters, int V) {
    vt::pdl_entry();
    __shared__ float shf[RED];
    __shared__ bool sh_last;
    const int r = blockIdx.x, G = gridDim.y;
    if (out_ids[r] != -2) return;
    const float* row = logits + (long long)r * V;
    const float temp = fparams[r * NF];
    int lo, hi;
    chunk_of(V, &lo, &hi);
    float m = -VT_INF;
    for (int i = lo + threadIdx.x; i < hi; i += T) m = fmaxf(m, tempered(row, i, temp));
    m = block_max(m, shf);
    if (threadIdx.x == 0) parts[((long long)r * G + blockIdx.y) * 256] = __float_as_uint(m);
    if (!last_block(counters, r, &sh_last) || threadIdx.x != 0) return;
    float best = -VT_INF;
    for (int g = 0; g < G; g++) best = fmaxf(best, __uint_as_float((u32)parts[((long long)r * G + g) * 256]));
    ST(r, 0) = __float_as_uint(best);
    ST(r, 1) = 0; ST(r, 2) = 0; ST(r, 5) = 0; ST(r, 6) = 0;
    ST(r, 4) = (unsigned long long)iparams[r * NI + 2];  // top_k: the first selection's want
    counters[r] = 0;
}

// One 8-bit pass of a radix selection: phase 0 top-k (every token weighs 1), phase 1 top-p (fixed-point masses
// of the top-k survivors that min_p keeps).
extern "C" __global__ void vt_split_radix(const float* logits, const float* fparams, const long long* iparams,
                                          const long long* out_ids, unsigned long long* parts,
                                          unsigned long long* state, unsigned int* counters, int V, int shift,
                                          int phase) {
    vt::pdl_entry();
    __shared__ u64 whist[WARPS * 256];
    __shared__ bool sh_last;
    const int r = blockIdx.x, G = gridDim.y;
    if (out_ids[r] != -2) return;
    const float* fp = fparams + r * NF;
    const long long top_k = iparams[r * NI + 2];
    if (phase == 0 ? !(top_k > 0 && top_k < V) : !(fp[1] < 1.0f)) return;
    const float* row = logits + (long long)r * V;
    Filter f = row_filter(fp, state, r, 1);
    f.weighted = phase;
    const u32 prefix = (u32)ST(r, 5), pmask = (u32)ST(r, 6);
    for (int b = threadIdx.x; b < WARPS * 256; b += T) whist[b] = 0;
    __syncthreads();
    u64* mine = whist + (threadIdx.x / 32) * 256;
    int lo, hi;
    chunk_of(V, &lo, &hi);
    for (int i = lo + threadIdx.x; i < hi; i += T) {
        u32 k; u64 w = weight(row, i, f, &k);
        if (w && (k & pmask) == prefix) atomicAdd(&mine[(k >> shift) & 255u], w);
    }
    __syncthreads();
    u64* out = parts + ((long long)r * G + blockIdx.y) * 256;
    for (int b = threadIdx.x; b < 256; b += T) {
        u64 t = 0;
        for (int w = 0; w < WARPS; w++) t += whist[w * 256 + b];
        out[b] = t;
    }
    if (!last_block(counters, r, &sh_last)) return;
    u64* merged = whist;  // the last block's threads merge a bin each (one thread alone took ~100 us a pass)
    for (int b = threadIdx.x; b < 256; b += T) {
        u64 h = 0;
        for (int g = 0; g < G; g++) h += parts[((long long)r * G + g) * 256 + b];  // block order
        merged[b] = h;
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    u64 want = ST(r, 4);
    u32 sel = 0;
    for (int b = 255; b >= 0; b--) {
        if (merged[b] >= want) { sel = (u32)b; break; }
        want -= merged[b];
    }
    const u32 key = prefix | (sel << shift);
    if (shift == 0) {
        ST(r, phase == 0 ? 1 : 2) = key;
        ST(r, 5) = 0; ST(r, 6) = 0;
    } else {
        ST(r, 4) = want; ST(r, 5) = key; ST(r, 6) = pmask | (255u << shift);
    }
    counters[r] = 0;
}

// The row's total mass: phase 1 over the top-k survivors min_p keeps (and, with top-p, the first selection's want),
// phase 2 over what top-p keeps too. Each block's sum stays in psum for the draw.
extern "C" __global__ void vt_split_sum(const float* logits, const float* fparams, const long long* out_ids,
                                        unsigned long long* psum, unsigned long long* state,
                                        unsigned int* counters, int V, int phase) {
    vt::pdl_entry();
    __shared__ u64 shu[RED];
    __shared__ bool sh_last;
    const int r = blockIdx.x, G = gridDim.y;
    if (out_ids[r] != -2) return;
    const float* fp = fparams + r * NF;
    if (phase == 2 && !(fp[1] < 1.0f)) return;
    const float* row = logits + (long long)r * V;
    const Filter f = row_filter(fp, state, r, phase);
    int lo, hi;
    chunk_of(V, &lo, &hi);
    u64 z = 0; u32 k;
    for (int i = lo + threadIdx.x; i < hi; i += T) z += weight(row, i, f, &k);
    z = block_sum_u(z, shu);
    if (threadIdx.x == 0) psum[(long long)r * G + blockIdx.y] = z;
    if (!last_block(counters, r, &sh_last) || threadIdx.x != 0) return;
    u64 total = 0;
    for (int g = 0; g < G; g++) total += psum[(long long)r * G + g];
    ST(r, 3) = total;
    if (phase == 1) ST(r, 4) = max(1ull, (u64)((double)fp[1] * (double)total));  // top-p's want: one unit at least
    counters[r] = 0;
}

// A deferred row's token, and its raw logprob when asked (lse was kept in its slot by vt_sample; the raw logit is
// the one saved before penalties and bias changed it). One thread.
__device__ void finish_row(int r, int tok, const float* row, const long long* ip, const long long* hist,
                           const float* hist_raw, const long long* bias_ids, const float* bias_raw, long long* out_ids,
                           float* lp_vals, long long* lp_ids, int L, int W) {
    out_ids[r] = tok;
    const int num_lp = (int)ip[5], num_hist = (int)ip[4], num_bias = (int)ip[8];
    if (num_lp > 0 && tok >= 0) {
        const float raw = raw_logit(row, tok, hist + (long long)r * L, hist_raw + (long long)r * L, num_hist,
                                    bias_ids + (long long)r * W, bias_raw + (long long)r * W, num_bias);
        lp_ids[r * NLP + NLP - 1] = tok;
        lp_vals[r * NLP + NLP - 1] = raw - lp_vals[r * NLP + NLP - 1];
    }
}

// The draw: the block whose chunk holds the target finds the token, as vt_sample does within a row.
extern "C" __global__ void vt_split_draw(const float* logits, const float* fparams, const long long* iparams,
                                         const long long* hist, const float* hist_raw, const long long* bias_ids,
                                         const float* bias_raw, long long* out_ids, float* lp_vals,
                                         long long* lp_ids, const unsigned long long* psum,
                                         const unsigned long long* state, int V, int L, int W) {
    vt::pdl_entry();
    __shared__ u64 shu[RED];
    __shared__ int found;
    const int r = blockIdx.x, G = gridDim.y;
    if (out_ids[r] != -2) return;
    const float* fp = fparams + r * NF;
    const long long* ip = iparams + r * NI;
    const float* row = logits + (long long)r * V;
    const Filter f = row_filter(fp, state, r, 2);
    const u64 z = ST(r, 3);
    const u64 target = draw_target((u64)ip[0], (u64)ip[1], z);
    u64 pre = 0;
    for (int g = 0; g < (int)blockIdx.y; g++) pre += psum[(long long)r * G + g];
    const u64 mine = psum[(long long)r * G + blockIdx.y];
    const bool last_chunk = blockIdx.y == G - 1;
    // (the block that finds the token writes out_ids[r] while others may still read it above: they return
    // either way, since only one block's chunk holds the target)
    if (!(target >= pre && target < pre + mine) && !(last_chunk && target >= pre + mine)) return;
    int lo, hi;
    chunk_of(V, &lo, &hi);
    const int tok = draw_in(row, lo, hi, f, pre, target, V - 1, shu, &found);
    if (threadIdx.x == 0) finish_row(r, tok, row, ip, hist, hist_raw, bias_ids, bias_raw, out_ids, lp_vals, lp_ids, L, W);
}


// ---- the candidate sampler (issue 29): two launches draw what the passes above draw, for the rows that need no
// selection over the whole vocabulary. Rows the split kernels above still draw: top-k above KMAX, top-p without
// top-k (launched only when a step has such a row; see backends/kernels/sampler.py).
//
// vt_cand_scan, SPLIT blocks per row (a row of temperature alone is vt_cand_mass's alone): each block reads its
// chunk: the row's max (tempered), whether a plain row's logits are finite, and for a row with top_k <= KMAX its
// candidates. The block's bound is the k-th largest of its
// threads' own largest keys: k tokens of the block reach it, so the row's k-th largest key does too. The block keeps
// every token that reaches its bound (at most CAND_CAP, in parts[r, g, 8:]). The row's last block merges those that
// reach the largest bound: every token of the row that reaches it, so every token of the support (keys >= the k-th,
// ties kept); top-p, min-p and the draw run on those few. A block with more than CAND_CAP tokens at its bound (a
// row of equal logits) sends the row to the one-block draw. Integer masses: no result depends on the block order.
#define KMAX 32
#define CAND_CAP 248
#define SUPPORT_CAP T
// parts[r, g, 0..5]: max (float bits; a greedy row's largest logit), bad, candidates, the block's bound, a greedy
// row's argmax, overflow; 6 and 7 unused; the candidates from 8
#define PART(r, g, i) parts[((long long)(r) * gridDim.y + (g)) * 256 + (i)]

__device__ __forceinline__ bool fast_topk(long long top_k, int V) { return top_k > 0 && top_k < V && top_k <= KMAX; }
__device__ __forceinline__ u32 cand_key(u64 v) { return (u32)(v >> 32); }
__device__ __forceinline__ int cand_index(u64 v) { return (int)(~(u32)v); }
// larger key first, then the lower index: one order over distinct tokens (0 is no candidate)
__device__ __forceinline__ u64 cand_pack(u32 key, int i) { return ((u64)key << 32) | (u64)(~(u32)i); }

// The k-th largest of the packed values vals[0:n] (0 when fewer than k), by rank: each thread counts what beats its own.
__device__ u64 kth_largest(const u64* vals, int n, int k, u64* sh) {
    if (threadIdx.x == 0) sh[0] = 0;
    __syncthreads();
    for (int p = threadIdx.x; p < n; p += T) {
        const u64 v = vals[p];
        int rank = 0;
        for (int q = 0; q < n; q++) rank += vals[q] > v;
        if (rank == k - 1) sh[0] = v;
    }
    __syncthreads();
    const u64 r = sh[0];
    __syncthreads();
    return r;
}

// keys[0:T] in descending order (bitonic, every thread of the block)
__device__ void sort_desc(u32* keys) {
    for (int size = 2; size <= T; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            const int i = threadIdx.x, j = i ^ stride;
            if (j > i) {
                const u32 a = keys[i], b = keys[j];
                if (((i & size) == 0) == (a < b)) { keys[i] = b; keys[j] = a; }
            }
            __syncthreads();
        }
    }
}

// Warp 0 merges the row's G block partials (lane l taking blocks l, l + 32, ...; shuffles across the lanes) into
// shf[0] (the max; a greedy row's largest logit), shi[0] (a greedy row's argmax), shi[1] (a raw logit not finite),
// shi[2] (a block's candidates overflowed) and *bound (the largest block bound): one load's latency (every thread
// walking the G blocks in turn paid G of them, twice). Every thread of the block calls it.
__device__ void merge_blocks(const unsigned long long* parts, int r, int V, bool greedy, bool fast, float* shf,
                             int* shi, u32* bound) {
    const int tid = threadIdx.x, G = gridDim.y;
    if (tid < 32) {
        float v = -VT_INF;
        int at = V, nbad = 0, over = 0;
        u32 bnd = 0;
        for (int g = tid; g < G; g += 32) {
            const float bm = __uint_as_float((u32)PART(r, g, 0));
            if (greedy) argmax_step(v, at, bm, (int)PART(r, g, 4));
            else v = fmaxf(v, bm);
            nbad |= (int)PART(r, g, 1);
            if (fast) { bnd = max(bnd, (u32)PART(r, g, 3)); over |= (int)PART(r, g, 5); }
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, v, o);
            const int oi = __shfl_xor_sync(0xffffffffu, at, o);
            if (greedy) argmax_step(v, at, ov, oi);
            else v = fmaxf(v, ov);
            bnd = max(bnd, __shfl_xor_sync(0xffffffffu, bnd, o));
        }
        nbad = __any_sync(0xffffffffu, nbad);
        over = __any_sync(0xffffffffu, over);
        if (tid == 0) { shf[0] = v; shi[0] = at; shi[1] = nbad; shi[2] = over; *bound = bnd; }
    }
    __syncthreads();
}

// The plain-mass draw (rows with neither top-k nor top-p, with min-p: temperature alone is gumbel_draw's), in two
// steps. First every warp of every block sums the masses (under the row's max) of a contiguous sixteenth of its
// block's chunk, into MASS(r, g WARPS + warp) (a row's row_slots of parts, whatever the launch's blocks a row: vt_cand_mass takes more
// than vt_cand_scan at small batches); then the row's last block finds the sixteenth that holds the target and
// draws in it alone.
#define MASS(r, j) parts[(long long)(r) * row_slots + (j)]
__device__ void mass_partials(const float* row, int V, int r, const Filter& f, unsigned long long* parts,
                              int row_slots) {
    const int tid = threadIdx.x;
    int lo, hi, sa, sb;
    chunk_of(V, &lo, &hi);
    sixteenth(lo, hi, tid >> 5, &sa, &sb);
    u64 z = 0; u32 k;
    WARP_QUAD_PASS(sa, sb, row, { z += weight_of(__fdiv_rn(raw, f.temp), f, &k); })
    for (int o = 16; o > 0; o >>= 1) z += __shfl_xor_sync(0xffffffffu, z, o);
    if ((tid & 31) == 0) MASS(r, blockIdx.y * WARPS + (tid >> 5)) = z;
}

// The row's last block: the G * WARPS sums in token order (block, then warp), a run of them a thread.
__device__ int mass_draw(const float* row, int V, int r, const Filter& f, const long long* ip,
                         const unsigned long long* parts, int row_slots, u64* shu, int* found, int* sh_seg,
                         u64* sh_pre) {
    const int tid = threadIdx.x, G = gridDim.y;
    const int N = G * WARPS, per = (N + T - 1) / T, a = min(N, tid * per), b = min(N, a + per);
    u64 s = 0;
    for (int j = a; j < b; j++) s += MASS(r, j);
    u64 total;  // integers: block order or not, the same total
    u64 acc = block_exclusive_scan(s, shu, &total);
    const u64 target = draw_target((u64)ip[0], (u64)ip[1], total);
    if (tid == 0) *sh_seg = -1;
    __syncthreads();
    if (target >= acc && target < acc + s) {
        for (int j = a; j < b; j++) {
            const u64 v = MASS(r, j);
            if (target < acc + v) { *sh_seg = j; *sh_pre = acc; break; }
            acc += v;
        }
    }
    __syncthreads();
    int lo, hi, ta = 0, tb = 0;  // no sixteenth holds it (none does, for integers below the total): the fallback token
    if (*sh_seg >= 0) {
        chunk_bounds(V, G, *sh_seg / WARPS, &lo, &hi);
        sixteenth(lo, hi, *sh_seg % WARPS, &ta, &tb);
    }
    return draw_in(row, ta, tb, f, *sh_seg >= 0 ? *sh_pre : 0ull, target, V - 1, shu, found);
}

extern "C" __global__ void vt_cand_scan(const float* logits, const float* fparams, const long long* iparams,
                                        const long long* hist, const float* hist_raw, const long long* bias_ids,
                                        const float* bias_raw, long long* out_ids, float* lp_vals, long long* lp_ids,
                                        unsigned long long* parts, unsigned long long* state, unsigned int* counters,
                                        int V, int L, int W) {
    vt::pdl_entry();
    __shared__ float shf[RED];
    __shared__ int shi[RED];
    __shared__ u64 shu[RED];
    __shared__ u64 hist256[256];
    __shared__ u64 whist[WARPS * 256];  // the one-block draw's histograms, or the merged candidates
    __shared__ u64 sup[SUPPORT_CAP];
    __shared__ u32 tkeys[T];
    __shared__ u64 shx[2];
    __shared__ u32 sh_bound;
    __shared__ int sh_count;
    __shared__ bool sh_last;
    const int r = blockIdx.x, G = gridDim.y, tid = threadIdx.x;
    if (out_ids[r] != -2) return;
    const float* row = logits + (long long)r * V;
    const float* fp = fparams + r * NF;
    const long long* ip = iparams + r * NI;
    const float temp = fp[0];
    const long long top_k = ip[2];
    const bool greedy = temp == 0.0f, plain = plain_row(ip), fast = !greedy && fast_topk(top_k, V);
    if (gumbel_row(fp, ip, V)) return;  // vt_cand_mass's gumbel_draw checks and draws it in one pass
    int lo, hi;
    chunk_of(V, &lo, &hi);

    float m = -VT_INF;
    int bad = 0, at = V;
    if (greedy) {  // the argmax (lowest index among equal largest logits), untempered
        QUAD_PASS(lo, hi, row, {
            if (plain) bad |= !isfinite(raw);
            argmax_step(m, at, raw, i);
        })
        block_argmax(m, at, shf, shi, &m, &at);
    } else {
        QUAD_PASS(lo, hi, row, {
            if (plain) bad |= !isfinite(raw);
            m = fmaxf(m, __fdiv_rn(raw, temp));  // this thread's largest: its key is the largest of its keys
        })
        if (fast) tkeys[tid] = lo + 4 * tid < hi ? fkey(m) : 0u;
        m = block_max(m, shf);
    }
    bad = __syncthreads_or(bad);
    if (tid == 0) {
        PART(r, blockIdx.y, 0) = __float_as_uint(m); PART(r, blockIdx.y, 1) = bad; PART(r, blockIdx.y, 4) = at;
    }
    if (fast) {
        if (tid == 0) sh_count = 0;
        sort_desc(tkeys);
        const u32 bound = tkeys[top_k - 1];  // k threads' largest keys reach it (0: fewer than k threads hold tokens)
        QUAD_PASS(lo, hi, row, {
            const u32 k = fkey(__fdiv_rn(raw, temp));
            if (k >= bound) {
                const int slot = atomicAdd(&sh_count, 1);
                if (slot < CAND_CAP) PART(r, blockIdx.y, 8 + slot) = cand_pack(k, i);
            }
        })
        __syncthreads();
        if (tid == 0) {
            PART(r, blockIdx.y, 2) = min(sh_count, CAND_CAP);
            PART(r, blockIdx.y, 3) = bound;
            PART(r, blockIdx.y, 5) = sh_count > CAND_CAP;
        }
    }
    if (!last_block(counters, r, &sh_last)) return;

    // ---- the row's last block
    merge_blocks(parts, r, V, greedy, fast, shf, shi, &sh_bound);
    const float mm = shf[0];
    const int mat = shi[0], any_bad = shi[1];
    // A row fails (-1) when its raw logits held a NaN or an infinity, or when a drawn row's tempered maximum is not
    // finite (a penalty pushed a logit past float32's range): its masses would be NaN, as the reference finds.
    const bool fails = any_bad || (!greedy && !isfinite(mm));
    __syncthreads();
    if (tid == 0) {
        counters[r] = 0;
        ST(r, 0) = __float_as_uint(mm);
        if (fails) out_ids[r] = -1;
        else if (greedy) finish_row(r, mat, row, ip, hist, hist_raw, bias_ids, bias_raw, out_ids, lp_vals, lp_ids, L, W);
    }
    if (fails || !fast) return;  // a failed row samples -1; the others draw in the next kernels
    const u32 bound = sh_bound;
    int overflow = shi[2];
    if (tid == 0) sh_count = 0;
    __syncthreads();
    u64* merged = whist;
    for (int g = tid >> 5; g < G; g += WARPS) {  // a warp a block: its candidates' loads at once, not block by block
        const int n = (int)PART(r, g, 2);
        for (int p = tid & 31; p < n; p += 32) {
            const u64 v = PART(r, g, 8 + p);
            if (cand_key(v) >= bound) {
                const int slot = atomicAdd(&sh_count, 1);
                if (slot < WARPS * 256) merged[slot] = v;  // more (many blocks of ties): the one-block draw below
            }
        }
    }
    __syncthreads();
    overflow |= sh_count > WARPS * 256;
    const int n = min(sh_count, WARPS * 256);
    const u32 kth = cand_key(kth_largest(merged, n, (int)top_k, hist256));
    int support = 0;
    for (int p = tid; p < n; p += T) support += cand_key(merged[p]) >= kth;
    support = (int)block_sum_u((u64)support, shu);
    int tok;
    if (overflow || support > SUPPORT_CAP) {
        tok = draw_block(row, V, fp, ip, shf, shi, shu, hist256, whist, shx);
    } else {
        // the support, one token a thread: (key, index) and its mass; then top-p and the draw over it
        if (tid == 0) sh_count = 0;
        __syncthreads();
        for (int p = tid; p < n; p += T)
            if (cand_key(merged[p]) >= kth) sup[atomicAdd(&sh_count, 1)] = merged[p];
        __syncthreads();
        u64* mass = whist;  // the merged candidates are no longer read
        Filter f = {temp, mm, fp[2], kth, 1};
        u32 kk;
        const bool mine = tid < support;
        const u32 key = mine ? cand_key(sup[tid]) : 0u;
        const int idx = mine ? cand_index(sup[tid]) : V;
        u64 w = mine ? weight(row, idx, f, &kk) : 0ull;
        mass[tid] = w;
        u64 z = block_sum_u(w, shu);
        if (fp[1] < 1.0f) {  // top-p: the largest key whose kept mass (of keys >= it) reaches the want
            const u64 want = max(1ull, (u64)((double)fp[1] * (double)z));
            if (tid == 0) sh_bound = 0;
            __syncthreads();
            if (mine) {
                u64 above = 0;
                for (int q = 0; q < support; q++) above += cand_key(sup[q]) >= key ? mass[q] : 0ull;
                if (above >= want) atomicMax(&sh_bound, key);
            }
            __syncthreads();
            if (key < sh_bound) w = 0;
            __syncthreads();
            mass[tid] = w;
            z = block_sum_u(w, shu);
        }
        const u64 target = draw_target((u64)ip[0], (u64)ip[1], z);
        if (tid == 0) shi[0] = V - 1;
        __syncthreads();
        if (w) {  // inverse CDF in index order: the token whose [mass of lower indices, + its own) holds the target
            u64 below = 0;
            for (int q = 0; q < support; q++) below += cand_index(sup[q]) < idx ? mass[q] : 0ull;
            if (target >= below && target < below + w) shi[0] = idx;
        }
        __syncthreads();
        tok = shi[0];
    }
    if (tid == 0) finish_row(r, tok, row, ip, hist, hist_raw, bias_ids, bias_raw, out_ids, lp_vals, lp_ids, L, W);
}

// A Gumbel row's draw over the launch's blocks, its checks too (vt_cand_scan passes such a row over): each block
// puts its chunk's largest score and its token, its largest tempered logit and whether a plain row's raw logits hold
// a NaN or an infinity in MASS(r, 4 g .. 4 g + 3); the row's last block merges them (a total order over (score,
// index): no result depends on the blocks a row gets or the order they finish in). The row fails (-1) as a filtered
// row does: a raw logit not finite, or a tempered maximum that is not (a penalty pushed a logit past float32's
// range). Every thread of the block; the token is the last block's, -2 (not yet drawn) in the others.
__device__ int gumbel_draw(const float* row, int V, int r, const float* fp, const long long* ip,
                           unsigned long long* parts, int row_slots, unsigned int* counters, float* shf, int* shi,
                           bool* sh_last) {
    const int tid = threadIdx.x, G = gridDim.y;
    const u32 key = gumbel_key(ip);
    const float rtemp = __fdiv_rn(1.0f, fp[0]);  // a multiply a token, not a division (the reference's too)
    const bool plain = plain_row(ip);
    int lo, hi;
    chunk_of(V, &lo, &hi);
    float best = -VT_INF, m = -VT_INF;
    int at = V, bad = 0;
    __shared__ int thr;
    gumbel_start(&thr);
    QUAD_PASS(lo, hi, row, {
        if (plain) bad |= !isfinite(raw);
        const float x = __fmul_rn(raw, rtemp);
        m = fmaxf(m, x);
        gumbel_step(best, at, &thr, x, key, i);
    })
    bad = __syncthreads_or(bad);
    m = block_max(m, shf);
    block_argmax(best, at, shf, shi, &best, &at);
    if (tid == 0) {
        MASS(r, 4 * blockIdx.y) = __float_as_uint(best); MASS(r, 4 * blockIdx.y + 1) = (u64)at;
        MASS(r, 4 * blockIdx.y + 2) = __float_as_uint(m); MASS(r, 4 * blockIdx.y + 3) = (u64)bad;
    }
    if (!last_block(counters, r, sh_last)) return -2;
    if (tid < 32) {
        float v = -VT_INF, mm = -VT_INF;
        int tok = V, nbad = 0;
        for (int g = tid; g < G; g += 32) {
            argmax_step(v, tok, __uint_as_float((u32)MASS(r, 4 * g)), (int)MASS(r, 4 * g + 1));
            mm = fmaxf(mm, __uint_as_float((u32)MASS(r, 4 * g + 2)));
            nbad |= (int)MASS(r, 4 * g + 3);
        }
        for (int o = 16; o > 0; o >>= 1) {
            argmax_step(v, tok, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, tok, o));
            mm = fmaxf(mm, __shfl_xor_sync(0xffffffffu, mm, o));
        }
        nbad = __any_sync(0xffffffffu, nbad);
        if (tid == 0) shi[0] = nbad || !isfinite(mm) ? -1 : tok;
    }
    __syncthreads();
    return shi[0];
}

// vt_cand_mass, its own blocks per row (gridDim.y; G WARPS <= row_slots, the slots of a row in parts): the rows with
// neither top-k nor top-p. Temperature alone: gumbel_draw. With min-p: mass_partials, then the row's last block's
// mass_draw. (Drawing them in vt_cand_scan instead, its blocks waiting for each other's maxima in a row barrier where
// the grid fits the SMs, measured slower on the H200: temperature at B = 1 27.6-28.3 us against 26.1.)
extern "C" __global__ void vt_cand_mass(const float* logits, const float* fparams, const long long* iparams,
                                        const long long* hist, const float* hist_raw, const long long* bias_ids,
                                        const float* bias_raw, long long* out_ids, float* lp_vals, long long* lp_ids,
                                        unsigned long long* parts, unsigned long long* state, unsigned int* counters,
                                        int V, int L, int W, int row_slots) {
    vt::pdl_entry();
    __shared__ u64 shu[RED];
    __shared__ float shf[RED];
    __shared__ int shi[RED];
    __shared__ int found, sh_seg;
    __shared__ u64 sh_pre;
    __shared__ bool sh_last;
    const int r = blockIdx.x, tid = threadIdx.x;
    if (out_ids[r] != -2) return;
    const float* fp = fparams + r * NF;
    const long long* ip = iparams + r * NI;
    const long long top_k = ip[2];
    if ((top_k > 0 && top_k < V) || fp[1] < 1.0f) return;  // the split kernels draw it
    const float* row = logits + (long long)r * V;
    if (gumbel_row(fp, ip, V)) {
        const int tok = gumbel_draw(row, V, r, fp, ip, parts, row_slots, counters, shf, shi, &sh_last);
        if (tid == 0 && tok != -2) {
            counters[r] = 0;
            finish_row(r, tok, row, ip, hist, hist_raw, bias_ids, bias_raw, out_ids, lp_vals, lp_ids, L, W);
        }
        return;
    }
    const Filter f = {fp[0], __uint_as_float((u32)ST(r, 0)), fp[2], 0u, 1};
    mass_partials(row, V, r, f, parts, row_slots);
    if (!last_block(counters, r, &sh_last)) return;
    const int tok = mass_draw(row, V, r, f, ip, parts, row_slots, shu, &found, &sh_seg, &sh_pre);
    if (tid == 0) {
        counters[r] = 0;
        finish_row(r, tok, row, ip, hist, hist_raw, bias_ids, bias_raw, out_ids, lp_vals, lp_ids, L, W);
    }
}

// The GPU lane's exhaustive check of gumbel_bound (tests/engine/test_split_sampler.py): for every 23-bit k, the
// uniform (2 k + 1) / 2**24 that gumbel_uniform builds, its exact noise and its bound.
extern "C" __global__ void vt_gumbel_bounds(float* noise, float* bound) {
    vt::pdl_entry();
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= (1 << 23)) return;
    const float u = uniform_of((u32)k);
    noise[k] = gumbel_noise(u);
    bound[k] = gumbel_bound(u);
}
