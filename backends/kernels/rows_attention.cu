// Paged attention for a step whose rows share sequences (a short prefill run whole as a decode step, a row a token:
// a prefix-cache hit's tail), on tensor cores. The decode kernel reads a sequence's keys once a row, on CUDA cores;
// here one block serves one KV head for up to 64 query rows (its G query heads times 64 / G consecutive tokens of one
// sequence), so a sequence's keys are read once for all of its tokens in the block and Q.K^T and P.V are bf16 (or
// fp16) mma.sync with float32 accumulation, P rounded to the cache dtype as the prefill kernel does. The context is
// split into partitions (gridDim.z, static: the graph's table width fixes it) whose partials the decode kernel's
// reduce combines, so a short tail over a long context runs on many SMs. Each token sees keys 0..its position; its
// partition is read one 64-key tile at a time through the block table, the next tile's copies in flight while this
// one is computed. The launch has a block a token (gridDim.z = T); a token leads a block where a run of one
// token_row starts (the graph driver names a run of equal tables by its first row) or where 64 / G tokens of the
// run have gone by, and the block serves the tokens from it to the segment's end; every other block leaves at once.
// So the runs of a step (a tail, the decode rows beside it, each alone, the padding) run side by side, never one
// after another in a block. The token is the grid's slowest dimension: blocks are dispatched roughly in index order,
// so a run's first token's blocks (every KV head and partition) take their SMs first, and the blocks that leave at
// once fill the slots they leave free rather than queue ahead of later partitions.
#include "tensor_core.cuh"

namespace vt {

constexpr int ROWS_MMA_ROWS = 64;  // query rows a block serves: four warps of sixteen
constexpr int ROWS_MMA_BN = 64;    // keys a tile loads
constexpr int ROWS_MMA_THREADS = 128;

template <int HD> using RowsCopies = TileCopies<HD, ROWS_MMA_THREADS, ROWS_MMA_BN>;

// One tile's keys and values (BN keys from k0) requested into one stage of shared memory; keys at or past `end`
// become zeros (masked by the caller, and a zero value keeps 0 x NaN out of P.V). A key's block is looked up key
// by key (k0 need not start a block: any power-of-two block size).
template <typename KV, int HD, int STRIDE>
__device__ __forceinline__ void request_keys(unsigned short* ks, unsigned short* vs, const char* __restrict__ k_bytes,
                                             const i64* __restrict__ table, int k0, int end, const RowsCopies<HD>& c) {
    using TC = RowsCopies<HD>;
    const int mask = (1 << c.shift) - 1;
#pragma unroll
    for (int j = 0; j < TC::COPIES; j++) {
        const int key = c.key0 + TC::KEYS_A_PASS * j;
        const bool valid = k0 + key < end;
        const int at = valid ? k0 + key : k0;  // a zero-size copy still needs an address inside the cache
        const unsigned entry = (unsigned)table[(unsigned)at >> c.shift];
        const char* k_src = k_bytes + ((unsigned)(at & mask) * c.slot_bytes + c.inner) +
                            (unsigned long long)entry * c.block_bytes;
        copy16_async(ks + key * STRIDE + c.part, k_src, valid);
        copy16_async(vs + key * STRIDE + c.part, k_src + c.v_minus_k, valid);
    }
}

// Two blocks an SM where the head dim is at most 128 (ptxas: no spill at 128, where three blocks' 168 registers
// spill): a launch's working blocks are about VT_ROWS_TARGET_BLOCKS (256), one wave of two a SM on the H200's 132.
template <int HD>
constexpr int ROWS_MMA_MIN_BLOCKS = HD <= 128 ? 2 : 1;

// The tokens from y on that share its token_row, at most `limit` (at least 1): every warp finds it, by ballots over
// 32 tokens at a time.
__device__ __forceinline__ int run_length(const i64* __restrict__ token_row, int y, int limit) {
    const int lane = threadIdx.x & 31;
    const i64 trow = token_row[y];
    for (int base = 1; base < limit; base += 32) {
        const int t = base + lane;
        const unsigned ends = __ballot_sync(0xffffffffu, t >= limit || token_row[y + min(t, limit - 1)] != trow);
        if (ends) return min(limit, base + __ffs(ends) - 1);
    }
    return limit;
}

// q [T, nh, HD] float32 (pre-scaled); caches [blocks, block_size, nkv, HD] bf16 or fp16; block_tables [R, W];
// token_row and positions [T]; out [T, nh, HD] when the grid has one partition, else part_o [T, nh, P, HD] and
// part_ml [T, nh, P, 2] (max and sum, natural units) for paged_decode_reduce. Grid (nkv, P, T); ROWS_MMA_THREADS
// threads; dynamic shared memory for two stages of K and V tiles. Row r of a block is token y + r / G, query head
// r % G of its KV head.
template <typename KV, typename OUT, int HD>
__global__ void __launch_bounds__(ROWS_MMA_THREADS, ROWS_MMA_MIN_BLOCKS<HD>)
paged_rows_attention(const float* __restrict__ q, const KV* __restrict__ k_cache, const KV* __restrict__ v_cache,
                     const i64* __restrict__ block_tables, const i64* __restrict__ token_row,
                     const i64* __restrict__ positions, OUT* __restrict__ out, float* __restrict__ part_o,
                     float* __restrict__ part_ml, int nh, int block_size, int table_width, int partition) {
    vt::pdl_entry();
    constexpr int STRIDE = HD + 8;  // shared rows padded: the eight rows of an ldmatrix hit distinct banks
    constexpr int STAGE = ROWS_MMA_BN * STRIDE;
    extern __shared__ __align__(16) unsigned short smem[];  // [2 stages][K, V][BN][STRIDE]
    const int nkv = gridDim.x, kvh = blockIdx.x, G = nh / nkv, per = ROWS_MMA_ROWS / G;
    const int y = blockIdx.z, T = gridDim.z, p = blockIdx.y, P = gridDim.y, start = p * partition;
    const i64 trow = token_row[y];
    const int at = y % per;  // a segment's lead: a run's first token, or the first of an aligned group of `per`
    if (at != 0 && token_row[y - 1] == trow) return;
    const int n = run_length(token_row, y, min(per - at, T - y));
    const int max_ctx = table_width * block_size;
    int reach = start;  // the segment's last context end: no key past it is read
    for (int j = 0; j < n; j++) reach = max(reach, min((int)positions[y + j] + 1, max_ctx));
    const int end = min(reach, start + partition);
    if (end <= start) return;  // every token's context ends before this partition: the reduce reads none of it
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    int tok[2], head[2], limit[2];  // this thread's two rows (local g and g + 8 of its warp's sixteen)
    bool on[2];
    unsigned qa[HD / 16][4];  // Q as mma A fragments, rounded to the cache dtype
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int r = warp * 16 + g + 8 * i;
        tok[i] = r / G;
        head[i] = kvh * G + r % G;
        on[i] = tok[i] < n;  // past the segment (r >= n G) the row computes as the segment's first token, unwritten
        const int t = y + (on[i] ? tok[i] : 0);
        // the last key the row sees here (a zero-filled key past `end` weighs nothing)
        limit[i] = on[i] ? min((int)positions[t] + 1, end) - 1 : start - 1;
#pragma unroll
        for (int s = 0; s < HD / 16; s++) {
            const float* qr = q + ((i64)t * nh + head[i]) * HD + 16 * s + 2 * tig;
            qa[s][i] = pack2<KV>(qr[0], qr[1]);
            qa[s][2 + i] = pack2<KV>(qr[8], qr[9]);
        }
    }
    const bool busy = __any_sync(0xffffffffu, on[0] || on[1]);  // a warp with no row of the segment only copies
    RowsCopies<HD> copies;
    copies.init(kvh, nkv, block_size, k_cache, v_cache);
    const char* k_bytes = reinterpret_cast<const char*>(k_cache);
    const i64* table = block_tables + trow * table_width;
    request_keys<KV, HD, STRIDE>(smem, smem + STAGE, k_bytes, table, start, end, copies);
    copy_commit();
    float o[HD / 8][4];
#pragma unroll
    for (int j = 0; j < HD / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.0f, 0.0f};
    int stage = 0;
    for (int k0 = start; k0 < end; k0 += ROWS_MMA_BN) {
        // This tile has landed for every thread, and every warp is done with the other stage (the previous tile):
        // the next tile's copies go there and run while this one is computed.
        copy_wait<0>();
        __syncthreads();
        if (k0 + ROWS_MMA_BN < end) {
            unsigned short* next = smem + (stage ^ 1) * 2 * STAGE;
            request_keys<KV, HD, STRIDE>(next, next + STAGE, k_bytes, table, k0 + ROWS_MMA_BN, end, copies);
            copy_commit();
        }
        const unsigned short* ks = smem + stage * 2 * STAGE;
        stage ^= 1;
        if (busy) attend_tile<KV, HD, ROWS_MMA_BN, STRIDE, true>(qa, ks, ks + STAGE, limit, k0, lane, o, m, l);
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        // past the segment, or its context ends before the partition: it saw no key (its state is NaN)
        if (!on[i] || limit[i] < start) continue;
        const i64 row = (i64)(y + tok[i]) * nh + head[i];
#pragma unroll
        for (int j = 0; j < HD / 8; j++) {
            const int d = 8 * j + 2 * tig;
            const float a = o[j][2 * i] / l[i], b = o[j][2 * i + 1] / l[i];
            if (P == 1) {
                out[row * HD + d] = from_f32<OUT>(a);
                out[row * HD + d + 1] = from_f32<OUT>(b);
            } else {
                part_o[(row * P + p) * HD + d] = a;
                part_o[(row * P + p) * HD + d + 1] = b;
            }
        }
        if (P > 1 && tig == 0) {
            part_ml[(row * P + p) * 2] = m[i];  // natural units, as paged_decode_reduce reads
            part_ml[(row * P + p) * 2 + 1] = l[i];
        }
    }
}

}  // namespace vt
