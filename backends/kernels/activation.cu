// SwiGLU's activation: out = narrow(silu(gate) * up) from the fused gate/up projection, written in the down
// projection's operand dtype. A grid-stride loop over T x I elements.
#include "common.cuh"

namespace vt {

// gate_up [T, 2 I] float32 (gate first); out [T, I].
template <typename OUT>
__global__ void silu_mul(const float* __restrict__ gate_up, OUT* __restrict__ out, int I, i64 n) {
    vt::pdl_entry();
    for (i64 idx = blockIdx.x * (i64)blockDim.x + threadIdx.x; idx < n; idx += (i64)gridDim.x * blockDim.x) {
        const i64 t = idx / I, c = idx - t * I;
        const float g = gate_up[t * 2 * I + c], u = gate_up[t * 2 * I + I + c];
        out[idx] = from_f32<OUT>(g / (1.0f + expf(-g)) * u);
    }
}

}  // namespace vt
