// The batched sampler as one kernel: a block of VT_SAMPLER_THREADS threads per row. Semantics are
// vt/engine/sample/sampler.py's (its NumPy twin, `_sample_numpy`). Thresholds come from radix selection over
// order-preserving float keys (4 passes of 8 bits, histograms in shared memory): the k-th largest key for
// top-k and for the logprobs' top-n, and the largest key whose kept mass reaches top_p. Masses are
// fixed-point integers, so every sum (and so every decision) is the same whatever order threads add in.
// It allocates nothing: it runs inside a captured decode graph. The row layout comes from the binding
// (backends/kernels/sampler.py) as macros: VT_NF floats and VT_NI ints per row, the first VT_NFI ints
// named fields and the rest banned ids, VT_NLP logprob slots. A row's logit bias (and allowed tokens) is
// W (token, bias) pairs; the raw logits of those tokens are kept in bias_raw for the sampled token's logprob.
typedef unsigned long long u64;
typedef unsigned int u32;
// Defaults (the engine's layout, backends/kernels/sampler.py's LAYOUT) so the file also compiles on its own.
#ifndef VT_SAMPLER_THREADS
#define VT_SAMPLER_THREADS 512
#endif
#ifndef VT_NF
#define VT_NF 6
#endif
#ifndef VT_NI
#define VT_NI 26
#endif
#ifndef VT_NFI
#define VT_NFI 10
#endif
#ifndef VT_NLP
#define VT_NLP 21
#endif
#define T VT_SAMPLER_THREADS
#define WARPS (T / 32)
#define NF VT_NF
#define NI VT_NI
#define NFI VT_NFI
#define NLP VT_NLP
#define MASS_SCALE 4294967296.0f
#define VT_INF __int_as_float(0x7f800000)

__device__ __forceinline__ u32 fkey(float x) {
    u32 b = __float_as_uint(x);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ u64 mix64(u64 z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
__device__ float block_max(float v, float* sh) {
    sh[threadIdx.x] = v; __syncthreads();
    for (int s = T / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    float r = sh[0]; __syncthreads();
    return r;
}
__device__ float block_sum_f(float v, float* sh) {
    sh[threadIdx.x] = v; __syncthreads();
    for (int s = T / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    float r = sh[0]; __syncthreads();
    return r;
}
__device__ u64 block_sum_u(u64 v, u64* sh) {
    sh[threadIdx.x] = v; __syncthreads();
    for (int s = T / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    u64 r = sh[0]; __syncthreads();
    return r;
}
// Exclusive prefix sum over the block (thread order), by one thread: T adds, deterministic.
__device__ u64 block_exclusive_scan(u64 v, u64* sh) {
    sh[threadIdx.x] = v; __syncthreads();
    if (threadIdx.x == 0) { u64 acc = 0; for (int i = 0; i < T; i++) { u64 t = sh[i]; sh[i] = acc; acc += t; } }
    __syncthreads();
    u64 r = sh[threadIdx.x]; __syncthreads();
    return r;
}
__device__ void block_argmax(float v, int i, float* shv, int* shi, float* outv, int* outi) {
    shv[threadIdx.x] = v; shi[threadIdx.x] = i; __syncthreads();
    for (int s = T / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float a = shv[threadIdx.x], b = shv[threadIdx.x + s];
            int ia = shi[threadIdx.x], ib = shi[threadIdx.x + s];
            if (b > a || (b == a && ib < ia)) { shv[threadIdx.x] = b; shi[threadIdx.x] = ib; }
        }
        __syncthreads();
    }
    *outv = shv[0]; *outi = shi[0]; __syncthreads();
}

struct Filter { float temp, m, min_p; u32 kmin; int weighted; };

// Token i's tempered value, whether the filters so far keep it, and its fixed-point mass.
__device__ __forceinline__ float tempered(const float* row, int i, float temp) { return __fdiv_rn(row[i], temp); }
__device__ __forceinline__ u64 weight(const float* row, int i, const Filter& f, u32* key_out) {
    float x = tempered(row, i, f.temp);
    u32 k = fkey(x);
    *key_out = k;
    if (!f.weighted) return 1;
    if (k < f.kmin) return 0;
    float e = expf(x - f.m);
    if (f.min_p > 0.0f && e < f.min_p) return 0;
    return (u64)(e * MASS_SCALE);
}

// The largest key K with (sum of weights of keys >= K) >= want, over keys >= f.kmin when weighted.
// Each warp counts into its own histogram (most keys share their top byte: one shared histogram would
// serialize the whole block on two or three bins; measured on the H200, 2.1 ms -> 1.0 ms for Qwen3's
// top-k 20 + top-p 0.95 at 151,936 tokens), then the 256 bins are summed across the warps.
__device__ u32 radix_select(const float* row, int V, const Filter& f, u64 want, u64* whist, u64* hist,
                            u64* shared_u) {
    u32 prefix = 0, pmask = 0;
    u64* mine = whist + (threadIdx.x / 32) * 256;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < WARPS * 256; b += T) whist[b] = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < V; i += T) {
            u32 k; u64 w = weight(row, i, f, &k);
            if (w && (k & pmask) == prefix) atomicAdd(&mine[(k >> shift) & 255u], w);
        }
        __syncthreads();
        for (int b = threadIdx.x; b < 256; b += T) {
            u64 s = 0;
            for (int w = 0; w < WARPS; w++) s += whist[w * 256 + b];
            hist[b] = s;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            u32 sel = 0;
            for (int b = 255; b >= 0; b--) {
                if (hist[b] >= want) { sel = (u32)b; break; }
                want -= hist[b];
            }
            shared_u[0] = sel; shared_u[1] = want;
        }
        __syncthreads();
        prefix |= (u32)shared_u[0] << shift; pmask |= 255u << shift;
        want = shared_u[1];
        __syncthreads();
    }
    return prefix;
}

extern "C" __global__ void vt_sample(float* logits, const float* fparams, const long long* iparams,
                                     const long long* hist, float* hist_raw, const long long* bias_ids,
                                     const float* bias_vals, float* bias_raw, long long* out_ids,
                                     float* lp_vals, long long* lp_ids, int V, int L, int W, int defer_draw) {
    __shared__ float shf[T];
    __shared__ int shi[T];
    __shared__ u64 shu[T];
    __shared__ u64 hist256[256];
    __shared__ u64 whist[WARPS * 256];
    __shared__ u64 shx[2];
    const int r = blockIdx.x, tid = threadIdx.x;
    float* row = logits + (long long)r * V;
    const float* fp = fparams + r * NF;
    const long long* ip = iparams + r * NI;
    const long long* h = hist + (long long)r * L;
    float* hr = hist_raw + (long long)r * L;
    const float temp = fp[0], top_p = fp[1], min_p = fp[2], rep = fp[3], pres = fp[4], freq = fp[5];
    const u64 seed = (u64)ip[0], counter = (u64)ip[1];
    const long long top_k = ip[2];
    const int num_prompt = (int)ip[3], num_hist = (int)ip[4], num_lp = (int)ip[5], num_banned = (int)ip[6];
    const long long forced = ip[7];
    const int num_bias = forced < 0 ? (int)ip[8] : 0, allowed = (int)ip[9];  // a forced row scores raw logits
    const long long* bi = bias_ids + (long long)r * W;
    float* br = bias_raw + (long long)r * W;

    int bad = 0;
    for (int i = tid; i < V; i += T) bad |= !isfinite(row[i]);
    if (block_max((float)bad, shf) > 0.0f) { if (tid == 0) out_ids[r] = -1; return; }

    float lse = 0.0f;
    if (num_lp > 0) {  // the raw log-softmax: its normalizer and the top n tokens, before anything changes
        float m = -VT_INF;
        for (int i = tid; i < V; i += T) m = fmaxf(m, row[i]);
        m = block_max(m, shf);
        float s = 0.0f;
        for (int i = tid; i < V; i += T) s += expf(row[i] - m);
        lse = m + logf(block_sum_f(s, shf));
        int n = num_lp - 1;
        if (n > 0) {
            Filter raw = {1.0f, m, 0.0f, 0u, 0};
            u32 kn = radix_select(row, V, raw, (u64)n, whist, hist256, shx);
            // the n picks: keys above kn, then keys equal to kn in index order (contiguous chunks)
            int chunk = (V + T - 1) / T, lo = tid * chunk, hi = min(V, lo + chunk);
            u64 gt = 0, eq = 0;
            for (int i = lo; i < hi; i++) { u32 k = fkey(row[i]); gt += k > kn; eq += k == kn; }
            u64 gt_off = block_exclusive_scan(gt, shu);
            u64 n_gt = block_sum_u(gt, shu);
            u64 eq_off = block_exclusive_scan(eq, shu);
            for (int i = lo; i < hi; i++) {
                u32 k = fkey(row[i]);
                long long slot = -1;
                if (k > kn) slot = (long long)gt_off++;
                else if (k == kn) { slot = (long long)(n_gt + eq_off); eq_off++; }
                if (slot >= 0 && slot < n) { lp_ids[r * NLP + slot] = i; lp_vals[r * NLP + slot] = row[i]; }
            }
            __syncthreads();
            if (tid == 0) {  // order the n by value, then index (insertion sort of at most 20)
                float* lv = lp_vals + r * NLP;
                long long* li = lp_ids + r * NLP;
                for (int a = 1; a < n; a++) {
                    float v = lv[a]; long long id = li[a]; int b = a - 1;
                    while (b >= 0 && (lv[b] < v || (lv[b] == v && li[b] > id))) {
                        lv[b + 1] = lv[b]; li[b + 1] = li[b]; b--;
                    }
                    lv[b + 1] = v; li[b + 1] = id;
                }
                for (int a = 0; a < n; a++) lv[a] -= lse;
            }
            __syncthreads();
        }
    }

    if (num_bias > 0) {  // vLLM's order: allowed_token_ids, then logit_bias, both before penalties and filters
        const float* bv = bias_vals + (long long)r * W;
        for (int j = tid; j < num_bias; j += T) br[j] = row[bi[j]];
        __syncthreads();
        if (allowed) {
            for (int i = tid; i < V; i += T) row[i] = -VT_INF;
            __syncthreads();
        }
        for (int j = tid; j < num_bias; j += T) row[bi[j]] = __fadd_rn(br[j], bv[j]);
        __syncthreads();
    }
    if (num_hist > 0) {  // penalties: every history token's raw value saved, then one write per distinct token
        for (int j = tid; j < num_hist; j += T) hr[j] = row[h[j]];
        __syncthreads();
        for (int j = tid; j < num_hist; j += T) {
            long long t = h[j];
            bool first = true;
            for (int k = 0; k < j; k++) if (h[k] == t) { first = false; break; }
            if (!first) continue;
            float v = hr[j];
            if (rep != 1.0f) v = v > 0.0f ? __fdiv_rn(v, rep) : __fmul_rn(v, rep);
            int cnt = 0;
            for (int k = num_prompt; k < num_hist; k++) cnt += h[k] == t;
            if (cnt > 0) v = __fsub_rn(v, __fadd_rn(__fmul_rn(freq, (float)cnt), pres));
            row[t] = v;
        }
        __syncthreads();
    }
    if (tid < num_banned) row[ip[NFI + tid]] = -VT_INF;
    __syncthreads();

    int tok;
    if (defer_draw && forced < 0 && temp != 0.0f) {  // the split kernels below draw it: mark it, keep lse for them
        if (tid == 0) { out_ids[r] = -2; if (num_lp > 0) lp_vals[r * NLP + NLP - 1] = lse; }
        return;
    }
    if (forced >= 0) {
        tok = (int)forced;
    } else if (temp == 0.0f) {
        float bv = -VT_INF; int bi = V;
        for (int i = tid; i < V; i += T) { float v = row[i]; if (v > bv || (v == bv && i < bi)) { bv = v; bi = i; } }
        float mv; block_argmax(bv, bi, shf, shi, &mv, &tok);
    } else {
        float m = -VT_INF;
        for (int i = tid; i < V; i += T) m = fmaxf(m, tempered(row, i, temp));
        m = block_max(m, shf);
        Filter f = {temp, m, 0.0f, 0u, 0};
        if (top_k > 0 && top_k < V) f.kmin = radix_select(row, V, f, (u64)top_k, whist, hist256, shx);
        f.weighted = 1; f.min_p = min_p;
        u64 z = 0; u32 k;
        for (int i = tid; i < V; i += T) z += weight(row, i, f, &k);
        z = block_sum_u(z, shu);
        if (top_p < 1.0f) {
            // at least one unit of mass: a top_p so small that top_p * z < 1 keeps the top token, never nothing
            f.kmin = radix_select(row, V, f, max(1ull, (u64)((double)top_p * (double)z)), whist, hist256, shx);
            z = 0;
            for (int i = tid; i < V; i += T) z += weight(row, i, f, &k);
            z = block_sum_u(z, shu);
        }
        u64 key = mix64(seed + 0x9E3779B97F4A7C15ull * (counter + 1ull));
        double u = (double)(key >> 11) * 1.1102230246251565e-16;  // 2**-53
        u64 target = (u64)(u * (double)z);
        if (target >= z) target = z - 1;
        int chunk = (V + T - 1) / T, lo = tid * chunk, hi = min(V, lo + chunk);
        u64 s = 0;
        for (int i = lo; i < hi; i++) s += weight(row, i, f, &k);
        u64 pre = block_exclusive_scan(s, shu);
        if (tid == 0) shi[0] = V - 1;
        __syncthreads();
        if (target >= pre && target < pre + s) {
            u64 acc = pre;
            for (int i = lo; i < hi; i++) { acc += weight(row, i, f, &k); if (acc > target) { shi[0] = i; break; } }
        }
        __syncthreads();
        tok = shi[0];
        __syncthreads();
    }
    if (tid == 0) {
        out_ids[r] = tok;
        if (num_lp > 0) {  // the sampled token's raw logit: saved if the penalties changed it
            float raw = row[tok];
            for (int j = 0; j < num_hist; j++) if (h[j] == tok) { raw = hr[j]; break; }
            for (int j = 0; j < num_bias; j++) if (bi[j] == tok) { raw = br[j]; break; }  // before the bias too
            lp_ids[r * NLP + NLP - 1] = tok; lp_vals[r * NLP + NLP - 1] = raw - lse;
        }
    }
}


// ---- the split sampler: SPLIT blocks per row (gridDim.y), for rows vt_sample deferred (out_ids[r] == -2) ------
// The same draw as vt_sample's, with each pass over the vocabulary shared by the row's blocks: every block counts
// its chunk (a partial max, sum or 256-bin histogram, in `parts`), and the last block of the row to finish (a
// counter per row, back at zero when it is done, so a graph replays it) merges the partials in block order and
// moves the row's state on. Sums are integers: the result never depends on which block finished first.
// state[r]: 0 max (float bits), 1 top-k key, 2 top-p key, 3 total mass, 4 want, 5 prefix, 6 prefix mask.
#define ST(r, i) state[(long long)(r) * 8 + (i)]

__device__ __forceinline__ void chunk_of(int V, int* lo, int* hi) {
    const int G = gridDim.y, per = (V + G - 1) / G;
    *lo = min(V, (int)blockIdx.y * per);
    *hi = min(V, *lo + per);
}

// Thread 0 of the last block of row r to arrive gets true (after every block's partials are visible).
__device__ bool last_block(unsigned int* counters, int r, bool* sh_last) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) *sh_last = atomicAdd(&counters[r], 1u) == gridDim.y - 1;
    __syncthreads();
    if (*sh_last) __threadfence();
    return *sh_last;
}

__device__ __forceinline__ Filter row_filter(const float* fp, const unsigned long long* state, int r, int phase) {
    Filter f;
    f.temp = fp[0];
    f.m = __uint_as_float((u32)ST(r, 0));
    f.min_p = fp[2];
    f.kmin = (u32)(phase >= 2 ? max(ST(r, 1), ST(r, 2)) : ST(r, 1));
    f.weighted = 1;
    return f;
}

extern "C" __global__ void vt_split_max(const float* logits, const float* fparams, const long long* iparams,
                                        const long long* out_ids, unsigned long long* parts,
                                        unsigned long long* state, unsigned int* counters, int V) {
    __shared__ float shf[T];
    __shared__ bool sh_last;
    const int r = blockIdx.x, G = gridDim.y;
    if (out_ids[r] != -2) return;
    const float* row = logits + (long long)r * V;
    const float temp = fparams[r * NF];
    int lo, hi;
    chunk_of(V, &lo, &hi);
    float m = -VT_INF;
    for (int i = lo + threadIdx.x; i < hi; i += T) m = fmaxf(m, tempered(row, i, temp));
    m = block_max(m, shf);
    if (threadIdx.x == 0) parts[((long long)r * G + blockIdx.y) * 256] = __float_as_uint(m);
    if (!last_block(counters, r, &sh_last) || threadIdx.x != 0) return;
    float best = -VT_INF;
    for (int g = 0; g < G; g++) best = fmaxf(best, __uint_as_float((u32)parts[((long long)r * G + g) * 256]));
    ST(r, 0) = __float_as_uint(best);
    ST(r, 1) = 0; ST(r, 2) = 0; ST(r, 5) = 0; ST(r, 6) = 0;
    ST(r, 4) = (unsigned long long)iparams[r * NI + 2];  // top_k: the first selection's want
    counters[r] = 0;
}

// One 8-bit pass of a radix selection: phase 0 top-k (every token weighs 1), phase 1 top-p (fixed-point masses
// of the top-k survivors that min_p keeps).
extern "C" __global__ void vt_split_radix(const float* logits, const float* fparams, const long long* iparams,
                                          const long long* out_ids, unsigned long long* parts,
                                          unsigned long long* state, unsigned int* counters, int V, int shift,
                                          int phase) {
    __shared__ u64 whist[WARPS * 256];
    __shared__ bool sh_last;
    const int r = blockIdx.x, G = gridDim.y;
    if (out_ids[r] != -2) return;
    const float* fp = fparams + r * NF;
    const long long top_k = iparams[r * NI + 2];
    if (phase == 0 ? !(top_k > 0 && top_k < V) : !(fp[1] < 1.0f)) return;
    const float* row = logits + (long long)r * V;
    Filter f = row_filter(fp, state, r, 1);
    f.weighted = phase;
    const u32 prefix = (u32)ST(r, 5), pmask = (u32)ST(r, 6);
    for (int b = threadIdx.x; b < WARPS * 256; b += T) whist[b] = 0;
    __syncthreads();
    u64* mine = whist + (threadIdx.x / 32) * 256;
    int lo, hi;
    chunk_of(V, &lo, &hi);
    for (int i = lo + threadIdx.x; i < hi; i += T) {
        u32 k; u64 w = weight(row, i, f, &k);
        if (w && (k & pmask) == prefix) atomicAdd(&mine[(k >> shift) & 255u], w);
    }
    __syncthreads();
    u64* out = parts + ((long long)r * G + blockIdx.y) * 256;
    for (int b = threadIdx.x; b < 256; b += T) {
        u64 t = 0;
        for (int w = 0; w < WARPS; w++) t += whist[w * 256 + b];
        out[b] = t;
    }
    if (!last_block(counters, r, &sh_last)) return;
    u64* merged = whist;  // the last block's threads merge a bin each (one thread alone took ~100 us a pass)
    for (int b = threadIdx.x; b < 256; b += T) {
        u64 h = 0;
        for (int g = 0; g < G; g++) h += parts[((long long)r * G + g) * 256 + b];  // block order
        merged[b] = h;
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    u64 want = ST(r, 4);
    u32 sel = 0;
    for (int b = 255; b >= 0; b--) {
        if (merged[b] >= want) { sel = (u32)b; break; }
        want -= merged[b];
    }
    const u32 key = prefix | (sel << shift);
    if (shift == 0) {
        ST(r, phase == 0 ? 1 : 2) = key;
        ST(r, 5) = 0; ST(r, 6) = 0;
    } else {
        ST(r, 4) = want; ST(r, 5) = key; ST(r, 6) = pmask | (255u << shift);
    }
    counters[r] = 0;
}

// The row's total mass: phase 1 over the top-k survivors min_p keeps (and, with top-p, the first selection's want),
// phase 2 over what top-p keeps too. Each block's sum stays in psum for the draw.
extern "C" __global__ void vt_split_sum(const float* logits, const float* fparams, const long long* out_ids,
                                        unsigned long long* psum, unsigned long long* state,
                                        unsigned int* counters, int V, int phase) {
    __shared__ u64 shu[T];
    __shared__ bool sh_last;
    const int r = blockIdx.x, G = gridDim.y;
    if (out_ids[r] != -2) return;
    const float* fp = fparams + r * NF;
    if (phase == 2 && !(fp[1] < 1.0f)) return;
    const float* row = logits + (long long)r * V;
    const Filter f = row_filter(fp, state, r, phase);
    int lo, hi;
    chunk_of(V, &lo, &hi);
    u64 z = 0; u32 k;
    for (int i = lo + threadIdx.x; i < hi; i += T) z += weight(row, i, f, &k);
    z = block_sum_u(z, shu);
    if (threadIdx.x == 0) psum[(long long)r * G + blockIdx.y] = z;
    if (!last_block(counters, r, &sh_last) || threadIdx.x != 0) return;
    u64 total = 0;
    for (int g = 0; g < G; g++) total += psum[(long long)r * G + g];
    ST(r, 3) = total;
    if (phase == 1) ST(r, 4) = max(1ull, (u64)((double)fp[1] * (double)total));  // top-p's want: one unit at least
    counters[r] = 0;
}

// The draw: the block whose chunk holds the target finds the token, as vt_sample does within a row.
extern "C" __global__ void vt_split_draw(const float* logits, const float* fparams, const long long* iparams,
                                         const long long* hist, const float* hist_raw, const long long* bias_ids,
                                         const float* bias_raw, long long* out_ids, float* lp_vals,
                                         long long* lp_ids, const unsigned long long* psum,
                                         const unsigned long long* state, int V, int L, int W) {
    __shared__ u64 shu[T];
    __shared__ int found;
    const int r = blockIdx.x, G = gridDim.y;
    if (out_ids[r] != -2) return;
    const float* fp = fparams + r * NF;
    const long long* ip = iparams + r * NI;
    const float* row = logits + (long long)r * V;
    const Filter f = row_filter(fp, state, r, 2);
    const u64 z = ST(r, 3);
    const u64 key = mix64((u64)ip[0] + 0x9E3779B97F4A7C15ull * ((u64)ip[1] + 1ull));
    const double u = (double)(key >> 11) * 1.1102230246251565e-16;  // 2**-53
    u64 target = (u64)(u * (double)z);
    if (target >= z) target = z - 1;
    u64 pre = 0;
    for (int g = 0; g < (int)blockIdx.y; g++) pre += psum[(long long)r * G + g];
    const u64 mine = psum[(long long)r * G + blockIdx.y];
    const bool last_chunk = blockIdx.y == G - 1;
    // (the block that finds the token writes out_ids[r] while others may still read it above: they return
    // either way, since only one block's chunk holds the target)
    if (!(target >= pre && target < pre + mine) && !(last_chunk && target >= pre + mine)) return;
    int lo, hi;
    chunk_of(V, &lo, &hi);
    const int per = (hi - lo + T - 1) / T, a = min(hi, lo + (int)threadIdx.x * per), b = min(hi, a + per);
    u64 s = 0; u32 k;
    for (int i = a; i < b; i++) s += weight(row, i, f, &k);
    u64 off = pre + block_exclusive_scan(s, shu);
    if (threadIdx.x == 0) found = V - 1;
    __syncthreads();
    if (target >= off && target < off + s) {
        u64 acc = off;
        for (int i = a; i < b; i++) { acc += weight(row, i, f, &k); if (acc > target) { found = i; break; } }
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    const int tok = found;
    out_ids[r] = tok;
    const int num_lp = (int)ip[5], num_hist = (int)ip[4], num_bias = (int)ip[8];
    if (num_lp > 0) {  // the sampled token's raw logprob: lse was kept in its slot by vt_sample
        float raw = row[tok];
        for (int j = 0; j < num_hist; j++) if (hist[(long long)r * L + j] == tok) { raw = hist_raw[(long long)r * L + j]; break; }
        for (int j = 0; j < num_bias; j++) if (bias_ids[(long long)r * W + j] == tok) { raw = bias_raw[(long long)r * W + j]; break; }
        lp_ids[r * NLP + NLP - 1] = tok;
        lp_vals[r * NLP + NLP - 1] = raw - lp_vals[r * NLP + NLP - 1];
    }
}
