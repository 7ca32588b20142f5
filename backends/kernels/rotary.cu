// q/k RMSNorm + rotary + the KV-cache write, in one pass over the fused qkv projection: one warp per head
// of one token. q leaves in float32 for the attention; k (normed, rotated) and v go straight into the paged
// cache at the token's slot, narrowed to the cache dtype. A token whose slot is -1 (a padding row) writes
// nothing to the cache. The rope table holds, per position, cos then sin with rotate_half's sign folded in;
// the rope variant (default, llama3, YaRN with its attention factor) lives entirely in that table.
#include "rope_head.cuh"

namespace vt {

// qkv [T, (nh + 2 nkv) HD] float32; bias [(nh + 2 nkv) HD] or null; w [nh + nkv, HD] (q's rows carry the
// attention scale); rope [positions, 2 HD]; q_out [T, nh, HD]; caches [blocks, block_size, nkv, HD] with
// slots numbered block * block_size + offset. Grid (T, ceil(heads / warps)): a warp per head, so even one
// token's heads spread over many SMs.
template <typename KV, int HD>
__global__ void qk_norm_rope_store(const float* __restrict__ qkv, const float* __restrict__ bias,
                                   const float* __restrict__ w, const float* __restrict__ rope,
                                   const i64* __restrict__ positions, const i64* __restrict__ slots,
                                   KV* __restrict__ k_cache, KV* __restrict__ v_cache, float* __restrict__ q_out,
                                   int nh, int nkv, int has_norm, float eps) {
    vt::pdl_entry();
    constexpr int PER = rope_per_lane<HD>();
    const int lane = threadIdx.x & 31;
    const bool live = HD >= 32 || lane < HD;
    const i64 t = blockIdx.x;
    const int heads = nh + 2 * nkv;
    const i64 slot = slots[t];
    const int h = blockIdx.y * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (h >= heads) return;
    float v[PER];
    load_head<HD>(v, qkv, bias, t, heads, h);
    if (h >= nh + nkv) {  // a value head: into the cache as it is
        if (slot >= 0 && live) {
#pragma unroll
            for (int j = 0; j < PER; j++)
                v_cache[(slot * nkv + (h - nh - nkv)) * HD + lane + 32 * j] = from_f32<KV>(v[j]);
        }
        return;
    }
    norm_rope_head<HD>(v, w + h * HD, rope + positions[t] * (2 * HD), has_norm, eps);
#pragma unroll
    for (int j = 0; j < PER; j++) {
        const int d = lane + 32 * j;
        if (!live) continue;
        if (h < nh) q_out[(t * nh + h) * HD + d] = v[j];
        else if (slot >= 0) k_cache[(slot * nkv + (h - nh)) * HD + d] = from_f32<KV>(v[j]);
    }
}

}  // namespace vt
