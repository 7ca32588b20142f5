// Varlen causal prefill attention over the paged KV cache, on tensor cores (FlashAttention-2 tiling): one
// launch per layer serves every prefill chunk of a step. The host cuts each chunk (tokens [q0, q0 + n) of the
// step's batch, at positions p0..p0+n-1, block-table row `row`) into tiles of at most BM queries; one block
// serves one tile for one query head: its queries attend every key of their sequence up to their own
// position (earlier chunks' keys are in the cache, this chunk's were written by the rotary op before), read
// through the block table one BN-key tile at a time. Q.K^T and P.V are bf16 (or fp16) mma.sync with float32
// accumulation; the softmax is online over key tiles in float32, P rounded to the cache dtype for the second
// product, as FlashAttention-2 does. Tiles past the step's count (the launch is sized for the largest step
// of a graph bucket) have zero queries and leave at once.
#include "tensor_core.cuh"

namespace vt {

constexpr int PREFILL_BM = 64;   // queries a block serves: four warps of sixteen rows
constexpr int PREFILL_BN = 64;   // keys a tile loads
constexpr int PREFILL_THREADS = 128;

template <int HD, int HPB = 1> using PrefillCopies = TileCopies<HD, PREFILL_THREADS * HPB, PREFILL_BN>;

// One tile's keys and values (BN keys from k0) requested into one stage of shared memory (request_keys), 16 bytes a
// copy, rows of STRIDE.
template <typename KV, int HD, int STRIDE, typename TC>
__device__ __forceinline__ void request_tile(unsigned short* ks, unsigned short* vs, const char* __restrict__ k_bytes,
                                             const i64* __restrict__ table, int k0, int last, const TC& c) {
    request_keys(k_bytes, table, k0, last, c, [&](int key, const char* k_src, bool valid) {
        copy16_async(ks + key * STRIDE + c.part, k_src, valid);
        copy16_async(vs + key * STRIDE + c.part, k_src + c.v_minus_k, valid);
    });
}

// q [T, nh, HD] float32 (pre-scaled); caches [blocks, block_size, nkv, HD] bf16 or fp16; block_tables [R, W];
// tiles [num_tiles, 4] int32: (block-table row, first token in the batch, queries, position of the first);
// out [T, nh, HD]. Grid (num_tiles, nh), PREFILL_THREADS threads, dynamic shared memory for two stages of K
// and V tiles: the next tile's copies run while this one is computed. Blocks take their tiles last first: a
// tile's work grows with its position, so the longest start first and the launch's tail is short.
// Three blocks an SM (168 registers at most) where the head dim is at most 128: ptxas spills 32 bytes at 128,
// against 1 KB at 256, which keeps one. At 7,936 tokens on the H200 the kernel took 13% less time for it
// (session 17).
template <int HD>
constexpr int PREFILL_MIN_BLOCKS = HD <= 128 ? 3 : 1;

//
// HPB query heads of one KV head a block (VT_PREFILL_HEADS_A_BLOCK=2): four warps a head, every K and V tile copied
// once into shared memory for all of them, so a tile's L2 reads serve twice the tensor-core work. One block an SM
// (256 threads, up to 255 registers). Grid (num_tiles, nh / HPB); PREFILL_THREADS x HPB threads.
template <typename KV, typename OUT, int HD, int HPB = 1>
__global__ void __launch_bounds__(PREFILL_THREADS * HPB, HPB == 1 ? PREFILL_MIN_BLOCKS<HD> : 1)
paged_prefill_attention(const float* __restrict__ q, const KV* __restrict__ k_cache, const KV* __restrict__ v_cache,
                        const i64* __restrict__ block_tables, const int* __restrict__ tiles, OUT* __restrict__ out,
                        int nh, int nkv, int block_size, int table_width) {
    vt::pdl_entry();
    constexpr int STRIDE = HD + 8;  // shared rows padded: the eight rows of an ldmatrix hit distinct banks
    constexpr int STAGE = PREFILL_BN * STRIDE;
    extern __shared__ __align__(16) unsigned short smem[];  // [2 stages][K, V][BN][STRIDE]
    const int* tile = tiles + (gridDim.x - 1 - blockIdx.x) * 4;
    const int nq = tile[2];
    if (nq <= 0) return;
    const i64* table = block_tables + (i64)tile[0] * table_width;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    const int wq = HPB == 1 ? warp : warp % 4;  // the warp's sixteen queries of the tile, for its head
    const int q0 = tile[1], p0 = tile[3], head = blockIdx.y * HPB + (HPB == 1 ? 0 : warp / 4);
    const int kvh = head / (nh / nkv);  // the same for the block's HPB heads (the binding checks HPB divides G)
    const int last = p0 + nq - 1;  // the tile's last query position: no key after it is read
    PrefillCopies<HD, HPB> copies;
    copies.init(kvh, nkv, block_size, k_cache, v_cache);
    const char* k_bytes = reinterpret_cast<const char*>(k_cache);
    request_tile<KV, HD, STRIDE>(smem, smem + STAGE, k_bytes, table, 0, last, copies);
    copy_commit();
    // This thread's two query rows (local g and g + 8 of its warp's sixteen); a row past the tile's queries
    // computes as its tile's first query (finite, never written).
    int rows[2], qpos[2];
    tile_rows(wq, g, nq, p0, rows, qpos);
    unsigned qa[HD / 16][4];  // Q as mma A fragments, rounded to the cache dtype
    load_q_fragments<KV, HD>(q, q0, rows, nh, head, tig, qa);
    float o[HD / 8][4];
#pragma unroll
    for (int j = 0; j < HD / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.0f, 0.0f};
    int stage = 0;
    // One key tile: S = Q K^T, the causal mask where MASKED, the online softmax, O += P V.
    auto tile_step = [&](int k0, auto masked) {
        constexpr bool MASKED = decltype(masked)::value;
        // This tile has landed for every thread, and every warp is done with the other stage (the previous
        // tile): the next tile's copies go there and run while this one is computed.
        copy_wait<0>();
        __syncthreads();
        if (k0 + PREFILL_BN <= last) {
            unsigned short* next = smem + (stage ^ 1) * 2 * STAGE;
            request_tile<KV, HD, STRIDE>(next, next + STAGE, k_bytes, table, k0 + PREFILL_BN, last, copies);
            copy_commit();
        }
        const unsigned short* ks = smem + stage * 2 * STAGE;
        stage ^= 1;
        attend_tile<KV, HD, PREFILL_BN, STRIDE, MASKED>(qa, ks, ks + STAGE, qpos, k0, lane, o, m, l);
    };
    // Tiles wholly at or before the block's first query position need no mask (every row sees every key); the
    // last one or two reach past some row's position. Both bounds are the block's: every thread runs the barrier.
    int k0 = 0;
    for (; k0 + PREFILL_BN - 1 <= p0; k0 += PREFILL_BN) tile_step(k0, Bool<false>{});
    for (; k0 <= last; k0 += PREFILL_BN) tile_step(k0, Bool<true>{});
    store_rows<OUT, HD>(out, q0, wq, g, tig, nq, nh, head, o, l);
}

}  // namespace vt
