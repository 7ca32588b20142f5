// Paged decode attention (flash-decoding): each token's query heads attend the keys of its sequence, read
// straight from the paged cache through the block table (table[position / block_size]): no gather of the
// cache, no float32 copy of it. One block serves one KV head of one token for one partition of the context,
// and all G query heads that share that KV head (GQA), so every key and value is read once per token.
// Each warp runs its own online softmax (a running max, sum and output per head, float32) over its share of
// the partition's keys, with no barrier inside the loop; the block merges its warps' states at their common
// max once at the end. A context longer than one partition is split across blocks (gridDim.z, static: the
// graph's table width fixes it) whose partial results the reduce kernel combines. Any number of tokens per
// sequence (speculative verification: each token carries its own position and sees keys up to it).
#include "rope_head.cuh"

namespace vt {

constexpr int DECODE_THREADS = 256;  // eight warps, each with its own keys in flight
constexpr int DECODE_WARPS = DECODE_THREADS / 32;

template <typename KV, int HD>
struct DecodeLayout {
    static constexpr int VEC = 16 / sizeof(KV);                  // elements in one 16-byte load
    static constexpr int TPK = (HD / VEC) < 32 ? HD / VEC : 32;  // threads sharing one key
    static constexpr int DPT = HD / TPK;                         // dims a thread holds
    static constexpr int WKP = 32 / TPK;                         // keys one pass of a warp covers
    static constexpr int KPP = DECODE_WARPS * WKP;               // keys one pass of the block covers
    static constexpr int PASSES = KPP >= 64 ? 1 : 64 / KPP;      // a block's tile is at least 64 keys
    static constexpr int WTILE = WKP * PASSES;                   // a warp's keys a tile, consecutive
    static constexpr int TILE = KPP * PASSES;
    static constexpr int NV = DPT / VEC;                         // 16-byte vectors a thread loads per key
    // a key's dot product is summed over its TPK lanes by xor shuffles: any other count would mix keys' lanes
    static_assert((TPK & (TPK - 1)) == 0 && TPK * DPT == HD && DPT % VEC == 0, "HD / VEC lanes, a power of two");
};

// The byte offsets in the cache of this thread's keys in the warp's tile at t0 (PASSES keys, through the block
// table), -1 past `end`: looked up a tile ahead of their loads, so a tile's reads never wait on its table
// entries. The block size is a power of two (the binding checks): a key's block is key >> shift, its slot
// key & mask; 32-bit offsets but the block's, one wide multiply (a block id fits an int; the binding checks).
struct CacheGeometry {
    int shift, mask;
    unsigned slot_bytes;       // one slot: nkv heads of HD
    unsigned long long block_bytes;
};
__device__ __forceinline__ long long cache_row(const i64* __restrict__ table, int key, const CacheGeometry& cg) {
    return (long long)((unsigned)table[(unsigned)key >> cg.shift] * cg.block_bytes +
                       (unsigned)(key & cg.mask) * cg.slot_bytes);
}
template <typename L>
__device__ __forceinline__ void rows_of(const i64* __restrict__ table, int t0, int end, int kw,
                                        const CacheGeometry& cg, long long (&row)[L::PASSES]) {
#pragma unroll
    for (int ps = 0; ps < L::PASSES; ps++) {
        const int key = t0 + ps * L::WKP + kw;
        row[ps] = key < end ? cache_row(table, key, cg) : -1;
    }
}

// Requests the keys and values of those rows (each key's DPT dims of this thread as NV raw vectors, `inner`
// bytes into the key's slot); a row of -1 is neither requested nor marked valid.
template <typename KV, typename L>
__device__ __forceinline__ void load_tile(const char* __restrict__ k_bytes, long long v_minus_k,
                                          const long long (&row)[L::PASSES], unsigned inner,
                                          uint4 (&k)[L::PASSES][L::NV], uint4 (&v)[L::PASSES][L::NV],
                                          bool (&valid)[L::PASSES]) {
#pragma unroll
    for (int ps = 0; ps < L::PASSES; ps++) {
        valid[ps] = row[ps] >= 0;
        if (valid[ps]) {
            const uint4* kp = reinterpret_cast<const uint4*>(k_bytes + row[ps] + inner);
            const uint4* vp = reinterpret_cast<const uint4*>(k_bytes + row[ps] + inner + v_minus_k);
#pragma unroll
            for (int j = 0; j < L::NV; j++) {
                k[ps][j] = kp[j];
                v[ps][j] = vp[j];
            }
        }
    }
}

template <typename KV, typename L>
__device__ __forceinline__ void widen_vec(const uint4 (&raw)[L::NV], float* out) {
#pragma unroll
    for (int j = 0; j < L::NV; j++) {
        const KV* e = reinterpret_cast<const KV*>(&raw[j]);
#pragma unroll
        for (int i = 0; i < L::VEC; i++) out[j * L::VEC + i] = to_f32(e[i]);
    }
}

// A value summed (or maxed) over the warp's key groups: lanes that share dims, TPK apart.
template <typename L> __device__ __forceinline__ float across_keys_sum(float v) {
#pragma unroll
    for (int o = L::TPK; o < 32; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <typename L> __device__ __forceinline__ float across_keys_max(float v) {
#pragma unroll
    for (int o = L::TPK; o < 32; o <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Two blocks an SM (128 registers at most) where a 16-bit cache, head dims up to 128 and at most two query heads a
// KV head fit them without spilling (ptxas); else one.
template <typename KV, int HD, int G>
constexpr int DECODE_MIN_BLOCKS = sizeof(KV) == 2 && HD <= 128 && G <= 2 ? 2 : 1;

// Where a block of either decode kernel sits: its KV head, partition, token and query heads, the token's context
// and the partition's keys [start, end), the table row and the cache geometry. Grid (nkv x S, T, P); with S > 1
// (a launch of few blocks: decode_attention.py's head_split), the KV head's query heads are dealt out S ways, G to a
// block: every block still reads its KV head's keys once (S blocks read them, the later ones from L2), and a
// token's attention runs on S times the SMs with 1/S of the heads' arithmetic each.
template <typename KV, int HD, int G>
struct DecodePlace {
    int kvh, p, P, head0, nh, ctx, start, end;
    i64 t;
    const i64* table;
    CacheGeometry cg;
    unsigned inner;

    __device__ __forceinline__ DecodePlace(const i64* __restrict__ block_tables, const i64* __restrict__ token_row,
                                           const i64* __restrict__ positions, int nkv, int block_size,
                                           int table_width, int partition) {
        using L = DecodeLayout<KV, HD>;
        kvh = blockIdx.x / (gridDim.x / nkv);
        p = blockIdx.z;
        P = gridDim.z;
        head0 = blockIdx.x * G;  // this block's first query head: the KV head's, G per block
        nh = gridDim.x * G;
        t = blockIdx.y;
        ctx = min((int)positions[t] + 1, table_width * block_size);
        start = p * partition;
        end = min(ctx, start + partition);
        table = block_tables + token_row[t] * table_width;
        cg.shift = __ffs(block_size) - 1;
        cg.mask = block_size - 1;
        cg.slot_bytes = (unsigned)(nkv * HD * sizeof(KV));
        cg.block_bytes = (unsigned long long)cg.slot_bytes * block_size;
        inner = (unsigned)((kvh * HD + (threadIdx.x & 31) % L::TPK * L::DPT) * sizeof(KV));
    }
    // past the token's context: the reduce kernel reads only partitions before it
    __device__ __forceinline__ bool idle() const { return start >= ctx; }
};

// The end of a block's walk over its partition: each warp's key groups summed by shuffles (they share the warp's
// max), then the warps' states through shared memory, each weighted at the block's common max, HC of its N heads
// (or rows) a round (a warp with no key has m = -inf and weighs nothing); each head whose bit is set in `live`
// writes out, or its partition's partials for the reduce kernel, at row `at(h)` of [T x nh]. Every thread calls it.
template <typename KV, typename OUT, int HD, int N, typename At>
__device__ __forceinline__ void merge_warps(const float (&acc)[N][DecodeLayout<KV, HD>::DPT], const float (&m)[N],
                                            const float (&l)[N], unsigned live, At at, int p, int P,
                                            OUT* __restrict__ out, float* __restrict__ part_o,
                                            float* __restrict__ part_ml, float* sink = nullptr) {
    using L = DecodeLayout<KV, HD>;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, dg = lane % L::TPK;
    constexpr int HC_MAX = 4096 / (DECODE_WARPS * HD) > 0 ? 4096 / (DECODE_WARPS * HD) : 1;
    constexpr int HC = N < HC_MAX ? N : HC_MAX;
    __shared__ float red[HC][DECODE_WARPS][HD];  // 16 KB at most: HC heads' per-warp sums
    __shared__ float wm[DECODE_WARPS][N], wl[DECODE_WARPS][N];
    if (lane == 0) {
#pragma unroll
        for (int h = 0; h < N; h++) { wm[warp][h] = m[h]; wl[warp][h] = l[h]; }
    }
#pragma unroll
    for (int h0 = 0; h0 < N; h0 += HC) {
#pragma unroll
        for (int hh = 0; hh < HC; hh++) {
            if (h0 + hh >= N) break;
#pragma unroll
            for (int i = 0; i < L::DPT; i++) {
                const float v = across_keys_sum<L>(acc[h0 + hh][i]);
                if (lane < L::TPK) red[hh][warp][dg * L::DPT + i] = v;
            }
        }
        __syncthreads();
        for (int j = tid; j < HC * HD; j += DECODE_THREADS) {
            const int hh = j / HD, d = j - hh * HD, h = h0 + hh;
            if (h >= N) break;
            if (!(live >> h & 1u)) continue;
            float M = neg_inf();
#pragma unroll
            for (int w = 0; w < DECODE_WARPS; w++) M = fmaxf(M, wm[w][h]);  // finite: the block has a key
            float o = 0.0f, lsum = 0.0f;
#pragma unroll
            for (int w = 0; w < DECODE_WARPS; w++) {
                const float f = exp2_ftz(wm[w][h] - M);  // a warp's weight at the block's max
                o += f * red[hh][w][d];
                lsum += f * wl[w][h];
            }
            o /= lsum;
            if (sink != nullptr) {  // a cluster's partition: its partials stay in this block's shared memory
                sink[h * HD + d] = o;
                if (d == 0) { sink[N * HD + 2 * h] = M * LN2; sink[N * HD + 2 * h + 1] = lsum; }
                continue;
            }
            const i64 row = at(h);
            if (P == 1) out[row * HD + d] = from_f32<OUT>(o);
            else part_o[(row * P + p) * HD + d] = o;
            if (P > 1 && d == 0) {
                part_ml[(row * P + p) * 2] = M * LN2;  // natural units, as the reduce kernel reads
                part_ml[(row * P + p) * 2 + 1] = lsum;
            }
        }
        __syncthreads();
    }
}

// A warp's walk over its partition, started: the keys and values of its first tile in registers (raw 16-byte
// vectors), with `ahead` those of its second tile too (kn, vn), and the cache rows of the tile after those.
template <typename L>
struct KeyPipe {
    uint4 k[L::PASSES][L::NV], v[L::PASSES][L::NV];
    uint4 kn[L::PASSES][L::NV], vn[L::PASSES][L::NV];
    bool valid[L::PASSES], valid_next[L::PASSES];
    long long row[L::PASSES];
    bool ahead;
};

// The warp's first tile [first, first + TILE) requested (with TILES == 2 its second tile as well), their keys at
// or past `load_end` left unread (invalid), and the next tile's rows looked up up to the partition's end. TILES is
// a template argument: a one-tile instance keeps the next tile's registers dead until its loop, as before.
template <typename KV, int HD, int G, int TILES = 1>
__device__ __forceinline__ int start_pipe(const DecodePlace<KV, HD, G>& at, const char* k_bytes, long long v_minus_k,
                                          int load_end, KeyPipe<DecodeLayout<KV, HD>>& pipe) {
    static_assert(TILES == 1 || TILES == 2, "one or two tiles requested at once");
    using L = DecodeLayout<KV, HD>;
    const int first = at.start + (threadIdx.x >> 5) * L::WTILE, kw = (threadIdx.x & 31) / L::TPK;
    rows_of<L>(at.table, first, load_end, kw, at.cg, pipe.row);
    load_tile<KV, L>(k_bytes, v_minus_k, pipe.row, at.inner, pipe.k, pipe.v, pipe.valid);
    pipe.ahead = TILES > 1 && first + L::TILE < at.end;
    if (pipe.ahead) {
        rows_of<L>(at.table, first + L::TILE, load_end, kw, at.cg, pipe.row);
        load_tile<KV, L>(k_bytes, v_minus_k, pipe.row, at.inner, pipe.kn, pipe.vn, pipe.valid_next);
    } else {
#pragma unroll
        for (int ps = 0; ps < L::PASSES; ps++) pipe.valid_next[ps] = false;
    }
    rows_of<L>(at.table, first + (pipe.ahead ? 2 : 1) * L::TILE, at.end, kw, at.cg, pipe.row);
    return first;
}

// The block's partition of keys for its G query heads qr (this thread's dims, in log2 units: q times log2 e), read
// from the caches (k_bytes, v at v_minus_k bytes from k) through a started pipe: out, or the partition's partials
// for the reduce kernel.
template <typename KV, typename OUT, int HD, int G>
__device__ __forceinline__ void attend_partition(const DecodePlace<KV, HD, G>& at,
                                                 const float (&qr)[G][DecodeLayout<KV, HD>::DPT],
                                                 KeyPipe<DecodeLayout<KV, HD>>& pipe, int first,
                                                 const char* k_bytes, long long v_minus_k, OUT* __restrict__ out,
                                                 float* __restrict__ part_o, float* __restrict__ part_ml,
                                                 float* sink = nullptr) {
    using L = DecodeLayout<KV, HD>;
    const int end = at.end, head0 = at.head0, nh = at.nh, p = at.p, P = at.P;
    const i64 t = at.t;
    const i64* table = at.table;
    const CacheGeometry& cg = at.cg;
    const unsigned inner = at.inner;
    float acc[G][L::DPT], m[G], l[G];  // m and l: the same in every lane of the warp
#pragma unroll
    for (int h = 0; h < G; h++) {
#pragma unroll
        for (int i = 0; i < L::DPT; i++) acc[h][i] = 0.0f;
        m[h] = neg_inf();
        l[h] = 0.0f;
    }

    // The warp's keys and values arrive as raw 16-byte vectors; the next tile's are requested before this
    // tile is computed, and the table entries of the tile after it, so every warp always has loads in flight
    // (the cache is read once, at the bandwidth the loads in flight allow). No barrier: each warp's softmax
    // state is its own until the merge.
    auto& kc = pipe.k;
    auto& vc = pipe.v;
    auto& valid = pipe.valid;
    auto& row = pipe.row;
    auto& kn = pipe.kn;
    auto& vn = pipe.vn;
    auto& valid_next = pipe.valid_next;
    const int kw = (threadIdx.x & 31) / L::TPK;
    for (int t0 = first; t0 < end; t0 += L::TILE) {
        if (pipe.ahead) {  // the second tile was requested with the first (start_pipe's tiles == 2)
            pipe.ahead = false;
        } else if (t0 + L::TILE < end) {
            load_tile<KV, L>(k_bytes, v_minus_k, row, inner, kn, vn, valid_next);
            rows_of<L>(table, t0 + 2 * L::TILE, end, kw, cg, row);
        }
        float sc[L::PASSES][G];
#pragma unroll
        for (int ps = 0; ps < L::PASSES; ps++) {
            float kf[L::DPT];
            widen_vec<KV, L>(kc[ps], kf);
#pragma unroll
            for (int h = 0; h < G; h++) {
                float dot = 0.0f;
#pragma unroll
                for (int i = 0; i < L::DPT; i++) dot += qr[h][i] * kf[i];
#pragma unroll
                for (int o = L::TPK / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
                sc[ps][h] = valid[ps] ? dot : neg_inf();
            }
        }
#pragma unroll
        for (int h = 0; h < G; h++) {
            float mx = sc[0][h];
#pragma unroll
            for (int ps = 1; ps < L::PASSES; ps++) mx = fmaxf(mx, sc[ps][h]);
            const float m_new = fmaxf(m[h], across_keys_max<L>(mx));  // finite: the tile's first key is valid
            const float a = exp2_ftz(m[h] - m_new);
            float sum = 0.0f;
#pragma unroll
            for (int ps = 0; ps < L::PASSES; ps++) {
                sc[ps][h] = exp2_ftz(sc[ps][h] - m_new);
                sum += sc[ps][h];
            }
            l[h] = l[h] * a + across_keys_sum<L>(sum);
            m[h] = m_new;
            if (a != 1.0f) {  // the max moved (a is the same in every lane)
#pragma unroll
                for (int i = 0; i < L::DPT; i++) acc[h][i] *= a;  // the online-softmax rescale
            }
        }
#pragma unroll
        for (int ps = 0; ps < L::PASSES; ps++) {
            if (!valid[ps]) continue;  // a key past the context is never read: its value may be anything
            float vf[L::DPT];
            widen_vec<KV, L>(vc[ps], vf);
#pragma unroll
            for (int h = 0; h < G; h++) {
#pragma unroll
                for (int i = 0; i < L::DPT; i++) acc[h][i] += sc[ps][h] * vf[i];
            }
        }
#pragma unroll
        for (int ps = 0; ps < L::PASSES; ps++) {
            valid[ps] = valid_next[ps];
#pragma unroll
            for (int v = 0; v < L::NV; v++) { kc[ps][v] = kn[ps][v]; vc[ps][v] = vn[ps][v]; }
        }
    }

    merge_warps<KV, OUT, HD, G>(acc, m, l, ~0u, [&](int h) { return t * nh + head0 + h; }, p, P, out, part_o,
                                part_ml, sink);
}

// q [T, nh, HD] float32, pre-scaled; caches [blocks, block_size, nkv, HD]; block_tables [R, W]; token_row
// and positions [T]; out [T, nh, HD] when the grid has one partition, else part_o [T, nh, P, HD] and part_ml
// [T, nh, P, 2] (max, sum) for the reduce kernel. Grid (nkv x S, T, P) (DecodePlace); DECODE_THREADS threads.
template <typename KV, typename OUT, int HD, int G>
__global__ void __launch_bounds__(DECODE_THREADS, DECODE_MIN_BLOCKS<KV, HD, G>)
paged_decode_attention(const float* __restrict__ q, const KV* __restrict__ k_cache, const KV* __restrict__ v_cache,
                       const i64* __restrict__ block_tables, const i64* __restrict__ token_row,
                       const i64* __restrict__ positions, OUT* __restrict__ out, float* __restrict__ part_o,
                       float* __restrict__ part_ml, int nkv, int block_size, int table_width, int partition) {
    vt::pdl_entry();
    using L = DecodeLayout<KV, HD>;
    const DecodePlace<KV, HD, G> at(block_tables, token_row, positions, nkv, block_size, table_width, partition);
    if (at.idle()) return;
    const int dg = (threadIdx.x & 31) % L::TPK;
    // Scores in log2 units (q times log2 e), so each weight is one exp2 instruction; m in the same units, turned
    // back into natural units where it leaves the kernel (part_ml, for the reduce kernel).
    float qr[G][L::DPT];
#pragma unroll
    for (int h = 0; h < G; h++) {
        const float* qh = q + (at.t * at.nh + at.head0 + h) * HD + dg * L::DPT;
#pragma unroll
        for (int i = 0; i < L::DPT; i++) qr[h][i] = qh[i] * LOG2E;
    }
    const char* k_bytes = reinterpret_cast<const char*>(k_cache);
    const long long v_minus_k = reinterpret_cast<const char*>(v_cache) - k_bytes;
    KeyPipe<L> pipe;
    const int first = start_pipe<KV, HD, G>(at, k_bytes, v_minus_k, at.end, pipe);
    attend_partition<KV, OUT, HD, G>(at, qr, pipe, first, k_bytes, v_minus_k, out, part_o, part_ml);
}

// The token's own key and value at `key` into a pipe's vectors, marked valid: the rope kernel reads them after its
// write when the tile holding them was requested before its wait.
template <typename KV, int HD, int G>
__device__ __forceinline__ void read_own_key(const DecodePlace<KV, HD, G>& at, const char* k_bytes, long long v_minus_k,
                                             int key, uint4 (&k)[DecodeLayout<KV, HD>::NV],
                                             uint4 (&v)[DecodeLayout<KV, HD>::NV], bool& valid) {
    const long long own = cache_row(at.table, key, at.cg);
    const uint4* kp = reinterpret_cast<const uint4*>(k_bytes + own + at.inner);
    const uint4* vp = reinterpret_cast<const uint4*>(k_bytes + own + at.inner + v_minus_k);
#pragma unroll
    for (int j = 0; j < DecodeLayout<KV, HD>::NV; j++) { k[j] = kp[j]; v[j] = vp[j]; }
    valid = true;
}

// The partitions of a block's G query heads merged by the last of their blocks to finish, into out: the reduce
// kernel's arithmetic (paged_decode_reduce, in its order), without its launch. Every live partition's block counts
// itself in at its (token, block column) counter once its partials are written; the block that takes the count to
// np (the token's live partitions) merges; that arrival also sets the counter back to zero, in the same atomic (a
// graph replays it, the next layer takes it). Partials written by other blocks are read from L2 (ld.cg), after the fences the count orders.
constexpr int MERGE_MAX_PARTITIONS = 64;  // decode_attention.py's: more partitions go through the reduce kernel

// The merge of one head's np partitions, shared by merge_in_last_block, merge_in_cluster and the reduce kernel.
// First (a warp, lanes over partitions) each partition's weight at their common max, into weight[p]; returns the
// weights' sum in every lane. ml(2 p) and ml(2 p + 1): partition p's max (natural units) and sum, through L2 (ld.cg:
// other blocks wrote them) or another block's shared memory (a cluster); the same arithmetic whichever.
template <typename Ml>
__device__ __forceinline__ float partition_weights(Ml ml, int np, float* weight) {
    const int lane = threadIdx.x & 31;
    float M = neg_inf();
    for (int p = lane; p < np; p += 32) M = fmaxf(M, ml(2 * p));
    M = warp_max(M);
    float wsum = 0.0f;
    for (int p = lane; p < np; p += 32) {
        const float share = expf(ml(2 * p) - M) * ml(2 * p + 1);  // a part's weight
        weight[p] = share;
        wsum += share;
    }
    return warp_sum(wsum);
}
// Then dim d of its output: the partitions' outputs po(p, d) weighted, in partition order (all loads independent).
template <typename Po>
__device__ __forceinline__ float merged_dim(Po po, const float* weight, int np, int d) {
    float o = 0.0f;
#pragma unroll 8
    for (int p = 0; p < np; p++) o += weight[p] * po(p, d);
    return o;
}
// A head's partials in global memory ([P, 2] and [P, HD] floats), read through L2.
__device__ __forceinline__ auto l2_ml(const float* __restrict__ ml) {
    return [=](int i) { return __ldcg(ml + i); };
}
template <int HD>
__device__ __forceinline__ auto l2_po(const float* __restrict__ po) {
    return [=](int p, int d) { return __ldcg(po + (i64)p * HD + d); };
}
template <typename OUT, int HD, int G>
__device__ __forceinline__ void merge_in_last_block(i64 row0, int P, int np, const float* __restrict__ part_o,
                                                    const float* __restrict__ part_ml, OUT* __restrict__ out,
                                                    unsigned int* __restrict__ counter) {
    __shared__ float weight[G][MERGE_MAX_PARTITIONS];
    __shared__ float total[G];
    __shared__ bool last;
    __threadfence();  // this block's partials, before its count
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned arrived = atomicInc(counter, (unsigned)(np - 1));  // the last arrival sets it back to 0
        last = arrived == (unsigned)(np - 1);
    }
    __syncthreads();
    if (!last) return;
    __threadfence();  // every other block's partials, after their counts
    const int warp = threadIdx.x >> 5;
    for (int h = warp; h < G; h += DECODE_WARPS) {
        const float wsum = partition_weights(l2_ml(part_ml + (row0 + h) * P * 2), np, weight[h]);
        if ((threadIdx.x & 31) == 0) total[h] = wsum;
    }
    __syncthreads();
    for (int j = threadIdx.x; j < G * HD; j += DECODE_THREADS) {
        const int h = j / HD, d = j - h * HD;
        const float o = merged_dim(l2_po<HD>(part_o + (row0 + h) * (i64)P * HD), weight[h], np, d);
        out[(row0 + h) * HD + d] = from_f32<OUT>(o / total[h]);
    }
}

// The partitions of a block's G query heads merged inside their thread-block cluster (sm_90; the cluster is a
// token's P = DECODE_CLUSTER partitions of one block column, rank p), into out: each live partition's partials
// (merge_warps' sink: o [G, HD], then (max, sum) [G, 2]) stay in its block's shared memory, and rank 0 merges them
// through distributed shared memory with the reduce kernel's arithmetic, in its order. No partials through L2, no
// fence, no counter. Every block of the cluster, an idle one too, passes both barriers: the second keeps each
// block's shared memory alive until rank 0 has read it.
constexpr int DECODE_CLUSTER = 2;  // decode_attention.py's: partitions a cluster (a 256-key table at the 128 floor)
template <typename OUT, int HD, int G>
__device__ __forceinline__ void merge_in_cluster(i64 row0, int np, const float* sink, OUT* __restrict__ out) {
    __shared__ float weight[G][DECODE_CLUSTER];
    __shared__ float total[G];
    cluster_sync();  // every partition's partials written (release), and readable here (acquire)
    if (cluster_rank() == 0) {
        const int warp = threadIdx.x >> 5;
        for (int h = warp; h < G; h += DECODE_WARPS) {
            const float wsum = partition_weights([=](int i) { return cluster_load(sink + G * HD + 2 * h + i % 2, i / 2); },
                                                 np, weight[h]);
            if ((threadIdx.x & 31) == 0) total[h] = wsum;
        }
        __syncthreads();
        for (int j = threadIdx.x; j < G * HD; j += DECODE_THREADS) {
            const int h = j / HD, d = j - h * HD;
            const float o = merged_dim([=](int p, int dd) { return cluster_load(sink + h * HD + dd, p); }, weight[h],
                                       np, d);
            out[(row0 + h) * HD + d] = from_f32<OUT>(o / total[h]);
        }
    }
    cluster_sync();  // rank 0 has read every block's partials
}

// paged_decode_attention with the token's q/k norm, rotary and KV write (rotary.cu's qk_norm_rope_store) in its
// prologue: one launch a layer fewer for a decode step of one token a sequence. Each block computes its G query
// heads from qkv into shared memory; the blocks of a token's last partition (the one holding its own key) also
// compute its KV head's k and v and write them at the token's slot, then attend keys that include it (a block's
// global writes are visible to its own threads past the barrier; the S blocks of a head split write the same
// bytes). The caller guarantees one token a sequence: another token of the sequence would read the slot a
// different block writes (the twin refuses it). qkv [T, (nh + 2 nkv) HD] float32, bias or null, w [nh + nkv, HD],
// rope [positions, 2 HD], slots [T] (-1: a padding row, nothing written); the rest as paged_decode_attention.
// MERGE (how a split context's partitions are merged): 0, by the reduce kernel launched after this one
// (merge_counters unread, null; the instance keeps the registers it had before the others); MERGE_LAST,
// merge_counters is [T x gridDim.x] counters at zero (zero again when the kernel ends), and with P > 1 the last block
// of a token's partitions merges them into out (merge_in_last_block); MERGE_CLUSTER, launched as clusters of
// (1, 1, DECODE_CLUSTER) blocks with P == DECODE_CLUSTER, rank 0 of each merges its cluster's partitions
// (merge_in_cluster). With either no reduce kernel is launched.
constexpr int MERGE_LAST = 1, MERGE_CLUSTER = 2;
template <typename KV, typename OUT, int HD, int G, int EARLY_TILES = 1, int MERGE = 0>
__global__ void __launch_bounds__(DECODE_THREADS, DECODE_MIN_BLOCKS<KV, HD, G>)
paged_decode_attention_rope(const float* __restrict__ qkv, const float* __restrict__ bias,
                            const float* __restrict__ w, const float* __restrict__ rope,
                            const i64* __restrict__ slots, KV* __restrict__ k_cache, KV* __restrict__ v_cache,
                            const i64* __restrict__ block_tables, const i64* __restrict__ token_row,
                            const i64* __restrict__ positions, OUT* __restrict__ out, float* __restrict__ part_o,
                            float* __restrict__ part_ml, int nkv, int block_size, int table_width, int partition,
                            int has_norm, float eps, int early_keys, unsigned int* __restrict__ merge_counters) {
    // Before the wait, what no kernel of the step writes: the step's inputs (positions, rows, tables, slots: the
    // host's uploads) and, with early_keys (VT_DECODE_EARLY_KEYS; EARLY_TILES tiles of them, 2 under
    // VT_DECODE_EARLY_TILES=2), the sequence's keys before its own (written by earlier steps; the token's own
    // key, which this kernel writes, is left unread: a forked sequence's partial block is its own copy, the prefix
    // cache shares only full blocks). The first tiles' keys and values then arrive while the kernel ahead (the qkv
    // GEMM) finishes, not after it.
    VT_READS_BEFORE_WAIT(block_tables, token_row, positions, slots, k_cache, v_cache);
    using L = DecodeLayout<KV, HD>;
    constexpr int PER = rope_per_lane<HD>();
    const DecodePlace<KV, HD, G> at(block_tables, token_row, positions, nkv, block_size, table_width, partition);
    const i64 slot = slots[at.t];
    const bool writes_kv = at.end == at.ctx && slot >= 0;  // the partition holding the token's own key
    const char* k_bytes = reinterpret_cast<const char*>(k_cache);
    const long long v_minus_k = reinterpret_cast<const char*>(v_cache) - k_bytes;
    KeyPipe<L> pipe;
    int first = 0;
    if (early_keys && !at.idle())
        first = start_pipe<KV, HD, G, EARLY_TILES>(at, k_bytes, v_minus_k, writes_kv ? at.ctx - 1 : at.end, pipe);
    vt::pdl_entry();
    if constexpr (MERGE == MERGE_CLUSTER) {  // launched otherwise, rank 0 would read past its cluster or its weights
        if (cluster_blocks() != DECODE_CLUSTER || gridDim.z != DECODE_CLUSTER) __trap();
    }
    if (at.idle()) {
        if constexpr (MERGE == MERGE_CLUSTER) { cluster_sync(); cluster_sync(); }  // merge_in_cluster's barriers
        return;
    }
    __shared__ float qs[G][HD];
    // MERGE_CLUSTER: this partition's partials for rank 0 (merge_warps' sink: o [G, HD], then (max, sum) [G, 2])
    __shared__ float sink[MERGE == MERGE_CLUSTER ? G * HD + 2 * G : 1];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, dg = lane % L::TPK;
    const int heads = at.nh + 2 * nkv;
    const float* cos_sin = rope + positions[at.t] * (2 * HD);
    // warp j < G: query head head0 + j; warp G: the KV head's k; warp G + 1: its v (dealt round the warps)
    for (int job = warp; job < G + 2; job += DECODE_WARPS) {
        if (job >= G && !writes_kv) break;
        const int h = job < G ? at.head0 + job : job == G ? at.nh + at.kvh : at.nh + nkv + at.kvh;
        float v[PER];
        load_head<HD>(v, qkv, bias, at.t, heads, h);
        if (job < G + 1) norm_rope_head<HD>(v, w + h * HD, cos_sin, has_norm, eps);
        if (!(HD >= 32 || lane < HD)) continue;
#pragma unroll
        for (int j = 0; j < PER; j++) {
            const int d = lane + 32 * j;
            if (job < G) qs[job][d] = v[j];
            else if (job == G) k_cache[(slot * nkv + at.kvh) * HD + d] = from_f32<KV>(v[j]);
            else v_cache[(slot * nkv + at.kvh) * HD + d] = from_f32<KV>(v[j]);
        }
    }
    __syncthreads();  // q in shared memory; the new key and value visible to every thread of the block
    if (!early_keys) {
        first = start_pipe<KV, HD, G>(at, k_bytes, v_minus_k, at.end, pipe);
    } else if (writes_kv) {  // the token's own key, where it falls in a tile read early: read now, after its write
        const int kw = (threadIdx.x & 31) / L::TPK;
#pragma unroll
        for (int ps = 0; ps < L::PASSES; ps++) {
            const int key = first + ps * L::WKP + kw;
            if (key == at.ctx - 1) read_own_key<KV, HD, G>(at, k_bytes, v_minus_k, key, pipe.k[ps], pipe.v[ps],
                                                           pipe.valid[ps]);
            else if (pipe.ahead && key + L::TILE == at.ctx - 1)  // in the second tile (EARLY_TILES == 2)
                read_own_key<KV, HD, G>(at, k_bytes, v_minus_k, key + L::TILE, pipe.kn[ps], pipe.vn[ps],
                                        pipe.valid_next[ps]);
        }
    }
    float qr[G][L::DPT];
#pragma unroll
    for (int h = 0; h < G; h++) {
#pragma unroll
        for (int i = 0; i < L::DPT; i++) qr[h][i] = qs[h][dg * L::DPT + i] * LOG2E;
    }
    attend_partition<KV, OUT, HD, G>(at, qr, pipe, first, k_bytes, v_minus_k, out, part_o, part_ml,
                                     MERGE == MERGE_CLUSTER ? sink : nullptr);
    // else the reduce kernel merges the partitions (an instance apart: its registers)
    if constexpr (MERGE == MERGE_LAST) {
        if (at.P > 1)
            merge_in_last_block<OUT, HD, G>(at.t * at.nh + at.head0, at.P,
                                            min(at.P, (at.ctx + partition - 1) / partition), part_o, part_ml, out,
                                            merge_counters + at.t * gridDim.x + blockIdx.x);
    } else if constexpr (MERGE == MERGE_CLUSTER) {
        merge_in_cluster<OUT, HD, G>(at.t * at.nh + at.head0, min(at.P, (at.ctx + partition - 1) / partition), sink,
                                     out);
    }
}

// paged_decode_attention for a step whose rows share sequences (a short prefill run whole, a row a token: the
// graph driver's "rows apart" graphs): a block serves R consecutive rows for one query head, and the rows of one
// sequence among them (one table row) read each key once between them, where the plain kernel's blocks read the
// same keys once a row. Each row keeps its own causal end (its position), its own online softmax and its own merge,
// in the plain kernel's order over the plain kernel's tiles (a row's tiles end at its end; a later row's keys in its
// last tile are masked and never weighed), so a row's output is the plain kernel's bit for bit. Rows of other
// sequences in the same R are served in turn. The graph driver gives a run of rows with one table one token_row
// (graph_driver.py `shared_token_rows`). Grid (nh, ceil(T / R), P); DECODE_THREADS threads; q, caches, tables, out
// and partials as paged_decode_attention.
template <typename KV, typename OUT, int HD, int R>
__device__ __forceinline__ void attend_rows(const float (&qr)[R][DecodeLayout<KV, HD>::DPT], const int (&ends)[R],
                                            unsigned live, int reach, int start, int p, int P, int nh,
                                            int head, i64 t0, const i64* __restrict__ table, const CacheGeometry& cg,
                                            unsigned inner, const char* k_bytes, long long v_minus_k,
                                            OUT* __restrict__ out, float* __restrict__ part_o,
                                            float* __restrict__ part_ml) {
    using L = DecodeLayout<KV, HD>;
    const int warp = threadIdx.x >> 5, kw = (threadIdx.x & 31) / L::TPK;
    float acc[R][L::DPT], m[R], l[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
        for (int i = 0; i < L::DPT; i++) acc[r][i] = 0.0f;
        m[r] = neg_inf();
        l[r] = 0.0f;
    }
    uint4 kc[L::PASSES][L::NV], vc[L::PASSES][L::NV], kn[L::PASSES][L::NV], vn[L::PASSES][L::NV];
    bool valid[L::PASSES], valid_next[L::PASSES] = {};
    long long row[L::PASSES];
    const int first = start + warp * L::WTILE;
    rows_of<L>(table, first, reach, kw, cg, row);
    load_tile<KV, L>(k_bytes, v_minus_k, row, inner, kc, vc, valid);
    rows_of<L>(table, first + L::TILE, reach, kw, cg, row);
    for (int k0 = first; k0 < reach; k0 += L::TILE) {
        if (k0 + L::TILE < reach) {
            load_tile<KV, L>(k_bytes, v_minus_k, row, inner, kn, vn, valid_next);
            rows_of<L>(table, k0 + 2 * L::TILE, reach, kw, cg, row);
        }
        float sc[L::PASSES][R];
#pragma unroll
        for (int ps = 0; ps < L::PASSES; ps++) {
            float kf[L::DPT];
            widen_vec<KV, L>(kc[ps], kf);
            const int key = k0 + ps * L::WKP + kw;
#pragma unroll
            for (int r = 0; r < R; r++) {
                float dot = 0.0f;
#pragma unroll
                for (int i = 0; i < L::DPT; i++) dot += qr[r][i] * kf[i];
#pragma unroll
                for (int o = L::TPK / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
                sc[ps][r] = valid[ps] && key < ends[r] ? dot : neg_inf();  // a row's own causal end
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (k0 >= ends[r]) continue;  // past this row's end: the plain kernel's warp has left its loop
            float mx = sc[0][r];
#pragma unroll
            for (int ps = 1; ps < L::PASSES; ps++) mx = fmaxf(mx, sc[ps][r]);
            const float m_new = fmaxf(m[r], across_keys_max<L>(mx));  // finite: the tile's first key is the row's
            const float a = exp2_ftz(m[r] - m_new);
            float sum = 0.0f;
#pragma unroll
            for (int ps = 0; ps < L::PASSES; ps++) {
                sc[ps][r] = exp2_ftz(sc[ps][r] - m_new);
                sum += sc[ps][r];
            }
            l[r] = l[r] * a + across_keys_sum<L>(sum);
            m[r] = m_new;
            if (a != 1.0f) {
#pragma unroll
                for (int i = 0; i < L::DPT; i++) acc[r][i] *= a;  // the online-softmax rescale
            }
        }
#pragma unroll
        for (int ps = 0; ps < L::PASSES; ps++) {
            if (!valid[ps]) continue;  // past every row's end: never read
            float vf[L::DPT];
            widen_vec<KV, L>(vc[ps], vf);
            const int key = k0 + ps * L::WKP + kw;
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (key >= ends[r]) continue;  // a later row's key: this row never weighs it, even as 0 x inf
#pragma unroll
                for (int i = 0; i < L::DPT; i++) acc[r][i] += sc[ps][r] * vf[i];
            }
        }
#pragma unroll
        for (int ps = 0; ps < L::PASSES; ps++) {
            valid[ps] = valid_next[ps];
#pragma unroll
            for (int v = 0; v < L::NV; v++) { kc[ps][v] = kn[ps][v]; vc[ps][v] = vn[ps][v]; }
        }
    }

    merge_warps<KV, OUT, HD, R>(acc, m, l, live, [&](int r) { return (t0 + r) * nh + head; }, p, P, out, part_o,
                                part_ml);
}

template <typename KV, typename OUT, int HD, int R>
__global__ void __launch_bounds__(DECODE_THREADS, DECODE_MIN_BLOCKS<KV, HD, R>)
paged_decode_attention_rows(const float* __restrict__ q, const KV* __restrict__ k_cache,
                            const KV* __restrict__ v_cache, const i64* __restrict__ block_tables,
                            const i64* __restrict__ token_row, const i64* __restrict__ positions,
                            OUT* __restrict__ out, float* __restrict__ part_o, float* __restrict__ part_ml, int T,
                            int nkv, int block_size, int table_width, int partition) {
    vt::pdl_entry();
    using L = DecodeLayout<KV, HD>;
    const int head = blockIdx.x, nh = gridDim.x, kvh = head / (nh / nkv), p = blockIdx.z, P = gridDim.z;
    const int g0 = blockIdx.y * R, gn = min(R, T - g0), start = p * partition, dg = (threadIdx.x & 31) % L::TPK;
    CacheGeometry cg;
    cg.shift = __ffs(block_size) - 1;
    cg.mask = block_size - 1;
    cg.slot_bytes = (unsigned)(nkv * HD * sizeof(KV));
    cg.block_bytes = (unsigned long long)cg.slot_bytes * block_size;
    const unsigned inner = (unsigned)((kvh * HD + dg * L::DPT) * sizeof(KV));
    const char* k_bytes = reinterpret_cast<const char*>(k_cache);
    const long long v_minus_k = reinterpret_cast<const char*>(v_cache) - k_bytes;
    // The block's rows in runs of one sequence (the same table row); every thread walks the same runs.
    for (int lead = 0; lead < gn;) {
        const i64 trow = token_row[g0 + lead];
        int n = 1;
        while (lead + n < gn && token_row[g0 + lead + n] == trow) n++;
        int ends[R], reach = start;
        unsigned live = 0;  // a bit a row: the reduce kernel reads only partitions before a row's context ends
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int ctx = r < n ? min((int)positions[g0 + lead + r] + 1, table_width * block_size) : 0;
            live |= (unsigned)(start < ctx) << r;
            ends[r] = start < ctx ? min(ctx, start + partition) : start;
            reach = max(reach, ends[r]);
        }
        if (reach > start) {
            float qr[R][L::DPT];
#pragma unroll
            for (int r = 0; r < R; r++) {
                const bool on = live >> r & 1u;
                const float* qh = q + ((g0 + lead + (on ? r : 0)) * (i64)nh + head) * HD + dg * L::DPT;
#pragma unroll
                for (int i = 0; i < L::DPT; i++) qr[r][i] = on ? qh[i] * LOG2E : 0.0f;
            }
            attend_rows<KV, OUT, HD, R>(qr, ends, live, reach, start, p, P, nh, head, g0 + lead,
                                        block_tables + trow * table_width, cg, inner, k_bytes, v_minus_k, out,
                                        part_o, part_ml);
        }
        lead += n;
    }
}

// out[t, head] = the partitions' outputs weighted by their softmax sums, rescaled to the common max.
// Grid (nh, T); HD threads (at least a warp). Warp 0 finds the max and each partition's weight once (a lane a
// partition), then every thread sums its dim over the partitions with all loads independent.
constexpr int DECODE_MAX_PARTITIONS = 256;   // decode_attention.py: a launch splits a context at most this often
template <typename OUT, int HD>
__global__ void paged_decode_reduce(const float* __restrict__ part_o, const float* __restrict__ part_ml,
                                    const i64* __restrict__ positions, OUT* __restrict__ out, int nh, int P,
                                    int partition, int max_context) {
    vt::pdl_entry();
    __shared__ float weight[DECODE_MAX_PARTITIONS];
    __shared__ float total;
    const int head = blockIdx.x;
    const i64 t = blockIdx.y;
    const int ctx = min((int)positions[t] + 1, max_context);
    const int np = min(P, (ctx + partition - 1) / partition);
    if (threadIdx.x < 32) {
        const float wsum = partition_weights(l2_ml(part_ml + (t * nh + head) * P * 2), np, weight);
        if (threadIdx.x == 0) total = wsum;
    }
    __syncthreads();
    const float* po = part_o + (t * nh + head) * (i64)P * HD;
    for (int d = threadIdx.x; d < HD; d += blockDim.x)
        out[(t * nh + head) * HD + d] = from_f32<OUT>(merged_dim(l2_po<HD>(po), weight, np, d) / total);
}

}  // namespace vt
