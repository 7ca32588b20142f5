// Varlen causal prefill attention over the paged KV cache on Hopper's warpgroup tensor cores (wgmma), for sm_90a
// only (VT_PREFILL_WGMMA=auto or 1; backends/kernels/prefill_attention.py picks it). The same op, tiles and numerics as
// prefill_attention.cu's mma.sync kernel (64 queries a block for one query head, 64-key tiles through the block table,
// q and P rounded to the cache dtype, float32 accumulation, the online softmax of tensor_core.cuh's softmax_tile):
// what differs is where the products run. The block is one warpgroup; S = Q K^T and O += P V are wgmma with A (Q, then
// P) in registers and B (K, then V) read by the tensor cores from shared memory through descriptors, so no ldmatrix
// and no per-warp mma.sync loop. K and V tiles land by cp.async in the 128-byte-swizzled layout wgmma reads: a 64-dim
// slab of the head a tile row of 128 bytes, each 16-byte chunk c of row r stored at chunk c ^ (r % 8), 8-row atoms of
// 1,024 bytes (CUTLASS's Swizzle<3,4,3>; the descriptor layout of include/cute/arch/mma_sm90_desc.hpp).
#include "tensor_core.cuh"

namespace vt {

constexpr int WG_BM = 64;   // queries a block serves: the warpgroup's four warps of sixteen rows
constexpr int WG_BN = 64;   // keys a tile loads
constexpr int WG_THREADS = 128;
constexpr int WG_SLAB = WG_BN * 128;  // bytes of one 64-dim slab of a tile's K (or V)
typedef unsigned long long u64;

template <int HD> struct WgTile {
    static_assert(HD % 64 == 0, "whole 128-byte rows: head dims of 64 and 128");
    static constexpr int BYTES = HD / 64 * WG_SLAB;  // K (or V) of one tile
    static constexpr int STAGE = 2 * BYTES;          // K then V
};

// Byte offset of 16-byte chunk c (dims 8c..8c+7) of tile row `key`: its slab, its row, its chunk swizzled in the row.
__device__ __forceinline__ unsigned swizzled(int key, int c) {
    return (unsigned)((c >> 3) * WG_SLAB + key * 128 + (((c & 7) ^ (key & 7)) << 4));
}

// A shared-memory matrix descriptor, 128-byte swizzle: start, leading and stride byte offsets, each >> 4.
__device__ __forceinline__ u64 sw128_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(lbo >> 4) << 16) | ((u64)(sbo >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// What this thread's cp.async wrote is made visible to the async proxy (the tensor cores' reads through descriptors).
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Accumulators pinned at this point of the program: the compiler may not move their reads or writes across it (a
// wgmma writes them asynchronously, until its wait).
template <int N> __device__ __forceinline__ void pin(float (&d)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])::"memory");
}

// wgmma m64nNk16 with A from registers (the mma.sync A fragment of the warp's sixteen rows), B through a descriptor
// (TRANS_B 0: K-major, 1: MN-major), D += A B in float32.
template <typename KV, int N> struct Wgmma;
// wgmma m64n64k16, A from registers, for the 16-bit type KVT (TY: its PTX name, bf16 or f16).
#define VT_WGMMA_N64(KVT, TY) \
    template <> struct Wgmma<KVT, 64> { \
        template <int TRANS_B> \
        static __device__ __forceinline__ void run(float (&d)[8][4], const unsigned (&a)[4], u64 desc) { \
            asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32." #TY "." #TY " {" \
                         "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
                         "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" \
                         "}, {%32, %33, %34, %35}, %36, 1, 1, 1, %37;\n" \
                         : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), \
                           "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), \
                           "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), \
                           "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), \
                           "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), \
                           "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), \
                           "+f"(d[7][2]), "+f"(d[7][3]) \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(TRANS_B)); \
        } \
    };
// wgmma m64n128k16, A from registers, for the 16-bit type KVT (TY: its PTX name, bf16 or f16).
#define VT_WGMMA_N128(KVT, TY) \
    template <> struct Wgmma<KVT, 128> { \
        template <int TRANS_B> \
        static __device__ __forceinline__ void run(float (&d)[16][4], const unsigned (&a)[4], u64 desc) { \
            asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32." #TY "." #TY " {" \
                         "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
                         "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
                         "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
                         "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" \
                         "}, {%64, %65, %66, %67}, %68, 1, 1, 1, %69;\n" \
                         : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), \
                           "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), \
                           "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), \
                           "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), \
                           "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), \
                           "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), \
                           "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), \
                           "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), \
                           "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), \
                           "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), \
                           "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), \
                           "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), \
                           "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]) \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(TRANS_B)); \
        } \
    };
VT_WGMMA_N64(bf16, bf16)
VT_WGMMA_N128(bf16, bf16)
VT_WGMMA_N64(f16, f16)
VT_WGMMA_N128(f16, f16)
#undef VT_WGMMA_N64
#undef VT_WGMMA_N128

// One tile's keys and values (WG_BN keys from k0) requested into a stage in the swizzled layout (request_keys), 16
// bytes a copy.
template <typename KV, int HD, typename TC>
__device__ __forceinline__ void request_swizzled(unsigned char* stage, const char* __restrict__ k_bytes,
                                                 const i64* __restrict__ table, int k0, int last, const TC& c) {
    request_keys(k_bytes, table, k0, last, c, [&](int key, const char* k_src, bool valid) {
        const unsigned at = swizzled(key, c.part / 8);
        copy16_async(stage + at, k_src, valid);
        copy16_async(stage + WgTile<HD>::BYTES + at, k_src + c.v_minus_k, valid);
    });
}

// S = Q K^T of one landed tile, issued and committed, not waited for (HD / 16 wgmma k-steps, K-major B: 32 bytes a
// step within a slab's 128-byte rows, the slabs WG_SLAB apart).
template <typename KV, int HD>
__device__ __forceinline__ void issue_s(float (&sc)[WG_BN / 8][4], const unsigned (&qa)[HD / 16][4], unsigned k_addr) {
#pragma unroll
    for (int n = 0; n < WG_BN / 8; n++) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
    pin(sc);
    wg_fence();
#pragma unroll
    for (int s = 0; s < HD / 16; s++)
        Wgmma<KV, WG_BN>::template run<0>(sc, qa[s], sw128_desc(k_addr + (s >> 2) * WG_SLAB + (s & 3) * 32, 16, 1024));
    wg_commit();
}

// O += P V of one landed tile, issued and committed, not waited for (WG_BN / 16 k-steps, MN-major B: 16 keys = two
// 1,024-byte atoms a step; the head's 64-dim slabs WG_SLAB apart).
template <typename KV, int HD>
__device__ __forceinline__ void issue_pv(float (&o)[HD / 8][4], const unsigned (&pa)[WG_BN / 16][4], unsigned v_addr) {
    pin(o);
    wg_fence();
#pragma unroll
    for (int t = 0; t < WG_BN / 16; t++)
        Wgmma<KV, HD>::template run<1>(o, pa[t], sw128_desc(v_addr + t * 2048, WG_SLAB, 1024));
    wg_commit();
}

template <int N> __device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// softmax_tile where the tile needs the causal mask (it reaches past the block's first query position), else without.
template <typename KV>
__device__ __forceinline__ void wg_softmax(float (&sc)[WG_BN / 8][4], const int (&limit)[2], int k0, int p0, int lane,
                                           float (&m)[2], float (&l)[2], unsigned (&pa)[WG_BN / 16][4],
                                           float (&alpha)[2]) {
    if (k0 + WG_BN - 1 <= p0) softmax_tile<KV, WG_BN, false>(sc, limit, k0, lane, m, l, pa, alpha);
    else softmax_tile<KV, WG_BN, true>(sc, limit, k0, lane, m, l, pa, alpha);
}

// q [T, nh, HD] float32 (pre-scaled); caches [blocks, block_size, nkv, HD] bf16 or fp16; block_tables [R, W];
// tiles [num_tiles, 4] int32 (prefill_attention.py's prefill_tiles); out [T, nh, HD]. Grid (num_tiles, nh),
// WG_THREADS threads, dynamic shared memory: two stages of K and V tiles (the next tile's copies run while this one is
// computed) and 1,024 bytes to align them. Tiles are taken last first, as the mma.sync kernel takes them.
// MIN_BLOCKS a multiprocessor: 2 (186 registers at head dim 128) or 3 (167-168, no spills). On an H100 (session 32)
// 3 took 717 against 778 us at 7,936 tokens and 242 against 264 at 4,096, where the tiles are several waves, but 40
// against 36 at 1,024, where they are one (the binding picks by the tiles of the step's, or graph bucket's, tokens).
// Measured and dropped: FlashAttention-3's intra-warpgroup overlap (three stages, tile n's S issued beside tile n - 1's
// P.V, its softmax under that P.V), 777-782 against 778-788 us at 7,936 tokens: two blocks a multiprocessor already
// overlap one's softmax with the other's products.
template <typename KV, typename OUT, int HD, int MIN_BLOCKS>
__global__ void __launch_bounds__(WG_THREADS, MIN_BLOCKS)
paged_prefill_wgmma(const float* __restrict__ q, const KV* __restrict__ k_cache, const KV* __restrict__ v_cache,
                    const i64* __restrict__ block_tables, const int* __restrict__ tiles, OUT* __restrict__ out,
                    int nh, int nkv, int block_size, int table_width) {
    vt::pdl_entry();
    extern __shared__ __align__(1024) unsigned char wg_smem[];
    const int* tile = tiles + (gridDim.x - 1 - blockIdx.x) * 4;
    const int nq = tile[2];
    if (nq <= 0) return;
    const unsigned raw = (unsigned)__cvta_generic_to_shared(wg_smem);
    unsigned char* smem = wg_smem + (((raw + 1023u) & ~1023u) - raw);  // swizzle atoms start 1,024-byte aligned
    const unsigned smem_addr = (unsigned)__cvta_generic_to_shared(smem);
    const i64* table = block_tables + (i64)tile[0] * table_width;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    const int q0 = tile[1], p0 = tile[3], head = blockIdx.y;
    const int kvh = head / (nh / nkv);
    const int last = p0 + nq - 1;
    const int num_key_tiles = last / WG_BN + 1;
    TileCopies<HD, WG_THREADS, WG_BN> copies;
    copies.init(kvh, nkv, block_size, k_cache, v_cache);
    const char* k_bytes = reinterpret_cast<const char*>(k_cache);
    constexpr int STAGE = WgTile<HD>::STAGE;
    auto request = [&](int n) {  // key tile n into its stage, as one commit group
        request_swizzled<KV, HD>(smem + (n & 1) * STAGE, k_bytes, table, n * WG_BN, last, copies);
        copy_commit();
    };
    request(0);
    int rows[2], qpos[2];
    tile_rows(warp, g, nq, p0, rows, qpos);
    unsigned qa[HD / 16][4];  // Q as mma A fragments, rounded to the cache dtype
    load_q_fragments<KV, HD>(q, q0, rows, nh, head, tig, qa);
    float o[HD / 8][4];
#pragma unroll
    for (int j = 0; j < HD / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.0f, 0.0f}, alpha[2];
    float sc[WG_BN / 8][4];
    unsigned pa[WG_BN / 16][4];
    for (int n = 0; n < num_key_tiles; n++) {
        // Tile n has landed for every thread and is visible to the tensor cores, and every thread is past its wait for
        // the wgmma that read the other stage (tile n - 1): the next tile's copies go there.
        copy_wait<0>();
        fence_async_shared();
        __syncthreads();
        if (n + 1 < num_key_tiles) request(n + 1);
        const unsigned k_at = smem_addr + (n & 1) * STAGE;
        issue_s<KV, HD>(sc, qa, k_at);
        wg_wait<0>();
        pin(sc);
        wg_softmax<KV>(sc, qpos, n * WG_BN, p0, lane, m, l, pa, alpha);
        rescale_o<HD>(o, alpha);
        issue_pv<KV, HD>(o, pa, k_at + WgTile<HD>::BYTES);
        wg_wait<0>();
        pin(o);
    }
    store_rows<OUT, HD>(out, q0, warp, g, tig, nq, nh, head, o, l);
}

}  // namespace vt
