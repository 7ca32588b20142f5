// The residual stream's kernels: the embedding gather, and residual add + RMSNorm with the normed row
// narrowed to the next GEMM's operand dtype as it is written (no cast kernel, no float32 copy).
#include "common.cuh"

namespace vt {

// out[t, :] = table[ids[t], :] widened to float32. Grid: one block per token.
template <typename W>
__global__ void embed(const W* __restrict__ table, const i64* __restrict__ ids, float* __restrict__ out, int H) {
    const i64 t = blockIdx.x;
    const W* row = table + ids[t] * (i64)H;
    for (int i = threadIdx.x; i < H; i += blockDim.x) out[t * H + i] = to_f32(row[i]);
}

// x [T, H] float32, the residual stream: with delta, x += delta (+ bias) in place first.
// out [T, H] = narrow(x / sqrt(mean(x^2) + eps) * w), HF's RMSNorm in float32. Grid: one block per row.
template <typename OUT>
__global__ void add_rms_norm(float* __restrict__ x, const float* __restrict__ delta, const float* __restrict__ bias,
                             const float* __restrict__ w, OUT* __restrict__ out, int H, float eps) {
    __shared__ float scratch[32];
    const i64 row = blockIdx.x;
    float* xr = x + row * H;
    float sumsq = 0.0f;
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float v = xr[i];
        if (delta != nullptr) {
            float d = delta[row * H + i];
            if (bias != nullptr) d += bias[i];
            v += d;
            xr[i] = v;
        }
        sumsq += v * v;
    }
    const float denom = sqrtf(block_sum(sumsq, scratch) / (float)H + eps);
    for (int i = threadIdx.x; i < H; i += blockDim.x) out[row * H + i] = from_f32<OUT>(xr[i] / denom * w[i]);
}

}  // namespace vt
