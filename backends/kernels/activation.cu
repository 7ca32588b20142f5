// SwiGLU's activation: out = narrow(silu(gate) * up) from the fused gate/up projection, written in the down
// projection's operand dtype. A grid-stride loop over T x I elements. The projection's columns alternate `group`
// gate columns and the same group's up columns (group = I: all of gate, then all of up).
#include "common.cuh"

namespace vt {

// gate_up [T, 2 I] float32; out [T, I].
template <typename OUT>
__global__ void silu_mul(const float* __restrict__ gate_up, OUT* __restrict__ out, int I, int group, i64 n) {
    vt::pdl_entry();
    for (i64 idx = blockIdx.x * (i64)blockDim.x + threadIdx.x; idx < n; idx += (i64)gridDim.x * blockDim.x) {
        const i64 t = idx / I;
        const float* row = gate_up + t * 2 * I + gate_column((int)(idx - t * I), group);
        out[idx] = from_f32<OUT>(silu_times(row[0], row[group]));
    }
}

}  // namespace vt
