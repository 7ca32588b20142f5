// What the tensor-core attention kernels share (prefill_attention.cu, rows_attention.cu): bf16 and fp16 mma.sync
// with float32 accumulation, float pairs rounded into an operand register, cp.async copies into shared memory and
// ldmatrix loads out of it.
#pragma once
#include "common.cuh"

namespace vt {

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

// Where a thread's copies of every tile go and come from, in a block of THREADS threads loading BN keys a tile: fixed
// parts of fixed keys (key0 + KEYS_A_PASS j, dims part..part+7), so their shared-memory offsets and their offsets
// inside a cache block are the same every tile.
template <int HD, int THREADS, int BN> struct TileCopies {
    static constexpr int CHUNKS = HD / 8, KEYS_A_PASS = THREADS / CHUNKS, COPIES = BN / KEYS_A_PASS;
    static_assert(THREADS % CHUNKS == 0 && BN % KEYS_A_PASS == 0, "a thread's parts are fixed");
    int key0, part, inner;  // inner: the part's bytes from its slot's start, in the KV head kvh
    unsigned slot_bytes, block_bytes;
    int shift;
    long long v_minus_k;  // v_cache - k_cache, in bytes

    template <typename KV>
    __device__ __forceinline__ void init(int kvh, int nkv, int block_size, const KV* k_cache, const KV* v_cache) {
        key0 = threadIdx.x / CHUNKS;
        part = (threadIdx.x % CHUNKS) * 8;
        inner = (kvh * HD + part) * (int)sizeof(KV);
        slot_bytes = (unsigned)(nkv * HD * sizeof(KV));
        block_bytes = slot_bytes * (unsigned)block_size;
        shift = __ffs(block_size) - 1;
        v_minus_k = reinterpret_cast<const char*>(v_cache) - reinterpret_cast<const char*>(k_cache);
    }
};

// A prefill tile's query rows for this thread (local g and g + 8 of warp w's sixteen): their rows in the tile, a row
// past the tile's nq queries computing as its first query (finite, never written), and their positions from p0.
__device__ __forceinline__ void tile_rows(int w, int g, int nq, int p0, int (&rows)[2], int (&qpos)[2]) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int r = w * 16 + g + 8 * i;
        rows[i] = r < nq ? r : 0;
        qpos[i] = p0 + rows[i];
    }
}

// Q of those rows (q [T, nh, HD] float32, the tile's first token q0) as mma A fragments, rounded to the cache dtype.
template <typename KV, int HD>
__device__ __forceinline__ void load_q_fragments(const float* __restrict__ q, int q0, const int (&rows)[2], int nh,
                                                 int head, int tig, unsigned (&qa)[HD / 16][4]) {
#pragma unroll
    for (int s = 0; s < HD / 16; s++) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const float* qr = q + ((i64)(q0 + rows[i]) * nh + head) * HD + 16 * s + 2 * tig;
            qa[s][i] = pack2<KV>(qr[0], qr[1]);
            qa[s][2 + i] = pack2<KV>(qr[8], qr[9]);
        }
    }
}

// O / l of this thread's rows of warp w's sixteen into out [T, nh, HD], the rows past the tile's nq queries left.
template <typename OUT, int HD>
__device__ __forceinline__ void store_rows(OUT* __restrict__ out, int q0, int w, int g, int tig, int nq, int nh,
                                           int head, const float (&o)[HD / 8][4], const float (&l)[2]) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int r = w * 16 + g + 8 * i;
        if (r >= nq) continue;
        OUT* orow = out + ((i64)(q0 + r) * nh + head) * HD;
#pragma unroll
        for (int j = 0; j < HD / 8; j++) {
            orow[8 * j + 2 * tig] = from_f32<OUT>(o[j][2 * i] / l[i]);
            orow[8 * j + 2 * tig + 1] = from_f32<OUT>(o[j][2 * i + 1] / l[i]);
        }
    }
}

// The online softmax of one key tile for a warp's sixteen query rows (this lane's rows g and g + 8), S in sc as mma
// (or wgmma) accumulators: the causal mask where MASKED (a key past limit[i], the last key row i sees, is not seen),
// the rows' max and sum (m, l: natural units) moved on, P as the A fragments of P.V (pa), and alpha, the factor that
// takes O to the new max (rescale_o). A row that has
// seen no key yet (its max still -inf) computes NaN in its own registers (a thread's two rows never mix, nor do the
// four lanes of a row with another row's): its caller never writes such a row.
template <typename KV, int BN, bool MASKED>
__device__ __forceinline__ void softmax_tile(float (&sc)[BN / 8][4], const int (&limit)[2], int k0, int lane,
                                             float (&m)[2], float (&l)[2], unsigned (&pa)[BN / 16][4],
                                             float (&alpha)[2]) {
    const int tig = lane & 3;
    if (MASKED) {  // a key past a row's limit is not seen: column 8n + (e & 1) against limit - k0 - 2 tig
        const int reach[2] = {limit[0] - k0 - 2 * tig, limit[1] - k0 - 2 * tig};
#pragma unroll
        for (int n = 0; n < BN / 8; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                if (8 * n + (e & 1) > reach[e >> 1]) sc[n][e] = neg_inf();
            }
        }
    }
    // the online softmax, row by row
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int n = 0; n < BN / 8; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) mx[e >> 1] = fmaxf(mx[e >> 1], sc[n][e]);
    }
    float sum[2] = {0.0f, 0.0f}, ml2[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));  // finite where the row has seen a key
        alpha[i] = exp2_ftz((m[i] - mx[i]) * LOG2E);
        m[i] = mx[i];
        ml2[i] = mx[i] * LOG2E;
    }
#pragma unroll
    for (int n = 0; n < BN / 8; n++) {
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
}

// O (a warp's sixteen rows: this lane's g and g + 8) taken to the rows' new max.
template <int HD>
__device__ __forceinline__ void rescale_o(float (&o)[HD / 8][4], const float (&alpha)[2]) {
    if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {  // a row's max moved: rescale
#pragma unroll
        for (int j = 0; j < HD / 8; j++) {
            o[j][0] *= alpha[0]; o[j][1] *= alpha[0];  // the online-softmax rescale to the new max
            o[j][2] *= alpha[1]; o[j][3] *= alpha[1];
        }
    }
}

// A key tile's copies through the block table (keys from k0, a thread's fixed keys c.key0 + KEYS_A_PASS j): for each,
// copy(key, the key's 16 bytes in the K cache, valid); a key past `last` is not valid (its copy fills zeros; the
// caller masks it) and reads key 0's address, inside the cache. The block size is a power of two dividing the tile
// (the bindings check), so k0 starts a block: a key's block is k0's plus key >> shift, its slot key & (block_size - 1).
// The addresses are 32-bit offsets but for one wide multiply a copy: a block id fits an int (the bindings check).
template <typename TC, typename Copy>
__device__ __forceinline__ void request_keys(const char* __restrict__ k_bytes, const i64* __restrict__ table, int k0,
                                             int last, const TC& c, Copy copy) {
    const unsigned first_block = (unsigned)k0 >> c.shift;
    const int in_tile = last - k0;  // keys past it are beyond the last query
    const int mask = (1 << c.shift) - 1;
#pragma unroll
    for (int j = 0; j < TC::COPIES; j++) {
        const int key = c.key0 + TC::KEYS_A_PASS * j;
        const bool valid = key <= in_tile;
        const int at_key = valid ? key : 0;  // a zero-size copy still needs an address inside the cache
        const unsigned entry = (unsigned)table[first_block + ((unsigned)at_key >> c.shift)];
        copy(key, k_bytes + ((unsigned)(at_key & mask) * c.slot_bytes + c.inner) + (unsigned long long)entry *
                                                                                   c.block_bytes, valid);
    }
}

// One key tile (BN keys from k0, in shared memory: ks and vs, rows of STRIDE) for a warp's sixteen query rows (qa,
// mma A fragments): S = Q K^T, softmax_tile, O += P V.
template <typename KV, int HD, int BN, int STRIDE, bool MASKED>
__device__ __forceinline__ void attend_tile(const unsigned (&qa)[HD / 16][4], const unsigned short* ks,
                                            const unsigned short* vs, const int (&limit)[2], int k0, int lane,
                                            float (&o)[HD / 8][4], float (&m)[2], float (&l)[2]) {
    const int mi = lane >> 3, mr = lane & 7;  // ldmatrix rows this lane addresses: matrix lane / 8, its row lane % 8
    float sc[BN / 8][4];  // S = Q K^T for this warp's sixteen rows and the tile's keys
#pragma unroll
    for (int n = 0; n < BN / 8; n++) {
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
    unsigned pa[BN / 16][4];  // P as A fragments of the second product
    float alpha[2];
    softmax_tile<KV, BN, MASKED>(sc, limit, k0, lane, m, l, pa, alpha);
    rescale_o<HD>(o, alpha);
#pragma unroll
    for (int s = 0; s < BN / 16; s++) {
#pragma unroll
        for (int j = 0; j < HD / 8; j += 2) {  // V keys 16s + 8 * (mi & 1) + mr, dims 8j + 8 * (mi >> 1)
            unsigned b[4];
            ldmatrix_x4<true>(b, vs + (16 * s + 8 * (mi & 1) + mr) * STRIDE + 8 * j + 8 * (mi >> 1));
            Mma<KV>::run(o[j], pa[s], b[0], b[1]);
            Mma<KV>::run(o[j + 1], pa[s], b[2], b[3]);
        }
    }
}

}  // namespace vt
