// One head of one token of the fused qkv projection, held by one warp (element d = lane + 32 j), through q/k
// RMSNorm + rotary + the KV-cache write: rotary.cu's qk_norm_rope_store runs it a warp per head, the skinny GEMM's
// rope epilogue (skinny_gemm.cu) a warp per token of the head its column tile computed. One body, so the two agree
// bit for bit. v holds the head's projection with its bias added; h numbers q heads, then k heads, then v heads.
#include "common.cuh"

namespace vt {

template <int HD>
__host__ __device__ constexpr int rope_per_lane() { return HD >= 32 ? HD / 32 : 1; }

// w [nh + nkv, HD] (q's rows carry the attention scale); cos_sin the token's row of the rope table (cos, then sin
// with rotate_half's sign folded in); q_out [T, nh, HD] float32; caches [blocks, block_size, nkv, HD] at `slot`
// (-1: a padding row, nothing written). Lanes past HD (HD < 32) hold zeros and write nothing.
template <typename KV, int HD>
__device__ __forceinline__ void qk_norm_rope_store_head(float (&v)[rope_per_lane<HD>()], int h, i64 t,
                                                        const float* __restrict__ w,
                                                        const float* __restrict__ cos_sin, i64 slot,
                                                        KV* __restrict__ k_cache, KV* __restrict__ v_cache,
                                                        float* __restrict__ q_out, int nh, int nkv, int has_norm,
                                                        float eps) {
    // rotate_half's partner d +- HD/2: in the same lane when a lane holds an even count, else HD/2 lanes away
    static_assert(HD % 64 == 0 || (HD <= 32 && (HD & (HD - 1)) == 0), "a head dim rotate_half can pair");
    constexpr int PER = rope_per_lane<HD>();
    const int lane = threadIdx.x & 31;
    const bool live = HD >= 32 || lane < HD;
    if (h >= nh + nkv) {  // a value head: into the cache as it is
        if (slot >= 0 && live) {
#pragma unroll
            for (int j = 0; j < PER; j++)
                v_cache[(slot * nkv + (h - nh - nkv)) * HD + lane + 32 * j] = from_f32<KV>(v[j]);
        }
        return;
    }
    if (has_norm) {
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < PER; j++) ss += v[j] * v[j];
        const float denom = sqrtf(warp_sum(ss) / (float)HD + eps);
#pragma unroll
        for (int j = 0; j < PER; j++) v[j] = live ? v[j] / denom * w[h * HD + lane + 32 * j] : 0.0f;
    } else {
#pragma unroll
        for (int j = 0; j < PER; j++) v[j] = live ? v[j] * w[h * HD + lane + 32 * j] : 0.0f;
    }
    // rotate_half: element d pairs with d +- HD/2, in the same lane (HD >= 64) or across lanes (HD <= 32).
    float rot[PER];
#pragma unroll
    for (int j = 0; j < PER; j++) {
        if constexpr (HD >= 64) rot[j] = v[(j + PER / 2) % PER];
        else rot[j] = __shfl_xor_sync(0xffffffffu, v[j], HD / 2);
    }
#pragma unroll
    for (int j = 0; j < PER; j++) {
        const int d = lane + 32 * j;
        if (!live) continue;
        const float r = v[j] * cos_sin[d] + rot[j] * cos_sin[HD + d];
        if (h < nh) q_out[(t * nh + h) * HD + d] = r;
        else if (slot >= 0) k_cache[(slot * nkv + (h - nh)) * HD + d] = from_f32<KV>(r);
    }
}

}  // namespace vt
