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

// Two values rounded to the cache dtype, packed as an mma operand register (the lower column in the low half).
template <typename KV> __device__ __forceinline__ unsigned pack2(float lo, float hi) {
    return (unsigned)from_f32<KV>(lo).bits | ((unsigned)from_f32<KV>(hi).bits << 16);
}

// q [T, nh, HD] float32 (pre-scaled); caches [blocks, block_size, nkv, HD] bf16 or fp16; block_tables [R, W];
// tiles [num_tiles, 4] int32: (block-table row, first token in the batch, queries, position of the first);
// out [T, nh, HD]. Grid (num_tiles, nh), PREFILL_THREADS threads, dynamic shared memory for K and V tiles.
template <typename KV, typename OUT, int HD>
__global__ void __launch_bounds__(PREFILL_THREADS)
paged_prefill_attention(const float* __restrict__ q, const KV* __restrict__ k_cache, const KV* __restrict__ v_cache,
                        const i64* __restrict__ block_tables, const int* __restrict__ tiles, OUT* __restrict__ out,
                        int nh, int nkv, int block_size, int table_width) {
    vt::pdl_entry();
    constexpr int STRIDE = HD + 8;  // shared rows padded: the fragment loads of eight rows hit distinct banks
    extern __shared__ unsigned short smem[];
    unsigned short* ks = smem;
    unsigned short* vs = smem + PREFILL_BN * STRIDE;
    const int* tile = tiles + blockIdx.x * 4;
    const int nq = tile[2];
    if (nq <= 0) return;
    const i64* table = block_tables + (i64)tile[0] * table_width;
    const int q0 = tile[1], p0 = tile[3], head = blockIdx.y, kvh = head / (nh / nkv);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
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
    const int last = p0 + nq - 1;  // the tile's last query position: no key after it is read
    for (int k0 = 0; k0 <= last; k0 += PREFILL_BN) {
        // K and V tiles into shared memory, 16 bytes a load; keys past `last` are zeros (masked below).
        for (int c = threadIdx.x; c < PREFILL_BN * (HD / 8); c += PREFILL_THREADS) {
            const int key = c / (HD / 8), part = (c % (HD / 8)) * 8, pos = k0 + key;
            uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
            if (pos <= last) {
                const int b = pos / block_size;
                const i64 at = ((table[b] * block_size + (pos - b * block_size)) * nkv + kvh) * HD + part;
                kv = *reinterpret_cast<const uint4*>(k_cache + at);
                vv = *reinterpret_cast<const uint4*>(v_cache + at);
            }
            *reinterpret_cast<uint4*>(ks + key * STRIDE + part) = kv;
            *reinterpret_cast<uint4*>(vs + key * STRIDE + part) = vv;
        }
        __syncthreads();
        float sc[PREFILL_BN / 8][4];  // S = Q K^T for this warp's sixteen rows and the tile's keys
#pragma unroll
        for (int n = 0; n < PREFILL_BN / 8; n++) {
            sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
            const unsigned short* kr = ks + (8 * n + g) * STRIDE + 2 * tig;
#pragma unroll
            for (int s = 0; s < HD / 16; s++) {
                const unsigned b0 = *reinterpret_cast<const unsigned*>(kr + 16 * s);
                const unsigned b1 = *reinterpret_cast<const unsigned*>(kr + 16 * s + 8);
                Mma<KV>::run(sc[n], qa[s], b0, b1);
            }
        }
        // causal mask (a key after a row's position is not seen), then the online softmax, row by row
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int n = 0; n < PREFILL_BN / 8; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = k0 + 8 * n + 2 * tig + (e & 1), i = e >> 1;
                if (key > qpos[i]) sc[n][e] = neg_inf();
                mx[i] = fmaxf(mx[i], sc[n][e]);
            }
        }
        float alpha[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < 2; i++) {
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));  // finite: key 0 <= every position
            alpha[i] = expf(m[i] - mx[i]);
            m[i] = mx[i];
        }
        unsigned pa[PREFILL_BN / 16][4];  // P as A fragments of the second product
#pragma unroll
        for (int n = 0; n < PREFILL_BN / 8; n++) {
            float p[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                p[e] = expf(sc[n][e] - m[e >> 1]);
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
#pragma unroll
        for (int j = 0; j < HD / 8; j++) {
            o[j][0] *= alpha[0]; o[j][1] *= alpha[0];  // the online-softmax rescale to the new max
            o[j][2] *= alpha[1]; o[j][3] *= alpha[1];
#pragma unroll
            for (int s = 0; s < PREFILL_BN / 16; s++) {
                const unsigned short* vc = vs + (16 * s + 2 * tig) * STRIDE + 8 * j + g;
                const unsigned b0 = (unsigned)vc[0] | ((unsigned)vc[STRIDE] << 16);
                const unsigned b1 = (unsigned)vc[8 * STRIDE] | ((unsigned)vc[9 * STRIDE] << 16);
                Mma<KV>::run(o[j], pa[s], b0, b1);
            }
        }
        __syncthreads();  // before the next tile overwrites K and V
    }
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
