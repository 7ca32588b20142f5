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
// out [T, H] = narrow(x / sqrt(mean(x^2) + eps) * w), HF's RMSNorm in float32. Grid: one block per row; each
// thread keeps its (at most VECS) float4s of the row in registers between the sum and the write. H % 4 == 0.
constexpr int NORM_VECS = 4;

template <typename OUT>
__global__ void add_rms_norm(float* __restrict__ x, const float* __restrict__ delta, const float* __restrict__ bias,
                             const float* __restrict__ w, OUT* __restrict__ out, int H, float eps) {
    vt::pdl_entry();
    __shared__ float scratch[32];
    const i64 row = blockIdx.x;
    float4* xr = reinterpret_cast<float4*>(x + row * H);
    const int n4 = H / 4;
    float4 v[NORM_VECS];
    float sumsq = 0.0f;
#pragma unroll
    for (int j = 0; j < NORM_VECS; j++) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i >= n4) break;
        v[j] = xr[i];
        if (delta != nullptr) {
            float4 d = reinterpret_cast<const float4*>(delta + row * H)[i];
            if (bias != nullptr) {
                const float4 b = reinterpret_cast<const float4*>(bias)[i];
                d.x += b.x; d.y += b.y; d.z += b.z; d.w += b.w;
            }
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
        OUT* o = out + row * H + 4 * i;
        o[0] = from_f32<OUT>(v[j].x / denom * g.x);
        o[1] = from_f32<OUT>(v[j].y / denom * g.y);
        o[2] = from_f32<OUT>(v[j].z / denom * g.z);
        o[3] = from_f32<OUT>(v[j].w / denom * g.w);
    }
}

}  // namespace vt
