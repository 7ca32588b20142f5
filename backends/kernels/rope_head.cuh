// One q or k head of one token of the fused qkv projection, held by one warp (element d = lane + 32 j), through
// its RMSNorm and rotary, in place: rotary.cu's qk_norm_rope_store runs it a warp per head, the decode attention's
// rope variant (decode_attention.cu) a warp per head its block needs. One body, so the two agree bit for bit.
#pragma once
#include "common.cuh"

namespace vt {

template <int HD>
__host__ __device__ constexpr int rope_per_lane() { return HD >= 32 ? HD / 32 : 1; }

// v: the head's projection with its bias added. w_row: the head's norm weight (a q row carries the attention
// scale); cos_sin: the token's row of the rope table (cos, then sin with rotate_half's sign folded in). Lanes past
// HD (HD < 32) hold zeros.
template <int HD>
__device__ __forceinline__ void norm_rope_head(float (&v)[rope_per_lane<HD>()], const float* __restrict__ w_row,
                                               const float* __restrict__ cos_sin, int has_norm, float eps) {
    // rotate_half's partner d +- HD/2: in the same lane when a lane holds an even count, else HD/2 lanes away
    static_assert(HD % 64 == 0 || (HD <= 32 && (HD & (HD - 1)) == 0), "a head dim rotate_half can pair");
    constexpr int PER = rope_per_lane<HD>();
    const int lane = threadIdx.x & 31;
    const bool live = HD >= 32 || lane < HD;
    if (has_norm) {
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < PER; j++) ss += v[j] * v[j];
        const float denom = sqrtf(warp_sum(ss) / (float)HD + eps);
#pragma unroll
        for (int j = 0; j < PER; j++) v[j] = live ? v[j] / denom * w_row[lane + 32 * j] : 0.0f;
    } else {
#pragma unroll
        for (int j = 0; j < PER; j++) v[j] = live ? v[j] * w_row[lane + 32 * j] : 0.0f;
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
        v[j] = live ? v[j] * cos_sin[d] + rot[j] * cos_sin[HD + d] : 0.0f;
    }
}

// Head h's HD values of token t's row of qkv [T, heads HD] (+ bias [heads HD] or null), a lane's d = lane + 32 j.
template <int HD>
__device__ __forceinline__ void load_head(float (&v)[rope_per_lane<HD>()], const float* __restrict__ qkv,
                                          const float* __restrict__ bias, i64 t, int heads, int h) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < rope_per_lane<HD>(); j++) {
        const i64 c = (i64)h * HD + lane + 32 * j;
        v[j] = HD >= 32 || lane < HD ? qkv[t * heads * HD + c] + (bias != nullptr ? bias[c] : 0.0f) : 0.0f;
    }
}

}  // namespace vt
