// Storage conversions as one grid-stride kernel each: float32 <-> bf16 / fp16 bits, rounding as the NumPy
// twins in vt/dtypes.py round (nearest even, a NaN kept quiet). The rounding lives in common.cuh, shared by
// every kernel that narrows what it writes.
#include "common.cuh"

namespace vt {

template <typename SRC, typename DST>
__global__ void convert(const SRC* __restrict__ x, DST* __restrict__ y, long long n) {
    vt::pdl_entry();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = from_f32<DST>(to_f32(x[i]));
}

}  // namespace vt
