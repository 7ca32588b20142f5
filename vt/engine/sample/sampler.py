"""The batched sampler: one launch samples every row of a step, on the device, inside the decode graph.

Each row reads its parameters from two arrays the input batch stages (`SamplingRows`): floats
(temperature, top_p, min_p, penalties) and ints (seed, output position, top_k, prompt and history
lengths, logprobs, banned tokens). The host copies back the sampled ids (and requested logprobs), never
logits. NumPy runs it on the CPU backend (`_sample_numpy`, the reference); CUDA runs it as one kernel
per row block (backends/kernels/sampler.cu). Both define the same draw:

1. vLLM's order before any filter: `allowed_token_ids` (every other token to -inf), then `logit_bias` (added
   to the raw logit, in float32); neither touches a forced row. Then penalties, as vLLM applies them: for
   each distinct token of the prompt or the output, repetition (HF's rule: divide a positive logit,
   multiply a negative one), then presence and frequency for tokens of the output (OpenAI's rule: subtract
   presence + frequency * count).
2. Banned tokens (EOS and stop ids while `min_tokens` is not reached) to -inf. A forced token (prompt
   logprobs) is taken as drawn. Temperature 0: argmax (lowest index on ties). Else x = logits /
   temperature, then the filters, ties at a threshold kept: top-k keeps keys >= the k-th largest;
   min-p keeps exp(x - max) >= min_p; top-p keeps the largest threshold whose kept mass reaches
   top_p of the survivors' (found by radix selection: no sort).
3. A row with a filter draws by inverse CDF over fixed-point masses (exp(x - max) * 2**32 as integers,
   summed in index order, so it is exact and order-free): one uniform per row from a counter-based hash of
   (seed, output position). A row of temperature alone draws by Gumbel-max: the largest x + g, g a token's
   Gumbel noise from the same hash and the token's index (`gumbel_noise`: float32 operations that round
   alike on both bodies), one pass with no normalizer, so the CUDA kernel needs neither the row's mass nor a
   search for the target. A seeded request draws the same tokens in any row, beside any neighbours, with
   graphs on or off, after preemption, and with or without speculation.
A row whose raw logits hold a NaN or an infinity samples -1 (the runner fails that request alone).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from backends.kernels.sampler import THREADS  # the candidate kernel's threads per block: how it deals a block's tokens

F32, I64 = np.float32, np.int64
MAX_LOGPROBS = 20
MAX_BANNED = 16
MAX_BIASED = 1024  # tokens a row's logit_bias and allowed_token_ids name together, at most
FIELDS_F = ("temperature", "top_p", "min_p", "repetition", "presence", "frequency")
FIELDS_I = ("seed", "counter", "top_k", "num_prompt", "num_hist", "num_logprobs", "num_banned", "forced", "num_bias",
            "allowed")
NF, NI = len(FIELDS_F), len(FIELDS_I) + MAX_BANNED
FORCED, NUM_BIAS, ALLOWED = (FIELDS_I.index(f) for f in ("forced", "num_bias", "allowed"))
NLP = MAX_LOGPROBS + 1  # the top-n, then the sampled token's
MASS_SCALE = np.float32(2.0**32)  # masses below 2**32 each, so V of them sum exactly in float64
DRAW_CHUNK = 1024
SPLIT = 16  # the NumPy reference's model of the CUDA split sampler's blocks per row (no draw depends on it)
QUAD = 4  # tokens a CUDA pass loads at once (a float4): a block's chunk is whole quads, a thread holds whole quads
SPLIT_BLOCKS = 512  # the CUDA split sampler's blocks a launch aims at (split_blocks) ...
SPLIT_MIN, SPLIT_MAX = 2, 16  # ... and a row's fewest and most
KMAX = 32  # top-k up to this draws from a few candidates (backends/kernels/sampler.cu, vt_cand_scan)
CAND_CAP = 248  # candidates a block keeps (its slice of the split scratch)
SUPPORT_CAP = 512  # the candidate path's largest support (one token a thread of the last block)
GOLDEN, MIX1, MIX2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
# log_f32's constants (sampler.cu spells the same float32 values by their bits): ln 2, then 1/3, 1/5, 1/7, 1/9
LN2, C3, C5, C7, C9 = (F32(v) for v in (np.log(2.0), 1 / 3, 1 / 5, 1 / 7, 1 / 9))
# gumbel_noise's token hash: a Weyl step, then Wellons' lowbias32 (32-bit multiplies, cheap on the GPU)
WEYL32, LOWBIAS1, LOWBIAS2 = np.uint32(0x9E3779B9), np.uint32(0x7FEB352D), np.uint32(0x846CA68B)


@dataclass(slots=True)
class SamplingRows:
    """Host arrays for one step's rows (row i samples logits row i). hist is None when no row has
    penalties, bias_ids / bias_vals when no row has a logit bias or allowed tokens: they are then neither
    staged nor read."""

    fparams: np.ndarray  # [n, NF] float32
    iparams: np.ndarray  # [n, NI] int64
    hist: np.ndarray | None  # [n, L] int64: prompt then output tokens (penalized rows only)
    bias_ids: np.ndarray | None = None  # [n, W] int64: the biased (or allowed) tokens, distinct
    bias_vals: np.ndarray | None = None  # [n, W] float32: what each adds to its raw logit
    # [n, ceil(V / 32)] int32: structured outputs' next-token masks (a bit a token; all ones where a row has no
    # grammar), applied before anything reads the logits; None when no row has a grammar
    token_mask: np.ndarray | None = None

    @property
    def num_rows(self) -> int:
        return self.fparams.shape[0]

    @property
    def wants_logprobs(self) -> bool:
        return bool((self.iparams[:, FIELDS_I.index("num_logprobs")] > 0).any())


@dataclass(slots=True)
class RowSpec:
    """What one row samples with (the runner builds these from a request's ResolvedParams)."""

    temperature: float
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition: float = 1.0
    presence: float = 0.0
    frequency: float = 0.0
    seed: int = 0
    counter: int = 0  # the output position this row's token will take
    num_logprobs: int = 0  # 0: none; n: the top n-1 and the sampled one (see logprobs_of)
    history: Any = None  # prompt + output token ids, when penalties are on
    num_prompt: int = 0
    banned: tuple[int, ...] = ()
    forced: int = -1  # >= 0: no draw; this token is "sampled" (prompt logprobs score the prompt's own)
    bias: tuple[tuple[int, float], ...] = ()  # (token, added to its logit), distinct tokens
    allowed: bool = False  # only the tokens of bias may be drawn (allowed_token_ids; bias 0 where none asked)

    @property
    def has_penalties(self) -> bool:
        return self.repetition != 1.0 or self.presence != 0.0 or self.frequency != 0.0


GREEDY = RowSpec(temperature=0.0)


def pack(rows: list[RowSpec], num_rows: int, hist_width: int) -> SamplingRows:
    """Rows beyond len(rows) (padding) are greedy and read nothing."""
    fp = np.zeros((num_rows, NF), F32)
    ip = np.zeros((num_rows, NI), I64)
    ip[:, FORCED] = -1
    penalized = any(r.has_penalties for r in rows)
    hist = np.zeros((num_rows, hist_width), I64) if penalized else None
    bias_width = max((len(r.bias) for r in rows), default=0)
    bias_ids = np.zeros((num_rows, bias_width), I64) if bias_width else None
    bias_vals = np.zeros((num_rows, bias_width), F32) if bias_width else None
    hists = [len(r.history) if (r.has_penalties and r.history is not None) else 0 for r in rows]
    if rows:  # the named fields of every row in two array writes; the per-row extras below
        fp[: len(rows)] = [(r.temperature, r.top_p, r.min_p, r.repetition, r.presence, r.frequency) for r in rows]
        ip[: len(rows), : len(FIELDS_I)] = [(r.seed, r.counter, r.top_k, r.num_prompt, n_hist, r.num_logprobs,
                                             len(r.banned), r.forced, len(r.bias), r.allowed)
                                            for r, n_hist in zip(rows, hists)]
    for i, (r, n_hist) in enumerate(zip(rows, hists)):
        if r.banned:
            if len(r.banned) > MAX_BANNED:
                from vt.errors import ConfigError

                raise ConfigError(f"min_tokens bans {len(r.banned)} token ids (EOS and stop_token_ids); at most "
                                  f"{MAX_BANNED} are supported")
            ip[i, len(FIELDS_I) : len(FIELDS_I) + len(r.banned)] = r.banned
        if n_hist:
            assert hist is not None
            hist[i, :n_hist] = r.history
        if r.bias:
            assert bias_ids is not None and bias_vals is not None
            bias_ids[i, : len(r.bias)], bias_vals[i, : len(r.bias)] = zip(*r.bias)
    return SamplingRows(fp, ip, hist, bias_ids, bias_vals)


def stack(a: SamplingRows, b: SamplingRows) -> SamplingRows:
    """a's rows, then b's (one sampler launch for both): the optional arrays padded to the wider of the two,
    zeros where a side had none (its rows read none: their counts are 0)."""
    def cat(x: np.ndarray | None, y: np.ndarray | None, na: int, nb: int, dtype: Any) -> np.ndarray | None:
        if x is None and y is None:
            return None
        width = max(0 if x is None else x.shape[1], 0 if y is None else y.shape[1])
        out = np.zeros((na + nb, width), dtype)
        if x is not None:
            out[:na, : x.shape[1]] = x
        if y is not None:
            out[na:, : y.shape[1]] = y
        return out

    na, nb = a.num_rows, b.num_rows
    return SamplingRows(np.concatenate([a.fparams, b.fparams]), np.concatenate([a.iparams, b.iparams]),
                        cat(a.hist, b.hist, na, nb, I64), cat(a.bias_ids, b.bias_ids, na, nb, I64),
                        cat(a.bias_vals, b.bias_vals, na, nb, F32), _stack_masks(a, b))


def _stack_masks(a: SamplingRows, b: SamplingRows) -> np.ndarray | None:
    """a's token masks over b's, all ones for the side without one (its rows have no grammar)."""
    if a.token_mask is None and b.token_mask is None:
        return None
    words = (a.token_mask if a.token_mask is not None else b.token_mask).shape[1]  # type: ignore[union-attr]
    return np.concatenate([m if m is not None else np.full((r.num_rows, words), -1, np.int32)
                           for r, m in ((a, a.token_mask), (b, b.token_mask))])


def spread(rows: SamplingRows, at: np.ndarray, num_rows: int) -> SamplingRows:
    """num_rows rows: rows' row i at at[i], greedy padding that reads nothing everywhere else."""
    out = pack([], num_rows, 0)
    out.fparams[at], out.iparams[at] = rows.fparams, rows.iparams

    def placed(x: np.ndarray | None) -> np.ndarray | None:
        if x is None:
            return None
        full = np.zeros((num_rows, x.shape[1]), x.dtype)
        full[at] = x
        return full

    mask = None
    if rows.token_mask is not None:  # padding rows: all ones (they have no grammar)
        mask = np.full((num_rows, rows.token_mask.shape[1]), -1, np.int32)
        mask[at] = rows.token_mask
    return SamplingRows(out.fparams, out.iparams, placed(rows.hist), placed(rows.bias_ids), placed(rows.bias_vals),
                        mask)


# ---- the kernel's entry point (both backends) ----------------------------------------------------
def sample_tokens(xp: Any, logits: Any, fparams: Any, iparams: Any, hist: Any, hist_raw: Any, bias_ids: Any,
                  bias_vals: Any, bias_raw: Any, out_ids: Any, lp_vals: Any, lp_ids: Any, *split: Any,
                  general: bool = True) -> None:
    """Samples every row of logits [n, V] into out_ids [n]; rows asking for logprobs also get the raw
    log-softmax of their top tokens and of the sampled one (lp_vals / lp_ids [n, NLP]). Writes only its
    outputs and, in place, the logits (bias, penalties, bans), hist_raw [n, L] and bias_raw [n, W] (scratch):
    no allocation, so it runs inside a captured graph. `split` (the split CUDA sampler's scratch: parts, psum,
    state, counters) draws each row with SPLIT blocks; the NumPy body is the same draw either way. With split and
    general False, rows that `needs_general` names are left at -2 for `sample_general` (a captured graph's tail)."""
    if hasattr(xp, "RawKernel"):
        from backends.kernels.sampler import launch, launch_split

        args = (logits, fparams, iparams, hist, hist_raw, bias_ids, bias_vals, bias_raw, out_ids, lp_vals, lp_ids)
        if split:
            launch_split(xp, *args, len(FIELDS_I), *split, general=general)
        else:
            launch(xp, *args, len(FIELDS_I))
        return
    arrays = [np.asarray(a) for a in (logits, fparams, iparams, hist, bias_ids, bias_vals, out_ids, lp_vals, lp_ids)]
    _sample_numpy(*arrays)


def sample_general(xp: Any, logits: Any, fparams: Any, iparams: Any, hist: Any, hist_raw: Any, bias_ids: Any,
                   bias_vals: Any, bias_raw: Any, out_ids: Any, lp_vals: Any, lp_ids: Any, *split: Any) -> None:
    """The split sampler's general passes: draws the rows `sample_tokens(..., general=False)` left at -2. The NumPy
    body drew every row already: nothing to do there."""
    if hasattr(xp, "RawKernel") and split:
        from backends.kernels.sampler import launch_general

        launch_general(xp, logits, fparams, iparams, hist, hist_raw, bias_ids, bias_raw, out_ids, lp_vals, lp_ids,
                       len(FIELDS_I), *split)


def needs_general(fparams: np.ndarray, iparams: np.ndarray, vocab: int) -> bool:
    """Whether a row of these draws with neither the candidates (top-k up to KMAX) nor the plain mass (no top-k,
    no top-p): top-k above KMAX, or top-p without top-k."""
    temp, top_p = fparams[:, 0], fparams[:, 1]
    top_k, forced = iparams[:, FIELDS_I.index("top_k")], iparams[:, FORCED]
    has_k = (top_k > 0) & (top_k < vocab)
    return bool(((temp != 0) & (forced < 0) & ((has_k & (top_k > KMAX)) | (~has_k & (top_p < 1.0)))).any())


# ---- the NumPy reference ---------------------------------------------------------------------------
def mix64(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * MIX1
    z = (z ^ (z >> np.uint64(27))) * MIX2
    return z ^ (z >> np.uint64(31))


def row_hash(seed: np.ndarray, counter: np.ndarray) -> np.ndarray:
    """A row's hash of (seed, output position): its mass draw's uniform comes from it."""
    seed, counter = np.asarray(seed), np.asarray(counter)
    with np.errstate(over="ignore"):
        return mix64(seed.astype(np.uint64) + GOLDEN * (counter.astype(np.uint64) + np.uint64(1)))


def uniform(seed: np.ndarray, counter: np.ndarray) -> np.ndarray:
    """The row's one uniform in [0, 1): its row_hash, 53 bits."""
    return (row_hash(seed, counter) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def log_f32(y: np.ndarray) -> np.ndarray:
    """log(y) for positive normal float32 y, in float32 multiplies, adds and one division, each correctly rounded,
    so sampler.cu's copy in __fmul_rn / __fadd_rn / __fdiv_rn (never a fused multiply-add) gives the same bits:
    y = 2**e m with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(t) with t = (m - 1) / (m + 1) by its series to t**9
    (|t| < 0.172: the first term left out is below 3e-9)."""
    bits = np.asarray(y, F32).view(np.uint32)
    e = (bits >> np.uint32(23)).astype(np.int32) - 127
    mb = (bits & np.uint32(0x7FFFFF)) | np.uint32(0x3F800000)
    big = mb > np.uint32(0x3FB504F3)  # m past sqrt(2): halve it (the exponent's bits minus one), exact
    m = np.where(big, mb - np.uint32(1 << 23), mb).view(F32)
    e = (e + big).astype(F32)
    t = (m - F32(1)) / (m + F32(1))
    t2 = t * t
    p = t2 * (C3 + t2 * (C5 + t2 * (C7 + t2 * C9)))
    tt = t + t
    return e * LN2 + (tt + tt * p)


def lowbias32(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint32(16))
    x = x * LOWBIAS1
    x = x ^ (x >> np.uint32(15))
    x = x * LOWBIAS2
    return x ^ (x >> np.uint32(16))


def gumbel_uniforms(keys: np.ndarray, vocab: int) -> np.ndarray:
    """The uniforms [n, vocab] float32 of rows with these row_hash keys [n]: token i's is u = (2 k + 1) / 2**24
    (exact in float32, never 0 or 1), k the top 23 bits of lowbias32(key's two halves xored + (i + 1) WEYL32)."""
    keys = np.asarray(keys, np.uint64)
    k32 = (keys >> np.uint64(32)).astype(np.uint32) ^ (keys & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    h = lowbias32(k32[:, None] + WEYL32 * np.arange(1, vocab + 1, dtype=np.uint32))
    # 1 + k 2**-23, less 1, plus 2**-24: each step exact, so the kernel builds the same u from the bits
    return ((h >> np.uint32(9)) | np.uint32(0x3F800000)).view(F32) - F32(1) + F32(2.0**-24)


def gumbel_noise(keys: np.ndarray, vocab: int) -> np.ndarray:
    """Gumbel noise [n, vocab] float32 for rows with these row_hash keys [n]: -log(-log u) of gumbel_uniforms, by
    log_f32 (the kernel's bits)."""
    return -log_f32(-log_f32(gumbel_uniforms(keys, vocab)))


# The float64 noise's distance from gumbel_noise's stays below 1e-5 (tests/engine/test_gumbel.py, every uniform)
NOISE_SLACK = 2.0**-10


def gumbel_argmax(x: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Per row of tempered logits x [n, vocab] float32, argmax(x + gumbel_noise) (the lowest index on ties), with
    gumbel_noise computed only where a token can win. The noise in float64 logs, less and plus NOISE_SLACK, bounds
    the exact noise from both sides, so a token whose fl(x + upper) falls below the row's largest fl(x + lower)
    scores below some token (rounding is monotone); the rest, a few a row, get their exact scores. log_f32 over
    the whole vocabulary took 2.5x (B=1) to 4.8x (B=8) the mass draw's time at 151,936 tokens."""
    u = gumbel_uniforms(keys, x.shape[1])
    g = -np.log(-np.log(u.astype(np.float64)))
    with np.errstate(invalid="ignore"):  # inf - inf in a row that fails anyway
        lower = np.max(x + (g - NOISE_SLACK).astype(F32), axis=1, keepdims=True)
        rows, cols = np.nonzero(x + (g + NOISE_SLACK).astype(F32) >= lower)
        scores = np.full(x.shape, -np.inf, F32)
        scores[rows, cols] = x[rows, cols] + -log_f32(-log_f32(u[rows, cols]))
    return np.argmax(scores, axis=1)


def keys(x: np.ndarray) -> np.ndarray:
    """Order-preserving uint32 keys of float32 values (larger value, larger key)."""
    b = x.astype(F32).view(np.uint32)
    return np.where(b & np.uint32(0x80000000), ~b, b | np.uint32(0x80000000))


def apply_penalties(row: np.ndarray, hist: np.ndarray, num_prompt: int, rep: float, pres: float,
                    freq: float) -> None:
    """In place, in float32, once per distinct token of the history (the CUDA kernel's arithmetic)."""
    tokens = np.unique(hist)
    counts = np.zeros(tokens.size, np.int64)
    out_tokens, out_counts = np.unique(hist[num_prompt:], return_counts=True)
    counts[np.searchsorted(tokens, out_tokens)] = out_counts
    v = row[tokens]
    if rep != 1.0:
        with np.errstate(over="ignore"):  # a tiny penalty may overflow: the draw fails that row alone
            v = np.where(v > 0, v / F32(rep), v * F32(rep)).astype(F32)
    hit = counts > 0
    v[hit] = v[hit] - (F32(freq) * counts[hit].astype(F32) + F32(pres))
    row[tokens] = v


def merge_partials(parts: np.ndarray) -> np.ndarray:
    """The histogram of a row from its blocks' partial ones [SPLIT, 256]: summed in block order (integers held
    exactly in float64), so the threshold never depends on which block finished first."""
    return parts.sum(axis=0)


def radix_select(k: np.ndarray, w: np.ndarray, chunk: np.ndarray, want: float) -> int:
    """The largest key K whose keys >= K weigh at least `want` (k: uint32 keys, w: their weights, chunk: the
    vocabulary block each sits in). Four 8-bit passes; each a histogram per block of the vocabulary, as the
    CUDA kernel's SPLIT blocks per row count them, merged, then the bin reaching `want` from the top."""
    prefix = pmask = 0
    for shift in (24, 16, 8, 0):
        live = (k & np.uint32(pmask)) == np.uint32(prefix)
        if pmask and not (k[live] != k[live][0]).any():  # one key left: the passes to come select its bytes
            return int(k[live][0])
        byte = ((k[live] >> np.uint32(shift)) & np.uint32(255)).astype(np.int64)
        parts = np.bincount(chunk[live] * 256 + byte, weights=w[live], minlength=SPLIT * 256)
        hist = merge_partials(parts.reshape(SPLIT, 256))
        from_top = np.cumsum(hist[::-1])
        i = int(np.searchsorted(from_top, want, side="left"))
        sel = 255 - i if i < 256 else 0
        want -= float(from_top[min(i, 255)] - hist[sel]) if i < 256 else float(from_top[-1])
        prefix |= sel << shift
        pmask |= 255 << shift
    return prefix


def _packed(k: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """(key, index) as one uint64 ordering larger keys first, then lower indices; 0 is no token."""
    return (k.astype(np.uint64) << np.uint64(32)) | (~idx.astype(np.uint32)).astype(np.uint64)


def _kth_key(vals: np.ndarray, k: int) -> int:
    """The key of the k-th largest packed value (0 when there are fewer than k)."""
    vals = vals[vals != 0]
    return int(np.partition(vals, vals.size - k)[vals.size - k] >> np.uint64(32)) if vals.size >= k else 0


def split_blocks(rows: int) -> int:
    """The CUDA split sampler's blocks per row for a batch of rows: about SPLIT_BLOCKS blocks in all, a power of two
    between SPLIT_MIN and SPLIT_MAX. Each block pays a fixed cost (its merge, the candidate kernel's sort of its
    threads' largest keys) beside its share of the row. H200, Qwen3's sampling defaults, the captured sampler: at
    B = 256, 16 blocks a row (4,096 blocks; vt_cand_scan 236 us for 156 MB read) 255 us, 8 195, 4 170, 2 163-165;
    at B = 1, 16 blocks 42 us and 64 blocks 86 us (the row's last block merges every block's candidates)."""
    want = SPLIT_BLOCKS // max(1, rows)
    return max(SPLIT_MIN, min(SPLIT_MAX, 1 << max(0, want.bit_length() - 1)))


def chunk_span(V: int, blocks: int) -> int:
    """A block's share of a row of V tokens over `blocks` blocks: ceil(V / blocks) rounded up to whole quads, so
    every chunk of an aligned row starts 16-byte aligned (the CUDA passes load four tokens at once)."""
    per = -(-V // blocks)
    return -(-per // QUAD) * QUAD


def candidate_support(k: np.ndarray, top_k: int) -> np.ndarray | None:
    """The top-k support (every token whose key reaches the k-th largest, ties kept), found as the CUDA candidate
    kernel finds it, or None where that kernel hands the row to the one-block draw. The vocabulary in SPLIT blocks of
    THREADS threads (chunk_span tokens a block); thread t of a block holds the quads t, t + THREADS, ... of its
    chunk (tokens 4t .. 4t + 3 first); a block's bound is the k-th largest of its threads' largest keys (k of its
    tokens reach it, so the row's k-th largest does); it keeps every token that reaches its bound (at most
    CAND_CAP); the row merges those that reach the largest bound."""
    V, per = k.size, chunk_span(k.size, SPLIT)
    rounds = -(-per // (QUAD * THREADS))
    span = rounds * QUAD * THREADS  # a block's tokens, padded to whole rounds of its threads' quads
    held = -(-V // per)  # blocks past the row's end hold no token: their bound is 0 and they keep nothing
    padded = np.zeros(held * span, np.uint64)
    for g in range(held):
        lo, hi = g * per, min(V, (g + 1) * per)
        padded[g * span : g * span + hi - lo] = _packed(k[lo:hi], np.arange(lo, hi))
    blocks = padded.reshape(held, span)
    by_thread = blocks.reshape(held, rounds, THREADS, QUAD)
    largest = (by_thread.max(axis=(1, 3)) >> np.uint64(32)).astype(np.uint32)  # [block, thread]
    bounds = np.partition(largest, THREADS - top_k, axis=1)[:, THREADS - top_k].astype(np.uint64)  # k-th largest
    keep = (blocks != 0) & ((blocks >> np.uint64(32)) >= bounds[:, None])
    if (keep.sum(axis=1) > CAND_CAP).any():
        return None
    merged = blocks[keep & ((blocks >> np.uint64(32)) >= bounds.max())]
    kth = _kth_key(merged, top_k)
    chosen = merged[(merged >> np.uint64(32)) >= np.uint64(kth)]
    if chosen.size > SUPPORT_CAP:
        return None
    return np.sort((~(chosen & np.uint64(0xFFFFFFFF)).astype(np.uint32)).astype(np.int64))


def support(x: np.ndarray, top_k: int, top_p: float, min_p: float) -> tuple[np.ndarray, np.ndarray]:
    """The filters on tempered logits x [V]: (the candidate token ids, ascending, and their fixed-point
    masses: floor(exp(x - max) * 2**32), integers held exactly in float32, 0 for a filtered token; what
    the CUDA kernel truncates to). With top-k the candidates are the k survivors (ties at the k-th key kept),
    not the vocabulary. Thresholds are keys found by radix selection (radix_select)."""
    V = x.size
    m = x.max()
    idx = np.arange(V)
    k = keys(x)
    chunk = idx // chunk_span(V, SPLIT)
    found = candidate_support(k, top_k) if 0 < top_k < V and top_k <= KMAX else None
    if found is not None:
        idx = found
    elif 0 < top_k < V:
        idx = np.flatnonzero(k >= radix_select(k, np.ones(V), chunk, top_k))
    e = np.exp(x[idx] - m).astype(F32)
    w = np.floor(e * MASS_SCALE)
    if min_p > 0.0:
        w *= e >= F32(min_p)
    if top_p < 1.0:
        # exact (the masses sum below 2**53); one unit at least: a top_p so small that it rounds to 0 keeps the top
        target = max(1.0, np.floor(top_p * w.sum(dtype=np.float64)))
        cut = radix_select(k[idx], w, chunk[idx], target)
        w *= k[idx] >= cut
    return idx, w


def _draw(w: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse CDF over rows of fixed-point masses [n, V]: the first index whose running sum exceeds
    floor(u * total). Sums of chunks first, then one chunk's running sum: exact (integers below 2**53)
    in any order, and two short passes instead of a float64 running sum over the vocabulary."""
    starts = np.arange(0, w.shape[1], DRAW_CHUNK)
    cum = np.cumsum(np.add.reduceat(w, starts, axis=1, dtype=np.float64), axis=1)
    total = cum[:, -1]
    target = np.minimum(np.floor(u * total), total - 1)  # u * total may round up to total
    out = np.empty(w.shape[0], np.int64)
    for i in range(w.shape[0]):
        c = int(np.searchsorted(cum[i], target[i], side="right"))
        run = np.cumsum(w[i, starts[c] : starts[c] + DRAW_CHUNK], dtype=np.float64) + (cum[i, c - 1] if c else 0.0)
        out[i] = starts[c] + int(np.searchsorted(run, target[i], side="right"))
    return out


def _raw_logprobs(row: np.ndarray, n: int) -> tuple[float, np.ndarray]:
    """The log-softmax normalizer and the n largest tokens (value descending, then index ascending)."""
    x = row.astype(np.float64)
    lse = float(x.max() + np.log(np.exp(x - x.max()).sum()))
    if n == 0:
        return lse, np.zeros(0, np.int64)
    nth = np.partition(x, x.size - n)[x.size - n]
    top = np.concatenate([np.flatnonzero(x > nth), np.flatnonzero(x == nth)])
    top = top[np.lexsort((top, -x[top]))][:n]
    return lse, top


def apply_bias(row: np.ndarray, ids: np.ndarray, vals: np.ndarray, allowed: bool) -> None:
    """In place: logit_bias added in float32; with allowed_token_ids, every token not listed to -inf first."""
    biased = (row[ids] + vals).astype(F32)
    if allowed:
        row[:] = -np.inf
    row[ids] = biased


def _sample_numpy(logits: np.ndarray, fp: np.ndarray, ip: np.ndarray, hist: np.ndarray, bias_ids: np.ndarray,
                  bias_vals: np.ndarray, out_ids: np.ndarray, lp_vals: np.ndarray, lp_ids: np.ndarray) -> None:
    """Row by row where a row needs its own work (logprobs, penalties, bans, filters); the plain draws of
    the rest in one batched pass."""
    u = uniform(ip[:, 0], ip[:, 1])
    temp, top_p, min_p = fp[:, 0], fp[:, 1], fp[:, 2]
    top_k, num_hist, num_lp, num_banned, forced = (ip[:, FIELDS_I.index(f)] for f in
                                                   ("top_k", "num_hist", "num_logprobs", "num_banned", "forced"))
    bad = ~np.isfinite(logits).all(axis=1)
    raw = {r: logits[r].copy() for r in np.flatnonzero((num_lp > 0) & ~bad)}
    for r in raw:
        lse, top = _raw_logprobs(logits[r], int(num_lp[r]) - 1)
        lp_vals[r, : top.size], lp_ids[r, : top.size] = logits[r, top] - lse, top
        lp_vals[r, NLP - 1] = lse  # held here until the draw is known
    num_bias = ip[:, NUM_BIAS]
    for r in np.flatnonzero((num_bias > 0) & (forced < 0) & ~bad):
        apply_bias(logits[r], bias_ids[r, : num_bias[r]], bias_vals[r, : num_bias[r]], bool(ip[r, ALLOWED]))
    for r in np.flatnonzero((num_hist > 0) & ~bad):
        apply_penalties(logits[r], hist[r, : num_hist[r]], int(ip[r, 3]), *(float(v) for v in fp[r, 3:6]))
    for r in np.flatnonzero(num_banned > 0):
        logits[r, ip[r, len(FIELDS_I) : len(FIELDS_I) + num_banned[r]]] = -np.inf
    out_ids[:] = np.where(forced >= 0, forced, -1)
    greedy = (temp == 0.0) & (forced < 0)
    out_ids[greedy] = np.argmax(logits[greedy], axis=1)
    drawn = ~greedy & (forced < 0) & ~bad
    filtered = drawn & (((top_k > 0) & (top_k < logits.shape[1])) | (top_p < 1.0) | (min_p > 0.0))
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is found below, by the masses it leaves
        for r in np.flatnonzero(filtered):
            idx, w = support((logits[r] / F32(temp[r])).astype(F32), int(top_k[r]), float(top_p[r]),
                             float(min_p[r]))
            out_ids[r] = idx[_draw(w[None], u[r : r + 1])[0]] if np.isfinite(w).all() else -1
        plain = np.flatnonzero(drawn & ~filtered)
        for g in range(0, plain.size, 4):  # a few rows at a time: their temporaries stay in cache
            rows = plain[g : g + 4]
            # tempered by one multiply a token (the kernel's too): the reciprocal of the temperature, rounded once
            x = (logits[rows] * (F32(1) / temp[rows, None])).astype(F32)
            # a logit a penalty pushed past float32's range (or a row all -inf) fails that row alone (-1), as a
            # filtered row's NaN masses do
            finite = np.isfinite(x.max(axis=1))
            drawn_ids = gumbel_argmax(x, row_hash(ip[rows, 0], ip[rows, 1]))
            out_ids[rows] = np.where(finite, drawn_ids, -1)
    out_ids[bad] = -1
    for r, row in raw.items():
        tok = int(out_ids[r])
        lp_vals[r, NLP - 1], lp_ids[r, NLP - 1] = row[tok] - lp_vals[r, NLP - 1], tok


def logprobs_of(vals: np.ndarray, ids: np.ndarray, n: int) -> dict[int, float]:
    """A row's logprobs as the API returns them: the top n tokens and the sampled one."""
    out = {int(t): float(v) for t, v in zip(ids[:n], vals[:n])}
    out[int(ids[NLP - 1])] = float(vals[NLP - 1])
    return out
