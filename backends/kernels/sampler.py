"""The batched sampler's CUDA binding. Its NumPy twin is `_sample_numpy` in vt/engine/sample/sampler.py, whose
`sample_tokens` is the call site that picks one body or the other."""

from __future__ import annotations

from typing import Any

import numpy as np

from backends.kernels.build import Instance, function

THREADS = 512
# The row layout the engine's sampler uses today (6 floats; 10 named ints + 16 banned ids; 21 logprob slots):
# what CI compiles, since the binding itself takes the layout from the arrays it is given.
CI_INSTANCES = [Instance("sampler.cu", "vt_sample", (("VT_SAMPLER_THREADS", THREADS), ("VT_NF", 6), ("VT_NI", 26),
                                                     ("VT_NFI", 10), ("VT_NLP", 21)))]


def launch(cp: Any, logits: Any, fparams: Any, iparams: Any, hist: Any, hist_raw: Any, bias_ids: Any, bias_vals: Any,
           bias_raw: Any, out_ids: Any, lp_vals: Any, lp_ids: Any, num_int_fields: int) -> None:
    """The row layout comes from the arrays: fparams [n, NF], iparams [n, NI] whose first num_int_fields are
    the named fields and the rest the banned ids, bias_ids / bias_vals / bias_raw [n, W], lp_vals [n, NLP]."""
    inst = Instance("sampler.cu", "vt_sample", (("VT_SAMPLER_THREADS", THREADS), ("VT_NF", fparams.shape[1]),
                                                ("VT_NI", iparams.shape[1]), ("VT_NFI", num_int_fields),
                                                ("VT_NLP", lp_vals.shape[1])))
    n, V = logits.shape
    function(cp, inst)((n,), (THREADS,), (logits, fparams, iparams, hist, hist_raw, bias_ids, bias_vals, bias_raw,
                                          out_ids, lp_vals, lp_ids, np.int32(V), np.int32(hist.shape[1]),
                                          np.int32(bias_ids.shape[1])))
