// A decode step's input tokens read on the device, and its sampled ids kept there: with async scheduling the
// host launches step N+1 before it has read step N's tokens, so each request's last sampled id lives in a
// per-request slot of `last` (keyed by request, never by batch row: rows move between steps).
#include "common.cuh"

namespace vt {

// tokens[i] = last[src[i]] where src[i] >= 0: the token step N sampled, fed to step N+1 without the host. A row
// whose logits were not finite sampled -1 and fails on the host; its next step, already queued, reads token 0.
__global__ void feed_tokens(i64* __restrict__ tokens, const i64* __restrict__ src, const i64* __restrict__ last,
                            int n) {
    vt::pdl_entry();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && src[i] >= 0) tokens[i] = max(0ll, last[src[i]]);  // a failed row's -1: a valid id, never an index
                                                                    // before the embedding table
}

// last[dst[i]] = ids[i] where dst[i] >= 0: each row's sampled id kept at its request's slot.
__global__ void keep_sampled(const i64* __restrict__ ids, const i64* __restrict__ dst, i64* __restrict__ last,
                             int n) {
    vt::pdl_entry();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && dst[i] >= 0) last[dst[i]] = ids[i];
}

}  // namespace vt
