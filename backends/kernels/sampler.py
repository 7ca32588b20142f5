"""The batched sampler's CUDA binding. Its NumPy twin is `_sample_numpy` in vt/engine/sample/sampler.py, whose
`sample_tokens` is the call site that picks one body or the other."""

from __future__ import annotations

from typing import Any

import numpy as np

from backends.kernels.build import Instance, function

THREADS = 512
# vt_sample's defer_draw bits: DEFER leaves a row's draw to the split kernels; KEEP_GREEDY keeps a plain greedy row's
# argmax in vt_sample's one pass (a block a row, eight float4 loads in flight a thread), which reads a row faster than
# GREEDY_IN_ROW_MAX or fewer split blocks do (H200, B=256: 54.4 us one block a row, 62.2 two blocks a row).
DEFER, KEEP_GREEDY, GREEDY_IN_ROW_MAX = 1, 2, 2
# The row layout the engine's sampler uses today (6 floats; 10 named ints + 16 banned ids; 21 logprob slots):
# what CI compiles, since the binding itself takes the layout from the arrays it is given.
LAYOUT = (("VT_SAMPLER_THREADS", THREADS), ("VT_NF", 6), ("VT_NI", 26), ("VT_NFI", 10), ("VT_NLP", 21))
SPLIT_KERNELS = ("vt_split_max", "vt_split_radix", "vt_split_sum", "vt_split_draw")
CANDIDATE_KERNELS = ("vt_cand_scan", "vt_cand_mass")
GUMBEL_BOUNDS = Instance("sampler.cu", "vt_gumbel_bounds", LAYOUT)
CI_INSTANCES = [Instance("sampler.cu", name, LAYOUT) for name in ("vt_sample", *CANDIDATE_KERNELS, *SPLIT_KERNELS)]
CI_INSTANCES.append(GUMBEL_BOUNDS)


def launch(cp: Any, logits: Any, fparams: Any, iparams: Any, hist: Any, hist_raw: Any, bias_ids: Any, bias_vals: Any,
           bias_raw: Any, out_ids: Any, lp_vals: Any, lp_ids: Any, num_int_fields: int) -> None:
    """The row layout comes from the arrays: fparams [n, NF], iparams [n, NI] whose first num_int_fields are
    the named fields and the rest the banned ids, bias_ids / bias_vals / bias_raw [n, W], lp_vals [n, NLP]."""
    _row_kernel(cp, logits, fparams, iparams, hist, hist_raw, bias_ids, bias_vals, bias_raw, out_ids, lp_vals, lp_ids,
                num_int_fields, defer_draw=0)


def _layout(fparams: Any, iparams: Any, lp_vals: Any, num_int_fields: int) -> tuple:
    """The row layout, as macros."""
    return (("VT_SAMPLER_THREADS", THREADS), ("VT_NF", fparams.shape[1]), ("VT_NI", iparams.shape[1]),
            ("VT_NFI", num_int_fields), ("VT_NLP", lp_vals.shape[1]))


def _row_kernel(cp: Any, logits: Any, fparams: Any, iparams: Any, hist: Any, hist_raw: Any, bias_ids: Any,
                bias_vals: Any, bias_raw: Any, out_ids: Any, lp_vals: Any, lp_ids: Any, num_int_fields: int,
                defer_draw: int) -> None:
    n, V = logits.shape
    inst = Instance("sampler.cu", "vt_sample", _layout(fparams, iparams, lp_vals, num_int_fields))
    function(cp, inst)((n,), (THREADS,), (logits, fparams, iparams, hist, hist_raw, bias_ids, bias_vals, bias_raw,
                                          out_ids, lp_vals, lp_ids, np.int32(V), np.int32(hist.shape[1]),
                                          np.int32(bias_ids.shape[1]), np.int32(defer_draw)))


def launch_split(cp: Any, logits: Any, fparams: Any, iparams: Any, hist: Any, hist_raw: Any, bias_ids: Any,
                 bias_vals: Any, bias_raw: Any, out_ids: Any, lp_vals: Any, lp_ids: Any, num_int_fields: int,
                 parts: Any, psum: Any, state: Any, counters: Any, *, general: bool = True) -> None:
    """The split sampler (issue 29): the row kernel does everything but the draw of rows that sample; SPLIT blocks
    per row then draw them. Two launches draw every row with top-k <= KMAX (its candidates) or with neither top-k
    nor top-p (temperature, min-p); the rest (top-k above KMAX, top-p alone) are left marked -2 for the general
    passes (`launch_general`), run here unless general is False (a captured decode graph: its driver runs them
    after the replay of a step that has such a row). Scratch: parts [n, SPLIT, 256] and psum [n, SPLIT] uint64,
    state [n, 8] uint64, counters [n] uint32 (zero, and zero again after every launch)."""
    n, V = logits.shape
    G = parts.shape[1]
    _row_kernel(cp, logits, fparams, iparams, hist, hist_raw, bias_ids, bias_vals, bias_raw, out_ids, lp_vals, lp_ids,
                num_int_fields, defer_draw=DEFER | (KEEP_GREEDY if G <= GREEDY_IN_ROW_MAX else 0))
    layout = _layout(fparams, iparams, lp_vals, num_int_fields)
    rest = (hist, hist_raw, bias_ids, bias_raw, out_ids, lp_vals, lp_ids)
    sizes = (np.int32(V), np.int32(hist.shape[1]), np.int32(bias_ids.shape[1]))
    scan = Instance("sampler.cu", "vt_cand_scan", layout)
    function(cp, scan)(
        (n, G), (THREADS,), (logits, fparams, iparams, *rest, parts, state, counters, *sizes))
    function(cp, Instance("sampler.cu", "vt_cand_mass", layout))(
        (n, mass_blocks(n, G)), (THREADS,), (logits, fparams, iparams, *rest, parts, state, counters, *sizes,
                                            np.int32(G * 256)))
    if general:
        launch_general(cp, logits, fparams, iparams, hist, hist_raw, bias_ids, bias_raw, out_ids, lp_vals, lp_ids,
                       num_int_fields, parts, psum, state, counters)


MASS_BLOCKS, MASS_MAX = 512, 64


def mass_blocks(rows: int, blocks: int) -> int:
    """vt_cand_mass's blocks a row: about MASS_BLOCKS in all, a power of two up to MASS_MAX, never fewer than the
    candidate kernel's `blocks`. At a small batch the plain mass is latency-bound (a thread's tokens one after the
    other, 16 warps an SM): more blocks give each warp fewer. Its warp sums take G * 16 of a row's blocks * 256
    slots of parts."""
    want = max(1, MASS_BLOCKS // max(1, rows))
    return max(blocks, min(MASS_MAX, 16 * blocks, 1 << (want.bit_length() - 1)))


def launch_general(cp: Any, logits: Any, fparams: Any, iparams: Any, hist: Any, hist_raw: Any, bias_ids: Any,
                   bias_raw: Any, out_ids: Any, lp_vals: Any, lp_ids: Any, num_int_fields: int, parts: Any, psum: Any,
                   state: Any, counters: Any) -> None:
    """The general passes over the rows still marked -2: max, top-k's 4 radix passes, the mass, top-p's 4, its
    mass, the draw (each a launch: a pass's blocks merge before the next reads the result)."""
    n, V = logits.shape
    G = parts.shape[1]
    layout = _layout(fparams, iparams, lp_vals, num_int_fields)

    def k(name: str) -> Any:
        return function(cp, Instance("sampler.cu", name, layout))

    grid, block, V32 = (n, G), (THREADS,), np.int32(V)
    k("vt_split_max")(grid, block, (logits, fparams, iparams, out_ids, parts, state, counters, V32))
    for phase in (0, 1):
        for shift in (24, 16, 8, 0):
            k("vt_split_radix")(grid, block, (logits, fparams, iparams, out_ids, parts, state, counters, V32,
                                              np.int32(shift), np.int32(phase)))
        k("vt_split_sum")(grid, block, (logits, fparams, out_ids, psum, state, counters, V32, np.int32(phase + 1)))
    k("vt_split_draw")(grid, block, (logits, fparams, iparams, hist, hist_raw, bias_ids, bias_raw, out_ids, lp_vals,
                                     lp_ids, psum, state, V32, np.int32(hist.shape[1]), np.int32(bias_ids.shape[1])))


def gumbel_bounds(cp: Any) -> tuple[Any, Any]:
    """For every 23-bit k, the uniform (2 k + 1) / 2**24's exact Gumbel noise and the bound the Gumbel draw skips
    tokens by (sampler.cu's gumbel_noise and gumbel_bound): [2**23] float32 each, on the device."""
    n = 1 << 23
    noise, bound = cp.empty(n, np.float32), cp.empty(n, np.float32)
    function(cp, GUMBEL_BOUNDS)((n // 256,), (256,), (noise, bound))
    return noise, bound
