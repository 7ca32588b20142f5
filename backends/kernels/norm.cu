// The residual stream's kernels: the embedding gather, and residual add + RMSNorm with the normed row
// narrowed to the next GEMM's operand dtype as it is written (no cast kernel, no float32 copy).
#include "common.cuh"

namespace vt {

// out[t, :] = table[ids[t], :] widened to float32. Grid: one block per token.
template <typename W>
__global__ void embed(const W* __restrict__ table, const i64* __restrict__ ids, float* __restrict__ out, int H) {
    vt::pdl_entry();
    const i64 t = blockIdx.x;
    const W* row = table + ids[t] * (i64)H;
    for (int i = threadIdx.x; i < H; i += blockDim.x) out[t * H + i] = to_f32(row[i]);
}

// x [T, H] float32, the residual stream: with delta, x += delta (+ bias) in place first.
// out [T, H] = narrow(x / sqrt(mean(x^2) + eps) * w), HF's RMSNorm in float32. Grid: one block per row
// (common.cuh's add_rms_norm_row). H % 4 == 0.
template <typename OUT>
__global__ void add_rms_norm(float* __restrict__ x, const float* __restrict__ delta, const float* __restrict__ bias,
                             const float* __restrict__ w, OUT* __restrict__ out, int H, float eps) {
    vt::pdl_entry();
    __shared__ float scratch[32];
    const i64 row = blockIdx.x;
    const float4* d4 = reinterpret_cast<const float4*>(delta + row * H);
    const float4* b4 = reinterpret_cast<const float4*>(bias);
    add_rms_norm_row(x + row * H, delta != nullptr, [&](int i) {
        float4 d = d4[i];
        if (bias != nullptr) {
            const float4 b = b4[i];
            d.x += b.x; d.y += b.y; d.z += b.z; d.w += b.w;
        }
        return d;
    }, w, out + row * H, H, eps, scratch);
}

}  // namespace vt
