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

// Structured outputs: logits [n, V] float32, every token whose bit is clear in mask [n, words] int32 (token t is bit
// t % 32 of word t / 32, llguidance's layout) to MASKED_LOGIT, before the sampler reads the row. Finite, so the
// sampler's guard against a model's non-finite logits still passes the row; -1e30 stays finite divided by any
// temperature the sampler takes (>= 1e-5) and never wins a draw. A thread a word; a word of all ones (most of them, in
// a free-text stretch) writes nothing.
constexpr float MASKED_LOGIT = -1e30f;  // tokens.py's
__global__ void mask_tokens(float* __restrict__ logits, const int* __restrict__ mask, int V, int words) {
    vt::pdl_entry();
    const int r = blockIdx.y, w = blockIdx.x * blockDim.x + threadIdx.x;
    if (w >= words) return;
    const unsigned m = static_cast<unsigned>(mask[(i64)r * words + w]);
    if (m == 0xffffffffu) return;
    float* row = logits + (i64)r * V;
    for (int b = 0; b < 32; b++) {
        const int t = w * 32 + b;
        if (t < V && !((m >> b) & 1u)) row[t] = MASKED_LOGIT;
    }
}

}  // namespace vt
