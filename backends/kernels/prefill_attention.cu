// Varlen causal prefill attention over the paged KV cache, on tensor cores (FlashAttention-2 tiling): one
// launch per layer serves every prefill chunk of a step. The host cuts each chunk (tokens [q0, q0 + n) of the
// step's batch, at positions p0..p0+n-1, block-table row `row`) into tiles of at most BM queries; one block
// serves one tile for one query head: its queries attend every key of their sequence up to their own
// position (earlier chunks' keys are in the cache, this chunk's were written by the rotary op before), read
// through the block table one BN-key tile at a time. Q.K^T and P.V are bf16 (or fp16) mma.sync with float32
// accumulation; the softmax is online over key tiles in float32, P rounded to the cache dtype for the second
// product, as FlashAttention-2 does. Tiles past the step's count (the launch is sized for the largest step
// of a graph bucket) have zero queries and leave at once.
#include "common.cuh"

namespace vt {

constexpr int PREFILL_BM = 64;   // queries a block serves: four warps of sixteen rows
constexpr int PREFILL_BN = 64;   // keys a tile loads
constexpr int PREFILL_THREADS = 128;

template <typename KV> struct Mma;
template <> struct Mma<bf16> {
    static __device__ __forceinline__ void run(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};
template <> struct Mma<f16> {
    static __device__ __forceinline__ void run(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

// Two values rounded to the cache dtype (to nearest even, as from_f32 does for every finite value), packed as an
// mma operand register, the lower column in the low half: one cvt instruction, where from_f32<bf16>'s integer
// rounding took several a value.
template <typename KV> __device__ __forceinline__ unsigned pack2(float lo, float hi);
template <> __device__ __forceinline__ unsigned pack2<bf16>(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
template <> __device__ __forceinline__ unsigned pack2<f16>(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

template <bool B> struct Bool { static constexpr bool value = B; };

// 16 bytes from global memory into shared memory without passing through registers (cp.async, L2 only); a
// source of size 0 fills the destination with zeros.
__device__ __forceinline__ void copy16_async(void* dst, const void* src, bool valid) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void copy_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void copy_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8x8 b16 matrices from shared memory, one row address a lane (lanes 8i..8i+7: matrix i's rows); .trans
// hands each lane a column pair instead of a row pair (the B operand of P.V from V stored key-major).
template <bool TRANS>
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const unsigned short* row) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

// Where a thread's copies of every tile go and come from: fixed parts of fixed keys (key0 + KEYS_A_PASS j, dims
// part..part+7), so their shared-memory offsets and their offsets inside a cache block are the same every tile.
template <int HD> struct TileCopies {
    static constexpr int CHUNKS = HD / 8, KEYS_A_PASS = PREFILL_THREADS / CHUNKS, COPIES = PREFILL_BN / KEYS_A_PASS;
    static_assert(PREFILL_THREADS % CHUNKS == 0 && PREFILL_BN % KEYS_A_PASS == 0, "a thread's parts are fixed");
    int key0, part, inner;  // inner: the part's bytes from its slot's start, in the KV head kvh
    unsigned slot_bytes, block_bytes;
    int shift;
    long long v_minus_k;  // v_cache - k_cache, in bytes
};

// One tile's keys and values (BN keys from k0) requested into one stage of shared memory, 16 bytes a copy; keys
// past `last` become zeros (masked by the caller). The block size is a power of two dividing BN (the binding
// checks), so k0 starts a block: a key's block is k0's plus key >> shift, its slot key & (block_size - 1). The
// addresses are 32-bit offsets but for one wide multiply a copy: a block id fits an int (the binding checks).
template <typename KV, int HD, int STRIDE>
__device__ __forceinline__ void request_tile(unsigned short* ks, unsigned short* vs, const char* __restrict__ k_bytes,
                                             const i64* __restrict__ table, int k0, int last, const TileCopies<HD>& c) {
    using TC = TileCopies<HD>;
    const unsigned first_block = (unsigned)k0 >> c.shift;
    const int in_tile = last - k0;  // keys past it are beyond the last query
    const int mask = (1 << c.shift) - 1;
#pragma unroll
    for (int j = 0; j < TC::COPIES; j++) {
        const int key = c.key0 + TC::KEYS_A_PASS * j;
        const bool valid = key <= in_tile;
        const int at_key = valid ? key : 0;  // a zero-size copy still needs an address inside the cache
        const unsigned entry = (unsigned)table[first_block + ((unsigned)at_key >> c.shift)];
        const char* k_src = k_bytes + ((unsigned)(at_key & mask) * c.slot_bytes + c.inner) +
                            (unsigned long long)entry * c.block_bytes;
        copy16_async(ks + key * STRIDE + c.part, k_src, valid);
        copy16_async(vs + key * STRIDE + c.part, k_src + c.v_minus_k, valid);
    }
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

template <typename KV, typename OUT, int HD>
__global__ void __launch_bounds__(PREFILL_THREADS, PREFILL_MIN_BLOCKS<HD>)
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
    const int q0 = tile[1], p0 = tile[3], head = blockIdx.y, kvh = head / (nh / nkv);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    const int last = p0 + nq - 1;  // the tile's last query position: no key after it is read
    TileCopies<HD> copies;
    copies.key0 = threadIdx.x / TileCopies<HD>::CHUNKS;
    copies.part = (threadIdx.x % TileCopies<HD>::CHUNKS) * 8;
    copies.inner = (kvh * HD + copies.part) * (int)sizeof(KV);
    copies.slot_bytes = (unsigned)(nkv * HD * sizeof(KV));
    copies.block_bytes = copies.slot_bytes * (unsigned)block_size;
    copies.shift = __ffs(block_size) - 1;
    copies.v_minus_k = reinterpret_cast<const char*>(v_cache) - reinterpret_cast<const char*>(k_cache);
    const char* k_bytes = reinterpret_cast<const char*>(k_cache);
    request_tile<KV, HD, STRIDE>(smem, smem + STAGE, k_bytes, table, 0, last, copies);
    copy_commit();
    // This thread's two query rows (local g and g + 8 of its warp's sixteen); a row past the tile's queries
    // computes as its tile's first query (finite, never written).
    int rows[2], qpos[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int r = warp * 16 + g + 8 * i;
        rows[i] = r < nq ? r : 0;
        qpos[i] = p0 + rows[i];
    }
    unsigned qa[HD / 16][4];  // Q as mma A fragments, rounded to the cache dtype
#pragma unroll
    for (int s = 0; s < HD / 16; s++) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const float* qr = q + ((i64)(q0 + rows[i]) * nh + head) * HD + 16 * s + 2 * tig;
            qa[s][i] = pack2<KV>(qr[0], qr[1]);
            qa[s][2 + i] = pack2<KV>(qr[8], qr[9]);
        }
    }
    float o[HD / 8][4];
#pragma unroll
    for (int j = 0; j < HD / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.0f, 0.0f};
    // ldmatrix rows this lane addresses: matrix lane / 8, its row lane % 8
    const int mi = lane >> 3, mr = lane & 7;
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
        const unsigned short* vs = ks + STAGE;
        stage ^= 1;
        float sc[PREFILL_BN / 8][4];  // S = Q K^T for this warp's sixteen rows and the tile's keys
#pragma unroll
        for (int n = 0; n < PREFILL_BN / 8; n++) {
            sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll
            for (int s = 0; s < HD / 16; s += 2) {  // two k-steps an ldmatrix: K rows 8n.., dims 16s + 8 * mi
                unsigned b[4];
                if (HD >= 32) {
                    ldmatrix_x4<false>(b, ks + (8 * n + mr) * STRIDE + 16 * s + 8 * mi);
                } else {  // one k-step: matrices 2 and 3 repeat 0 and 1
                    ldmatrix_x4<false>(b, ks + (8 * n + mr) * STRIDE + 8 * (mi & 1));
                }
                Mma<KV>::run(sc[n], qa[s], b[0], b[1]);
                if (s + 1 < HD / 16) Mma<KV>::run(sc[n], qa[s + 1], b[2], b[3]);
            }
        }
        if (MASKED) {  // a key after a row's position is not seen: column 8n + (e & 1) against position - k0 - 2 tig
            const int reach[2] = {qpos[0] - k0 - 2 * tig, qpos[1] - k0 - 2 * tig};
#pragma unroll
            for (int n = 0; n < PREFILL_BN / 8; n++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    if (8 * n + (e & 1) > reach[e >> 1]) sc[n][e] = neg_inf();
                }
            }
        }
        // the online softmax, row by row
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int n = 0; n < PREFILL_BN / 8; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++) mx[e >> 1] = fmaxf(mx[e >> 1], sc[n][e]);
        }
        float alpha[2], sum[2] = {0.0f, 0.0f}, ml2[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));  // finite: key 0 <= every position
            alpha[i] = exp2_ftz((m[i] - mx[i]) * LOG2E);
            m[i] = mx[i];
            ml2[i] = mx[i] * LOG2E;
        }
        unsigned pa[PREFILL_BN / 16][4];  // P as A fragments of the second product
#pragma unroll
        for (int n = 0; n < PREFILL_BN / 8; n++) {
            float p[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                p[e] = exp2_ftz(fmaf(sc[n][e], LOG2E, -ml2[e >> 1]));
                sum[e >> 1] += p[e];
            }
            pa[n / 2][(n & 1) * 2] = pack2<KV>(p[0], p[1]);
            pa[n / 2][(n & 1) * 2 + 1] = pack2<KV>(p[2], p[3]);
        }
#pragma unroll
        for (int i = 0; i < 2; i++) {
            sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 1);
            sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 2);
            l[i] = l[i] * alpha[i] + sum[i];
        }
        if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {  // a row's max moved: rescale
#pragma unroll
            for (int j = 0; j < HD / 8; j++) {
                o[j][0] *= alpha[0]; o[j][1] *= alpha[0];  // the online-softmax rescale to the new max
                o[j][2] *= alpha[1]; o[j][3] *= alpha[1];
            }
        }
#pragma unroll
        for (int s = 0; s < PREFILL_BN / 16; s++) {
#pragma unroll
            for (int j = 0; j < HD / 8; j += 2) {  // V keys 16s + 8 * (mi & 1) + mr, dims 8j + 8 * (mi >> 1)
                unsigned b[4];
                ldmatrix_x4<true>(b, vs + (16 * s + 8 * (mi & 1) + mr) * STRIDE + 8 * j + 8 * (mi >> 1));
                Mma<KV>::run(o[j], pa[s], b[0], b[1]);
                Mma<KV>::run(o[j + 1], pa[s], b[2], b[3]);
            }
        }
    };
    // Tiles wholly at or before the block's first query position need no mask (every row sees every key); the
    // last one or two reach past some row's position. Both bounds are the block's: every thread runs the barrier.
    int k0 = 0;
    for (; k0 + PREFILL_BN - 1 <= p0; k0 += PREFILL_BN) tile_step(k0, Bool<false>{});
    for (; k0 <= last; k0 += PREFILL_BN) tile_step(k0, Bool<true>{});
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int r = warp * 16 + g + 8 * i;
        if (r >= nq) continue;
        OUT* orow = out + ((i64)(q0 + r) * nh + head) * HD;
#pragma unroll
        for (int j = 0; j < HD / 8; j++) {
            orow[8 * j + 2 * tig] = from_f32<OUT>(o[j][2 * i] / l[i]);
            orow[8 * j + 2 * tig + 1] = from_f32<OUT>(o[j][2 * i + 1] / l[i]);
        }
    }
}

}  // namespace vt
